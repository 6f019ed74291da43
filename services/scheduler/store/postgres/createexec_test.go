package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// CreateExecution (StartExecution's) is two round trips: BEGIN, the task list's lock and the
// reads under it in one, the inserts and COMMIT in the other (it was six). Its refusals are the
// conformance suite's; here, that the reads still see the list's runs.
func TestCreateExecutionRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := &roundTrips{}
	s, err := postgres.New(ctx, dbtest.Postgres(t), database.WithMigrate(), database.WithTracer(rt))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = s.CreateTaskList(ctx, "tl", &schedulerv1.TaskListSpec{Name: "start",
		Tasks: []*commonv1.Task{{Id: "t0", Title: "task", File: "t0.go"}}}, nil)
	require.NoError(t, err)
	run := func(id, request string, st schedulerv1.ExecutionStatus) (*schedulerv1.Execution, int64, error) {
		w := &schedulerv1.Wave{Id: id + "/w1", WaveNumber: 1, Status: schedulerv1.WaveStatus_WAVE_STATUS_PENDING, TaskCount: 1}
		a := &store.Assignment{Assignment: &schedulerv1.Assignment{Id: id + "/t0", Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK,
			WaveId: w.Id, WaveNumber: 1, TaskId: "t0", Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING, Attempt: 1}}
		e := &schedulerv1.Execution{Id: id, TaskListId: "tl", Status: st, WaveCount: 1, TotalTasks: 1, RequestId: request}
		before := rt.n.Load()
		err := s.CreateExecution(ctx, e, []*schedulerv1.Wave{w}, []*store.Assignment{a},
			[]*commonv1.LogEntry{{EventType: commonv1.EventType_EVENT_TYPE_EXECUTION_STARTED, Message: "started"}})
		return e, rt.n.Load() - before, err
	}
	e, n, err := run("ex1", "r1", schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "BEGIN, the lock and its reads; the inserts and COMMIT")
	require.EqualValues(t, 1, e.GetRunNumber())
	require.EqualValues(t, 1, e.GetLastSeq())

	_, _, err = run("ex2", "r2", schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING)
	require.ErrorIs(t, err, store.ErrActive, "ex1 is still open")
	_, _, err = run("ex2", "r1", schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)
	require.ErrorIs(t, err, store.ErrAlreadyExists, "the same request id")
	e, _, err = run("ex2", "r2", schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)
	require.NoError(t, err)
	require.EqualValues(t, 2, e.GetRunNumber())
	_, _, err = run("ex2", "r3", schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)
	require.ErrorIs(t, err, store.ErrAlreadyExists, "the same execution id")
	require.ErrorIs(t, s.CreateExecution(ctx, &schedulerv1.Execution{Id: "ex3", TaskListId: "nope"}, nil, nil, nil), store.ErrNotFound)
}
