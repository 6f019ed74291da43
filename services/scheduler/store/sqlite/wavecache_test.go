package sqlite

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// placementsRun creates, on a new store, a task list of n tasks and an execution of one wave
// placing all of them.
func placementsRun(tb testing.TB, n int) (*Store, []*schedulerv1.WavePlacement) {
	tb.Helper()
	return placementsRunAt(tb, dbtest.SQLite(tb), n)
}

// placementsRunAt is placementsRun on the database at path.
func placementsRunAt(tb testing.TB, path string, n int) (*Store, []*schedulerv1.WavePlacement) {
	tb.Helper()
	ctx := tb.Context()
	s, err := New(ctx, path, database.WithMigrate())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	spec := &schedulerv1.TaskListSpec{Name: "tl"}
	w := &schedulerv1.Wave{Id: "ex/w1", WaveNumber: 1, Status: schedulerv1.WaveStatus_WAVE_STATUS_RUNNING, TaskCount: int32(n)}
	var as []*store.Assignment
	for i := range n {
		id := fmt.Sprintf("t%04d", i)
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: id, Title: "task", File: id + ".go"})
		w.Placements = append(w.Placements, &schedulerv1.WavePlacement{TaskId: id,
			Reason: schedulerv1.PlacementReason_PLACEMENT_REASON_DEPENDENCY_LEVEL, Message: "level 0: no dependencies"})
		as = append(as, &store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/" + id, WaveId: w.Id, WaveNumber: 1, TaskId: id,
			Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING, Attempt: 1}, Position: int32(i)})
	}
	if _, err := s.CreateTaskList(ctx, "tl", spec, nil); err != nil {
		tb.Fatal(err)
	}
	want := proto.Clone(w).(*schedulerv1.Wave).GetPlacements()
	e := &schedulerv1.Execution{Id: "ex", TaskListId: "tl", Status: schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, WaveCount: 1, CurrentWave: 1, TotalTasks: int32(n)}
	if err := s.CreateExecution(ctx, e, []*schedulerv1.Wave{w}, as, nil); err != nil {
		tb.Fatal(err)
	}
	return s, want
}

// TestPlacementsReadAgainWhenTheDetailChanges: the placements GetExecution keeps between reads
// are answered only while the row's detail is the text they were decoded from.
func TestPlacementsReadAgainWhenTheDetailChanges(t *testing.T) {
	s, want := placementsRun(t, 3)
	ctx := t.Context()
	for range 2 {
		_, waves, err := s.GetExecution(ctx, "ex")
		if err != nil {
			t.Fatal(err)
		}
		if got := waves[0].GetPlacements(); len(got) != 3 || !proto.Equal(got[2], want[2]) {
			t.Fatalf("placements %v, want %v", got, want)
		}
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE parallel_execution_wave_placements SET detail = ? WHERE wave_id = 'ex/w1'`,
		`{"placements":[{"taskId":"other","message":"rewritten"}]}`); err != nil {
		t.Fatal(err)
	}
	_, waves, err := s.GetExecution(ctx, "ex")
	if err != nil {
		t.Fatal(err)
	}
	if got := waves[0].GetPlacements(); len(got) != 1 || got[0].GetTaskId() != "other" || got[0].GetMessage() != "rewritten" {
		t.Fatalf("after the detail changed: placements %v, want the rewritten one", got)
	}
}

// BenchmarkGetExecutionPlacements: GetExecution of a one-wave execution of 1,000 tasks, with the
// placements kept between reads (cached) and decoded on every read (decoded: readWaves).
func BenchmarkGetExecutionPlacements(b *testing.B) {
	s, _ := placementsRun(b, 1000)
	ctx := b.Context()
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := s.GetExecution(ctx, "ex"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoded", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := readWaves(ctx, s.DB(), "ex"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
