package scheduler

import (
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/plan"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A stored list is planned from its tasks prepared once (plan.Prepare: every path interned, the
// one step of planning that costs as much as a topological sort of the list), when it is created
// or imported (or first planned, in a process that has not seen it), not at every
// StartExecution: a stored list's tasks and files never change, only their statuses, which pick
// the tasks planned (plan.Prepared.Subset).

// preparedList is a list's tasks prepared for planning, and the create time of the list they are
// of (a list deleted and made again under the same id is another list).
type preparedList struct {
	created time.Time
	pr      *plan.Prepared
}

// maxPreparedLists bounds the lists kept prepared (one of 100,000 tasks holds some 10 MB).
const maxPreparedLists = 16

// preparedList returns every task of stored list tl (completed ones included, as
// plan.FromSpec(tl.Spec, true)) prepared for planning, prepared once per list and process.
func (s *Server) preparedList(tl *store.TaskList) *plan.Prepared {
	s.lists.mu.Lock()
	c, ok := s.lists.prepared[tl.ID]
	s.lists.mu.Unlock()
	if ok && c.created.Equal(tl.CreateTime) {
		return c.pr
	}
	tasks, _ := plan.FromSpec(tl.Spec, true)
	pr := plan.Prepare(tasks)
	s.lists.mu.Lock()
	if s.lists.prepared == nil || len(s.lists.prepared) >= maxPreparedLists {
		s.lists.prepared = map[string]preparedList{}
	}
	s.lists.prepared[tl.ID] = preparedList{created: tl.CreateTime, pr: pr}
	s.lists.mu.Unlock()
	return pr
}

// plannedTasks returns the tasks of spec, a list of some of stored list tl's tasks in its order
// (runnable's), that plan.FromSpec(spec, false) plans, prepared: the tasks not COMPLETED, their
// dependencies on the others dropped.
func (s *Server) plannedTasks(tl *store.TaskList, spec *schedulerv1.TaskListSpec) *plan.Prepared {
	all := tl.Spec.GetTasks()
	keep := make([]bool, len(all))
	j := 0
	for _, t := range spec.GetTasks() {
		for j < len(all) && all[j].GetId() != t.GetId() {
			j++
		}
		if j == len(all) {
			// Not a subsequence of the list (cannot happen): plan spec's tasks as given.
			tasks, _ := plan.FromSpec(spec, false)
			return plan.Prepare(tasks)
		}
		keep[j] = t.GetStatus() != commonv1.TaskStatus_TASK_STATUS_COMPLETED
		j++
	}
	return s.preparedList(tl).Subset(keep)
}

// listTasks returns the tasks of stored list tl that plan.FromSpec(tl.Spec, includeCompleted)
// plans, prepared, and the ids of the COMPLETED ones it leaves out, in list order.
func (s *Server) listTasks(tl *store.TaskList, includeCompleted bool) (*plan.Prepared, []string) {
	all := tl.Spec.GetTasks()
	keep := make([]bool, len(all))
	var completed []string
	for i, t := range all {
		keep[i] = includeCompleted || t.GetStatus() != commonv1.TaskStatus_TASK_STATUS_COMPLETED
		if !keep[i] {
			completed = append(completed, t.GetId())
		}
	}
	return s.preparedList(tl).Subset(keep), completed
}
