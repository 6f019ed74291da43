package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// gateTests: a milestone or phase gate that requires a person's sign-off (issue 15 part 9).
var gateTests = []test{
	{"RequiresSignoffRoundTrips", testGateRequiresSignoffRoundTrips},
	{"AwaitingAndSignOffsRoundTrip", testGateAwaitingAndSignOffsRoundTrip},
}

// Task.requires_signoff is kept (the tasks.requires_signoff column), set and unset, in both views.
func testGateRequiresSignoffRoundTrips(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	run := commonv1.TaskAction_TASK_ACTION_RUN
	spec := &schedulerv1.TaskListSpec{Name: "gated", Tasks: []*commonv1.Task{
		{Id: "T1.1", Title: "schema", File: "db/schema.sql", Status: commonv1.TaskStatus_TASK_STATUS_PENDING},
		{Id: "GATE-M1", Title: "Gate of milestone M1", Action: run, Command: "true", DependsOn: []string{"T1.1"},
			Status: commonv1.TaskStatus_TASK_STATUS_PENDING},
		{Id: "GATE-P1", Title: "Gate of Phase 1", Action: run, Command: "make check", DependsOn: []string{"GATE-M1", "T1.1"},
			RequiresSignoff: true, Status: commonv1.TaskStatus_TASK_STATUS_PENDING},
		{Id: "T2.1", Title: "api", File: "api/api.go", DependsOn: []string{"GATE-P1"}, Status: commonv1.TaskStatus_TASK_STATUS_PENDING},
	}}
	created, err := s.CreateTaskList(t.Context(), "tl-gated", spec, nil)
	require.NoError(t, err)
	require.True(t, proto.Equal(spec, created.Spec), "stored:\n%v\nwant:\n%v", created.Spec, spec)
	got, err := s.GetTaskList(t.Context(), "tl-gated", store.ViewFull)
	require.NoError(t, err)
	requireSameList(t, created, got)
	byID := map[string]*commonv1.Task{}
	for _, task := range got.Spec.GetTasks() {
		byID[task.GetId()] = task
	}
	require.True(t, byID["GATE-P1"].GetRequiresSignoff())
	require.False(t, byID["GATE-M1"].GetRequiresSignoff())
	require.False(t, byID["T1.1"].GetRequiresSignoff())
}

// The gate an execution waits at and the sign-offs recorded at its gates are kept with it, also
// once the execution ended; a sign-off's decision, who, note and time come back as written.
func testGateAwaitingAndSignOffsRoundTrip(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 2)
	newRun("ex", "tl", []string{"t0"}, []string{"t1"}).create(t, s)
	update(t, s, "ex", func(tx store.ExecTx) error {
		e := tx.Execution()
		e.Status, e.AwaitingSignoffGate, e.StatusMessage = exPaused, "GATE-P1", "awaiting the sign-off of gate GATE-P1"
		return tx.PutExecution(e)
	})
	e, _, err := s.GetExecution(ctx, "ex")
	require.NoError(t, err)
	require.Equal(t, exPaused, e.GetStatus())
	require.Equal(t, "GATE-P1", e.GetAwaitingSignoffGate())
	open, err := s.ExecutionsInStatus(ctx, []schedulerv1.ExecutionStatus{exPaused}, 10)
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Equal(t, "GATE-P1", open[0].GetAwaitingSignoffGate())

	pass := &schedulerv1.GateSignOff{GateId: "GATE-P1", Decision: schedulerv1.GateDecision_GATE_DECISION_PASS, Who: "alice", Note: "checked", Time: at(1)}
	fail := &schedulerv1.GateSignOff{GateId: "GATE-P2", Decision: schedulerv1.GateDecision_GATE_DECISION_FAIL, Who: "bob (carol)", Note: "the export is wrong", Time: at(2)}
	update(t, s, "ex", func(tx store.ExecTx) error {
		e := tx.Execution()
		e.Status, e.AwaitingSignoffGate = exRunning, ""
		e.GateSignoffs = append(e.GateSignoffs, pass)
		return tx.PutExecution(e)
	})
	update(t, s, "ex", func(tx store.ExecTx) error {
		e := tx.Execution()
		require.Empty(t, e.GetAwaitingSignoffGate())
		e.Status, e.Outcome, e.StatusMessage = exFailed, commonv1.Outcome_OUTCOME_FAILED, "gate GATE-P2 signed off FAIL"
		e.GateSignoffs = append(e.GateSignoffs, fail)
		return tx.PutExecution(e)
	})
	e, _, err = s.GetExecution(ctx, "ex")
	require.NoError(t, err)
	requireProtos(t, []*schedulerv1.GateSignOff{pass, fail}, e.GetGateSignoffs())
	list, _, err := s.ListExecutions(ctx, store.ListExecutionsQuery{PageSize: 10})
	require.NoError(t, err)
	require.Len(t, list, 1)
	requireProtos(t, []*schedulerv1.GateSignOff{pass, fail}, list[0].GetGateSignoffs())
}
