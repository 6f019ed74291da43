package plan

import (
	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// FromSpec builds the planner's tasks from a task list that passed tasklist.Validate. Tasks
// already COMPLETED are left out (their ids are returned, in list order) unless includeCompleted
// is set; a dependency on a task left out counts as satisfied. In a list with a repository, a
// task that declares no files (no file, no files) is a check-only task: it commits nothing, but
// it may read or run anything, so it is Exclusive (alone in its wave). Without a repository
// every task works in a scratch directory of its own and nothing is exclusive.
func FromSpec(spec *schedulerv1.TaskListSpec, includeCompleted bool) (tasks []Task, completed []string) {
	index := make(map[string]int32, len(spec.GetTasks()))
	for _, t := range spec.GetTasks() {
		if !includeCompleted && t.GetStatus() == commonv1.TaskStatus_TASK_STATUS_COMPLETED {
			completed = append(completed, t.GetId())
			continue
		}
		if _, dup := index[t.GetId()]; !dup {
			index[t.GetId()] = int32(len(tasks))
		}
		impacts := tasklist.Impacts(t)
		tasks = append(tasks, Task{ID: t.GetId(), Priority: t.GetPriority(), Impacts: impacts,
			Exclusive: spec.GetRepository() != nil && len(impacts) == 0})
	}
	i := 0
	for _, t := range spec.GetTasks() {
		if !includeCompleted && t.GetStatus() == commonv1.TaskStatus_TASK_STATUS_COMPLETED {
			continue
		}
		for _, d := range t.GetDependsOn() {
			if j, ok := index[d]; ok {
				tasks[i].Deps = append(tasks[i].Deps, j)
			}
		}
		i++
	}
	return tasks, completed
}

// Response is the PlanWavesResponse for a plan of tasks. It renders every placement's message,
// the messages sharing a few 64 KiB chunks, and allocates the placements and waves in one array
// each (a plan of 100,000 tasks would otherwise cost 100,000 allocations).
func Response(tasks []Task, r *Result, completed []string) *schedulerv1.PlanWavesResponse {
	res := &schedulerv1.PlanWavesResponse{
		Waves:            make([]*schedulerv1.PlannedWave, len(r.Waves)),
		CompletedTaskIds: completed,
		TaskCount:        int32(len(tasks)),
		LevelCount:       int32(r.Levels),
	}
	n := 0
	for _, placements := range r.Waves {
		n += len(placements)
	}
	var (
		text      textArena
		buf       []byte
		conflicts []int
		paths     []string
		pathArena []string // the conflicting paths found again now, for the responses to share
		waves     = make([]schedulerv1.PlannedWave, len(r.Waves))
		wps       = make([]schedulerv1.WavePlacement, n)
		ptrs      = make([]*schedulerv1.WavePlacement, n)
	)
	for w, placements := range r.Waves {
		wave := &waves[w]
		wave.WaveNumber = int32(w + 1)
		wave.Placements, ptrs = ptrs[:len(placements):len(placements)], ptrs[len(placements):]
		for i := range placements {
			pl := &placements[i]
			cs, ps := r.report(pl, conflicts, paths)
			if pl.why == whyConflictLater {
				conflicts, paths = cs, ps // the scratch, grown
				if len(pathArena) < len(ps) {
					pathArena = make([]string, max(len(ps), 4096))
				}
				n := copy(pathArena, ps)
				ps, pathArena = pathArena[:n:n], pathArena[n:]
			}
			buf = r.appendMessage(buf[:0], pl, cs, ps)
			wp := &wps[0]
			wps = wps[1:]
			wp.TaskId = tasks[pl.Task].ID
			wp.Reason = pl.Reason
			wp.DependencyLevel = int32(pl.Level)
			wp.ConflictingPaths = ps
			wp.Message = text.copy(buf)
			for _, c := range cs {
				wp.ConflictingTaskIds = append(wp.ConflictingTaskIds, tasks[c].ID)
			}
			wave.Placements[i] = wp
		}
		res.Waves[w] = wave
	}
	return res
}
