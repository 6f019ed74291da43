package scheduler

import (
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// What a new execution runs of its list (seed 003: a re-run continues where the last one stopped):
// COMPLETED tasks are never run again; SKIPPED tasks are not run and count as satisfied for their
// dependents; BLOCKED_DCR tasks wait for a person (edit the task, then RetryTask, or mark it TODO
// in the document and import it again) and so do the tasks that depend on them, directly or not.

// runnable returns a copy of spec without the tasks a new execution does not run (COMPLETED ones
// stay: plan.FromSpec leaves them out and reports them), and the ids of the tasks held back by a
// BLOCKED_DCR task (the blocked ones included), in list order.
func runnable(spec *schedulerv1.TaskListSpec) (*schedulerv1.TaskListSpec, []string) {
	blocked := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, t := range spec.GetTasks() {
			if blocked[t.GetId()] || t.GetStatus() == commonv1.TaskStatus_TASK_STATUS_COMPLETED || t.GetStatus() == commonv1.TaskStatus_TASK_STATUS_SKIPPED {
				continue
			}
			hold := t.GetStatus() == commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR
			for _, d := range t.GetDependsOn() {
				hold = hold || blocked[d]
			}
			if hold {
				blocked[t.GetId()], changed = true, true
			}
		}
	}
	out := proto.CloneOf(spec)
	out.Tasks = out.Tasks[:0]
	var held []string
	for _, t := range spec.GetTasks() {
		switch {
		case blocked[t.GetId()]:
			held = append(held, t.GetId())
		case t.GetStatus() == commonv1.TaskStatus_TASK_STATUS_SKIPPED:
		default:
			out.Tasks = append(out.Tasks, proto.CloneOf(t))
		}
	}
	return out, held
}
