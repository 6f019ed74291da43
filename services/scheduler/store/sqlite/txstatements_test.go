package sqlite

import (
	"context"
	"errors"
	"testing"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// TestUpdateExecutionEndsEveryTransaction: a transaction that fails, or whose context ends
// before its commit, leaves none of its writes and no transaction open on its connection (the
// in-memory database's only one, which every later statement uses).
func TestUpdateExecutionEndsEveryTransaction(t *testing.T) {
	for _, where := range []string{"memory", "file"} {
		t.Run(where, func(t *testing.T) {
			path := database.SQLiteMemory
			if where == "file" {
				path = dbtest.SQLite(t)
			}
			s, _ := placementsRunAt(t, path, 2)
			attempts := func() int32 {
				t.Helper()
				e, _, err := s.GetExecution(t.Context(), "ex")
				if err != nil {
					t.Fatal(err)
				}
				return e.GetTotalAttempts()
			}
			count := func(ctx context.Context, end func(context.CancelFunc) error) error {
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				return s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
					e := tx.Execution()
					e.TotalAttempts++
					if err := tx.PutExecution(e); err != nil {
						return err
					}
					return end(cancel)
				})
			}
			failed := errors.New("failed")
			if err := count(t.Context(), func(context.CancelFunc) error { return failed }); !errors.Is(err, failed) {
				t.Fatalf("a failing transaction: %v, want %v", err, failed)
			}
			if got := attempts(); got != 0 {
				t.Fatalf("after a failed transaction the execution has %d attempts, want 0", got)
			}
			if err := count(t.Context(), func(cancel context.CancelFunc) error { cancel(); return nil }); !errors.Is(err, context.Canceled) {
				t.Fatalf("a transaction whose context ended: %v, want %v", err, context.Canceled)
			}
			if got := attempts(); got != 0 {
				t.Fatalf("after a cancelled transaction the execution has %d attempts, want 0", got)
			}
			for range 2 {
				if err := count(t.Context(), func(context.CancelFunc) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if got := attempts(); got != 2 {
				t.Fatalf("after two transactions the execution has %d attempts, want 2", got)
			}
		})
	}
}
