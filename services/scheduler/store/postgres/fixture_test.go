package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// tracedStore is a store on a fresh database whose statements tracer sees.
func tracedStore(t *testing.T, tracer pgx.QueryTracer) *postgres.Store {
	t.Helper()
	s, err := postgres.New(context.Background(), dbtest.Postgres(t), database.WithMigrate(), database.WithTracer(tracer))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// oneWaveRun creates task list "tl" (named name) of tasks, each on its own file <id>.go, and the
// running execution "ex" of it: one wave "ex/w1", every task's assignment "ex/<id>" pending.
func oneWaveRun(t *testing.T, s *postgres.Store, name string, tasks ...string) {
	t.Helper()
	spec := &schedulerv1.TaskListSpec{Name: name}
	for _, id := range tasks {
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: id, Title: "task", File: id + ".go"})
	}
	_, err := s.CreateTaskList(context.Background(), "tl", spec, nil)
	require.NoError(t, err)
	oneWaveExecution(t, s, "ex", tasks...)
}

// oneWaveExecution creates the running execution ex of task list "tl" (which holds tasks): one
// wave "<ex>/w1", every task's assignment "<ex>/<id>" pending.
func oneWaveExecution(t *testing.T, s *postgres.Store, ex string, tasks ...string) {
	t.Helper()
	n := int32(len(tasks))
	w := &schedulerv1.Wave{Id: ex + "/w1", WaveNumber: 1, Status: schedulerv1.WaveStatus_WAVE_STATUS_RUNNING, TaskCount: n}
	var as []*store.Assignment
	for i, task := range tasks {
		as = append(as, &store.Assignment{Assignment: &schedulerv1.Assignment{Id: ex + "/" + task,
			Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, WaveId: w.Id, WaveNumber: 1, TaskId: task,
			Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING, Attempt: 1}, Position: int32(i)})
	}
	e := &schedulerv1.Execution{Id: ex, TaskListId: "tl", Status: schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
		WaveCount: 1, CurrentWave: 1, TotalTasks: n}
	require.NoError(t, s.CreateExecution(context.Background(), e, []*schedulerv1.Wave{w}, as, nil))
}

// taskKeys are n task keys t0, t1, …
func taskKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("t%d", i)
	}
	return keys
}

// migratedStore is a store on a fresh database of its own, migrated, closed when the test ends,
// and that database's URL.
func migratedStore(t *testing.T) (*postgres.Store, string) {
	t.Helper()
	url := dbtest.Postgres(t)
	s, err := postgres.New(context.Background(), url, database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, url
}
