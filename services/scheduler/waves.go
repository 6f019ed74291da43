package scheduler

import (
	"context"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/plan"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// PlanWaves plans the waves of a stored or inline task list without starting anything (see the
// plan package for the algorithm).
func (s *Server) PlanWaves(ctx context.Context, req *schedulerv1.PlanWavesRequest) (*schedulerv1.PlanWavesResponse, error) {
	var (
		prepared  *plan.Prepared
		completed []string
	)
	switch src := req.GetSource().(type) {
	case *schedulerv1.PlanWavesRequest_TaskListId:
		tl, err := s.store.GetTaskList(ctx, src.TaskListId, store.ViewFull)
		if err != nil {
			return nil, toStatus(err)
		}
		prepared, completed = s.listTasks(tl, req.GetIncludeCompleted())
	case *schedulerv1.PlanWavesRequest_TaskList:
		spec := src.TaskList
		bad := &badRequest{request: "PlanWavesRequest"}
		for _, v := range tasklist.Validate(spec) {
			bad.add("task_list."+v.Field, v.Description)
		}
		if err := bad.orNil(); err != nil {
			return nil, toStatus(err)
		}
		var tasks []plan.Task
		tasks, completed = plan.FromSpec(spec, req.GetIncludeCompleted())
		prepared = plan.Prepare(tasks)
	}
	res, err := prepared.Plan(ctx, int(req.GetMaxParallel()), s.planBudget)
	if err != nil {
		return nil, toStatus(err)
	}
	return plan.Response(prepared.Tasks(), res, completed), nil
}
