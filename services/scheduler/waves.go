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
	var spec *schedulerv1.TaskListSpec
	switch src := req.GetSource().(type) {
	case *schedulerv1.PlanWavesRequest_TaskListId:
		tl, err := s.store.GetTaskList(ctx, src.TaskListId, store.ViewFull)
		if err != nil {
			return nil, toStatus(err)
		}
		spec = tl.Spec
	case *schedulerv1.PlanWavesRequest_TaskList:
		spec = src.TaskList
		bad := &badRequest{request: "PlanWavesRequest"}
		for _, v := range tasklist.Validate(spec) {
			bad.add("task_list."+v.Field, v.Description)
		}
		if err := bad.orNil(); err != nil {
			return nil, toStatus(err)
		}
	}
	tasks, completed := plan.FromSpec(spec, req.GetIncludeCompleted())
	res, err := plan.PlanContext(ctx, tasks, int(req.GetMaxParallel()), s.planBudget)
	if err != nil {
		return nil, toStatus(err)
	}
	return plan.Response(tasks, res, completed), nil
}
