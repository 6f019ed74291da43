package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// A completion's SatisfyDependencies looks up each dependent task's rows by (execution, task),
// not every waiting task of the run: on a table with no statistics yet (a fresh database, as a
// new deployment's first runs), a plain join of the list with the rows scanned the run's unmet
// index by execution only and filtered the keys in the join, per completion.
func TestSatisfyDependenciesProbesEachTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, url := migratedStore(t)

	const n = 400
	spec := &schedulerv1.TaskListSpec{Name: "satisfy"}
	for i := range n {
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: fmt.Sprintf("t%d", i), Title: "task", File: fmt.Sprintf("t%d.go", i)})
	}
	_, err := s.CreateTaskList(ctx, "tl", spec, nil)
	require.NoError(t, err)
	waves := []*schedulerv1.Wave{
		{Id: "ex/w1", WaveNumber: 1, Status: schedulerv1.WaveStatus_WAVE_STATUS_RUNNING, TaskCount: 1},
		{Id: "ex/w2", WaveNumber: 2, Status: schedulerv1.WaveStatus_WAVE_STATUS_PENDING, TaskCount: n - 1},
	}
	var as []*store.Assignment
	for i := range n {
		a := &store.Assignment{Assignment: &schedulerv1.Assignment{Id: fmt.Sprintf("ex/t%d", i),
			Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, WaveId: "ex/w1", WaveNumber: 1, TaskId: fmt.Sprintf("t%d", i),
			Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING, Attempt: 1}, Position: int32(i)}
		if i > 0 {
			a.WaveId, a.WaveNumber, a.ReadyWave, a.UnmetDeps = "ex/w2", 2, 1, 2
		}
		as = append(as, a)
	}
	e := &schedulerv1.Execution{Id: "ex", TaskListId: "tl", Status: schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
		WaveCount: 2, CurrentWave: 1, TotalTasks: n}
	require.NoError(t, s.CreateExecution(ctx, e, waves, as, nil))

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF) "+postgres.SatisfyDependenciesSQL, "ex", []string{"t7", "t300"}, []int32{1, 2})
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	text := strings.Join(plan, "\n")
	probes := false
	for _, line := range plan {
		if strings.Contains(line, "Index Cond:") && strings.Contains(line, "execution_id =") {
			require.Contains(t, line, "task_key", "a scan of the run's rows by execution alone:\n%s", text)
			probes = true
		}
	}
	require.True(t, probes, "no index probe by (execution, task):\n%s", text)
	require.NotContains(t, text, "Rows Removed by", text)

	var got []int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT array_agg(unmet_deps ORDER BY task_key) FROM wave_task_assignments
		WHERE execution_id = 'ex' AND task_key IN ('t7', 't300', 't8')`).Scan(&got))
	require.Equal(t, []int32{0, 1, 2}, got, "t300 lowered by 2, t7 by 1, t8 untouched")
}
