package scheduler

import (
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/plan"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Eager dispatch (ExecutionOptions.dispatch, DISPATCH_MODE_EAGER): waves stay the unit of
// integration and of the reports, but stop being a barrier for independent work. When the open
// wave has nothing left to lease, a claim may take a task of a later wave that is ready, like a
// target of ninja: every task it depends on is satisfied, and its conflict-ready wave is open.
//
//   - A dependency is satisfied once it completed without a commit (no repository, a task that
//     changed nothing: nothing of it to integrate), or once its wave was integrated. Each task
//     assignment counts its unsatisfied dependencies (store.Assignment.UnmetDeps, set when the run
//     is created); a completion without a commit lowers its dependents' counts at once, and a
//     wave's integration those of the dependents of the tasks whose commits it merged:
//     O(dependents) per completion, no scan of the run per claim.
//   - The conflict-ready wave (store.Assignment.ReadyWave: plan.Ready on the tasks without their
//     dependencies) is the first wave whose opening leaves no task that may still run, or be
//     integrated, before the task's own wave touching its files.
//
// Such a task starts from the open wave's base (the last integration: its satisfied
// dependencies are on it, or changed nothing), and its commit is merged with its own wave.
//
// Eager leases stop (the run goes on as strict waves) while the run has a failed or skipped task
// (its dependents must be skipped when their wave opens, not started early), and for good once a
// task was retried in a later wave (RetryTask: its dependents' ready waves no longer hold). At
// most max_parallel tasks are leased at once.

// defaultDispatch is the mode of an execution that names none.
const defaultDispatch = schedulerv1.DispatchMode_DISPATCH_MODE_EAGER

// eagerDispatch reports whether an execution with options o leases tasks of later waves early.
func eagerDispatch(o *schedulerv1.ExecutionOptions) bool {
	return o.GetDispatch() == schedulerv1.DispatchMode_DISPATCH_MODE_EAGER
}

// readyWaves are the conflict-ready waves of a new execution's tasks by task id, and how many
// of the run's tasks each of those depends on (none in strict mode). A task with no
// conflict-ready wave waits for its own wave and counts nothing.
func readyWaves(opts *schedulerv1.ExecutionOptions, tasks []plan.Task, res *plan.Result, budget int64) (ready, unmet map[string]int32) {
	if !eagerDispatch(opts) {
		return nil, nil
	}
	// The file-conflict part of readiness only: dependencies are counted, not waited for by wave.
	files := make([]plan.Task, len(tasks))
	for i, t := range tasks {
		files[i] = t
		files[i].Deps = nil
	}
	at := plan.Ready(files, res, budget)
	ready, unmet = make(map[string]int32, len(tasks)), make(map[string]int32, len(tasks))
	for i, t := range tasks {
		if at[i] == 0 {
			continue
		}
		ready[t.ID] = at[i]
		seen := make(map[int32]bool, len(t.Deps))
		for _, d := range t.Deps {
			if !seen[d] && tasks[d].ID != t.ID {
				seen[d] = true
				unmet[t.ID]++
			}
		}
	}
	return ready, unmet
}

// dependentsOf maps each task of list tl to the tasks that depend on it (each once), cached.
func (s *Server) dependentsOf(tl *store.TaskList) map[string][]string {
	s.lists.mu.Lock()
	defer s.lists.mu.Unlock()
	if m, ok := s.lists.dependents[tl.ID]; ok {
		return m
	}
	m := make(map[string][]string)
	for _, t := range tl.Spec.GetTasks() {
		seen := make(map[string]bool, len(t.GetDependsOn()))
		for _, d := range t.GetDependsOn() {
			if !seen[d] && d != t.GetId() {
				seen[d] = true
				m[d] = append(m[d], t.GetId())
			}
		}
	}
	if s.lists.dependents == nil || len(s.lists.dependents) > 256 {
		s.lists.dependents = map[string]map[string][]string{}
	}
	s.lists.dependents[tl.ID] = m
	return m
}

// satisfied lowers the unsatisfied-dependency counts of the dependents of tasks (eager runs
// only): each completed without a commit, or its commit was just integrated.
func (r *runner) satisfied(tasks ...string) error {
	if !eagerDispatch(r.e.GetOptions()) || len(tasks) == 0 {
		return nil
	}
	deps := r.s.dependentsOf(r.tl)
	var ids []string
	for _, t := range tasks {
		ids = append(ids, deps[t]...)
	}
	if len(ids) == 0 {
		return nil
	}
	return r.tx.SatisfyDependencies(ids)
}

// nextEager returns a pending task assignment of a later wave that may start now, or nil.
func (r *runner) nextEager(kinds []schedulerv1.AssignmentKind) (*store.Assignment, error) {
	if !eagerDispatch(r.e.GetOptions()) || r.e.GetFailedTasks() > 0 || r.e.GetSkippedTasks() > 0 {
		return nil, nil
	}
	if max := r.e.GetOptions().GetMaxParallel(); max > 0 && r.e.GetRunningTasks() >= max {
		return nil, nil
	}
	task := len(kinds) == 0
	for _, k := range kinds {
		task = task || k == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK
	}
	if !task {
		return nil, nil
	}
	list, err := r.tx.NextEager(r.e.GetCurrentWave(), 1)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return list[0], nil
}

// stopEager makes the run strict from now on (a task was retried in a later wave).
func (r *runner) stopEager() {
	if eagerDispatch(r.e.GetOptions()) {
		r.e.Options.Dispatch = schedulerv1.DispatchMode_DISPATCH_MODE_STRICT_WAVES
		r.changed = true
	}
}
