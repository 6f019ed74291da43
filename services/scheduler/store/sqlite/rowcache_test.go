package sqlite

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/storetest"
)

// seen is what a transaction reads of the rows the cache keeps.
type seen struct {
	attempt, activeAgents, totalAttempts, unmetDeps int32
	status                                          schedulerv1.AssignmentStatus
}

// read reads, in one UpdateExecution of s, assignment ex/<task>, wave 1 and the execution.
func read(t *testing.T, s *Store, task string) seen {
	t.Helper()
	var got seen
	if err := s.UpdateExecution(t.Context(), "ex", func(tx store.ExecTx) error {
		a, err := tx.Assignment("ex/" + task)
		if err != nil {
			return err
		}
		w, err := tx.Wave(1)
		if err != nil {
			return err
		}
		got = seen{attempt: a.GetAttempt(), activeAgents: w.GetActiveAgents(), totalAttempts: tx.Execution().GetTotalAttempts(),
			unmetDeps: a.UnmetDeps, status: a.GetStatus()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// claim assigns ex/<task>, raises wave 1's active agents and the execution's attempts, in one
// UpdateExecution of s; fail makes the transaction fail after its writes.
func claim(t *testing.T, s *Store, task string, fail error) error {
	t.Helper()
	return s.UpdateExecution(t.Context(), "ex", func(tx store.ExecTx) error {
		a, err := tx.Assignment("ex/" + task)
		if err != nil {
			return err
		}
		a.Status, a.InstanceId, a.Attempt = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED, "agent-1", a.GetAttempt()+1
		// Times finer than the column's milliseconds: the cache keeps them as the column does.
		at := time.Now().Add(123456 * time.Nanosecond)
		a.AssignTime, a.LeaseExpireTime = timestamppb.New(at), timestamppb.New(at.Add(time.Minute))
		if err := tx.PutAssignment(a); err != nil {
			return err
		}
		w, err := tx.Wave(1)
		if err != nil {
			return err
		}
		w.ActiveAgents++
		if err := tx.PutWave(w); err != nil {
			return err
		}
		e := tx.Execution()
		e.TotalAttempts++
		if err := tx.PutExecution(e); err != nil {
			return err
		}
		return fail
	})
}

// TestRowCacheAnswersTheLastTransactionsRows: a transaction after a committed one reads the
// execution, the assignment and the wave that one read and wrote from the cache, as they are in
// the database.
func TestRowCacheAnswersTheLastTransactionsRows(t *testing.T) {
	for _, path := range []string{"file", database.SQLiteMemory} {
		t.Run(path, func(t *testing.T) {
			if path == "file" {
				path = dbtest.SQLite(t)
			}
			s, _ := placementsRunAt(t, path, 3)
			if err := claim(t, s, "t0000", nil); err != nil {
				t.Fatal(err)
			}
			hits := s.rows.hits
			got := read(t, s, "t0000")
			want := seen{attempt: 2, activeAgents: 1, totalAttempts: 1, status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED}
			if got != want {
				t.Fatalf("after a claim: %+v, want %+v", got, want)
			}
			if n := s.rows.hits - hits; n != 3 {
				t.Fatalf("%d rows answered from the cache, want 3 (the execution, the assignment, the wave)", n)
			}
			checkCacheIsTheDatabase(t, s)
		})
	}
}

// checkCacheIsTheDatabase checks every row the cache of s keeps against the database's, and
// that it keeps some of each.
func checkCacheIsTheDatabase(t *testing.T, s *Store) {
	t.Helper()
	if len(s.rows.executions) == 0 || len(s.rows.assignments) == 0 || len(s.rows.waves) == 0 {
		t.Fatalf("the cache keeps %d executions, %d assignments, %d waves", len(s.rows.executions), len(s.rows.assignments), len(s.rows.waves))
	}
	checkCachedRows(t, s)
}

// checkCachedRows checks every row the cache of s keeps against the database's.
func checkCachedRows(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	for id, cached := range s.rows.executions {
		r, _, err := scanExecutionRow(s.DB().QueryRowContext(ctx, `SELECT `+executionColumns+` FROM task_list_execution_runs r WHERE r.execution_id = ?`, id))
		if err != nil || !reflect.DeepEqual(r, cached) {
			t.Fatalf("execution %s: cached %+v\ndatabase %+v (%v)", id, cached, r, err)
		}
	}
	for id, cached := range s.rows.assignments {
		r, _, err := scanAssignmentRow(s.DB().QueryRowContext(ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a WHERE a.assignment_id = ?`, id))
		if err != nil || !reflect.DeepEqual(r, cached) {
			t.Fatalf("assignment %s: cached %+v\ndatabase %+v (%v)", id, cached, r, err)
		}
	}
	for k, cached := range s.rows.waves {
		r, err := scanWaveRowRaw(s.DB().QueryRowContext(ctx, `SELECT `+waveCountColumns+` FROM parallel_execution_waves w
			WHERE w.execution_id = ? AND w.wave_number = ?`, k.execution, k.number))
		if err != nil || !reflect.DeepEqual(r, cached) {
			t.Fatalf("wave %v: cached %+v\ndatabase %+v (%v)", k, cached, r, err)
		}
	}
}

// TestRowCacheNeverServesARowAnotherWriterChanged: between two transactions, the execution, an
// assignment and the wave the first one read are changed by another writer — another store (a
// pool of its own, as another process on the same file would be), a statement through the
// store's own pool, or on the in-memory database's one connection — and the second transaction
// reads what that writer wrote, not the rows the cache kept.
func TestRowCacheNeverServesARowAnotherWriterChanged(t *testing.T) {
	const change = `UPDATE wave_task_assignments SET attempt = 7 WHERE assignment_id = 'ex/t0000';
		UPDATE parallel_execution_waves SET active_agents = 5 WHERE wave_id = 'ex/w1';
		UPDATE task_list_execution_runs SET total_attempts = 9 WHERE execution_id = 'ex'`
	want := seen{attempt: 7, activeAgents: 5, totalAttempts: 9, status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING}
	for _, c := range []struct {
		name   string
		memory bool
		write  func(t *testing.T, s *Store, path string)
	}{
		{"another store on the file", false, func(t *testing.T, _ *Store, path string) {
			other, err := New(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = other.Close() }()
			exec(t, other, change)
		}},
		{"another store's transaction", false, func(t *testing.T, _ *Store, path string) {
			other, err := New(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = other.Close() }()
			if err := other.UpdateExecution(t.Context(), "ex", func(tx store.ExecTx) error {
				a, err := tx.Assignment("ex/t0000")
				if err != nil {
					return err
				}
				a.Attempt = 7
				if err := tx.PutAssignment(a); err != nil {
					return err
				}
				w, err := tx.Wave(1)
				if err != nil {
					return err
				}
				w.ActiveAgents = 5
				if err := tx.PutWave(w); err != nil {
					return err
				}
				e := tx.Execution()
				e.TotalAttempts = 9
				return tx.PutExecution(e)
			}); err != nil {
				t.Fatal(err)
			}
		}},
		{"the store's own pool", false, func(t *testing.T, s *Store, _ string) { exec(t, s, change) }},
		{"the in-memory connection", true, func(t *testing.T, s *Store, _ string) { exec(t, s, change) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := database.SQLiteMemory
			if !c.memory {
				path = dbtest.SQLite(t)
			}
			s, _ := placementsRunAt(t, path, 3)
			// Twice, so the second read is answered from the cache.
			first := seen{attempt: 1, status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING}
			for range 2 {
				if got := read(t, s, "t0000"); got != first {
					t.Fatalf("before: %+v, want %+v", got, first)
				}
			}
			if s.rows.hits == 0 {
				t.Fatal("nothing answered from the cache: the test checks nothing")
			}
			c.write(t, s, path)
			if got := read(t, s, "t0000"); got != want {
				t.Fatalf("after another writer: %+v, want %+v", got, want)
			}
			checkCacheIsTheDatabase(t, s)
		})
	}
}

// exec runs statements on s's pool, outside UpdateExecution.
func exec(t *testing.T, s *Store, statements string) {
	t.Helper()
	if _, err := s.DB().ExecContext(t.Context(), statements); err != nil {
		t.Fatal(err)
	}
}

// TestRowCacheForgetsWhatFailedTransactionsWrote: a transaction that fails after its writes,
// and a savepoint whose function fails, leave no row of theirs in the cache, and a dependency
// satisfied in a transaction is read back by it and by the next.
func TestRowCacheForgetsWhatFailedTransactionsWrote(t *testing.T) {
	s, _ := placementsRunAt(t, dbtest.SQLite(t), 3)
	ctx := t.Context()
	first := seen{attempt: 1, status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING}
	read(t, s, "t0000")
	failed := errors.New("refused")
	if err := claim(t, s, "t0000", failed); !errors.Is(err, failed) {
		t.Fatalf("claim: %v, want %v", err, failed)
	}
	if got := read(t, s, "t0000"); got != first {
		t.Fatalf("after a failed transaction: %+v, want %+v", got, first)
	}

	if err := s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		err := tx.Savepoint(func() error {
			a, err := tx.Assignment("ex/t0000")
			if err != nil {
				return err
			}
			a.Attempt = 5
			if err := tx.PutAssignment(a); err != nil {
				return err
			}
			return failed
		})
		if !errors.Is(err, failed) {
			return err
		}
		a, err := tx.Assignment("ex/t0000")
		if err != nil {
			return err
		}
		if a.GetAttempt() != 1 {
			t.Errorf("in the transaction after the savepoint's rollback: attempt %d, want 1", a.GetAttempt())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s, "t0000"); got != first {
		t.Fatalf("after a savepoint's rollback: %+v, want %+v", got, first)
	}

	exec(t, s, `UPDATE wave_task_assignments SET unmet_deps = 1 WHERE assignment_id = 'ex/t0001'`)
	if got := read(t, s, "t0001"); got.unmetDeps != 1 {
		t.Fatalf("unmet dependencies %d, want 1", got.unmetDeps)
	}
	if err := s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		if err := tx.SatisfyDependencies([]string{"t0001"}); err != nil {
			return err
		}
		a, err := tx.Assignment("ex/t0001")
		if err != nil {
			return err
		}
		if a.UnmetDeps != 0 {
			t.Errorf("in the transaction that satisfied it: unmet dependencies %d, want 0", a.UnmetDeps)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s, "t0001"); got.unmetDeps != 0 {
		t.Fatalf("after the dependency was satisfied: unmet dependencies %d, want 0", got.unmetDeps)
	}
	checkCacheIsTheDatabase(t, s)
}

// TestConformanceWithEveryCachedRowChecked runs the store's conformance suite with every row the
// cache keeps checked against the database after each UpdateExecution: whatever the suite's
// transactions read, write, fail or roll back, the cache never holds a row the database does
// not.
func TestConformanceWithEveryCachedRowChecked(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := New(t.Context(), dbtest.SQLite(t), database.WithMigrate())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return checkedStore{s, t}
	})
}

// checkedStore checks the cache after each UpdateExecution.
type checkedStore struct {
	*Store
	t *testing.T
}

func (s checkedStore) UpdateExecution(ctx context.Context, id string, fn func(tx store.ExecTx) error) error {
	err := s.Store.UpdateExecution(ctx, id, fn)
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	checkCachedRows(s.t, s.Store)
	return err
}

// TestRowCacheKeepsWhatSatisfyDependenciesLeaves: a transaction that satisfies dependencies
// forgets only the rows of the dependents it changes (one it read itself included), so the next
// completion reads the held assignment, the wave and the execution from the cache, as an eager
// run's completions do; and what it reads afterwards is the database's.
func TestRowCacheKeepsWhatSatisfyDependenciesLeaves(t *testing.T) {
	s, _ := placementsRunAt(t, database.SQLiteMemory, 3)
	ctx := t.Context()
	exec(t, s, `UPDATE wave_task_assignments SET unmet_deps = 2 WHERE assignment_id IN ('ex/t0001', 'ex/t0002')`)
	if err := claim(t, s, "t0000", nil); err != nil {
		t.Fatal(err)
	}
	read(t, s, "t0002") // kept with unmet_deps 2
	if err := s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		a, err := tx.Assignment("ex/t0001") // read in the transaction, before the statement
		if err != nil {
			return err
		}
		if a.UnmetDeps != 2 {
			t.Errorf("t0001 before: unmet dependencies %d, want 2", a.UnmetDeps)
		}
		if err := tx.SatisfyDependencies([]string{"t0001", "t0002", "t0002"}); err != nil {
			return err
		}
		for task, want := range map[string]int32{"t0001": 1, "t0002": 0} {
			a, err := tx.Assignment("ex/" + task)
			if err != nil {
				return err
			}
			if a.UnmetDeps != want {
				t.Errorf("%s in the transaction that satisfied it: unmet dependencies %d, want %d", task, a.UnmetDeps, want)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	hits := s.rows.hits
	if got := read(t, s, "t0000"); got.status != schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED {
		t.Fatalf("t0000: %+v, want it assigned", got)
	}
	if n := s.rows.hits - hits; n != 3 {
		t.Fatalf("%d rows answered from the cache after the dependencies were satisfied, want 3 (the execution, t0000, the wave)", n)
	}
	for task, want := range map[string]int32{"t0001": 1, "t0002": 0} {
		if got := read(t, s, task); got.unmetDeps != want {
			t.Fatalf("%s after: unmet dependencies %d, want %d", task, got.unmetDeps, want)
		}
	}
	checkCacheIsTheDatabase(t, s)
}
