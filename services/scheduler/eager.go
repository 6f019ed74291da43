package scheduler

import (
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/plan"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Eager dispatch (ExecutionOptions.dispatch, DISPATCH_MODE_EAGER): waves stay the unit of
// integration and of the reports, but stop being a barrier for independent work. When the open
// wave has nothing left to lease, a claim may take a task of a later wave whose ready wave
// (plan.Ready, stored with the assignment when the run is created) is open: every task it depends
// on was integrated, and no task that may still run or be integrated before it touches its files.
// Such a task starts from the open wave's base (the last integration), and its commit is merged
// with its own wave.
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

// readyWaves are the ready waves of a new execution's tasks by task id (none in strict mode).
func readyWaves(opts *schedulerv1.ExecutionOptions, tasks []plan.Task, res *plan.Result, budget int64) map[string]int32 {
	if !eagerDispatch(opts) {
		return nil
	}
	ready := plan.Ready(tasks, res, budget)
	out := make(map[string]int32, len(tasks))
	for i, t := range tasks {
		if ready[i] > 0 {
			out[t.ID] = ready[i]
		}
	}
	return out
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
