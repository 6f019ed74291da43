package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-dev/converge/services/scheduler/store"
)

// EnqueueConfirmation defers the outbox row to the commit's batch: no round trip of its own while
// the execution's row is locked.
func (t *execTx) EnqueueConfirmation(c *store.Confirmation) error {
	if err := t.Check(); err != nil {
		return err
	}
	c.ExecutionID, c.Attempts, c.NextAttempt, c.CreateTime = t.ID(), 0, t.At, t.At
	t.logRows = append(t.logRows, stmt{"enqueue knowledge confirmation", `INSERT INTO knowledge_confirmations
		(assignment_id, execution_id, task_id, instance_id, principal, next_attempt_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (assignment_id) DO NOTHING`,
		[]any{c.AssignmentID, c.ExecutionID, c.TaskID, c.InstanceID, c.Principal, t.At}})
	return nil
}

// TakeConfirmations leases the due rows in one statement; SKIP LOCKED lets two replicas take
// different rows at once.
func (s *Store) TakeConfirmations(ctx context.Context, limit int, lease time.Duration) ([]*store.Confirmation, error) {
	rows, err := s.Pool().Query(ctx, `UPDATE knowledge_confirmations k SET next_attempt_at = now() + $2 * interval '1 microsecond'
		FROM (SELECT assignment_id FROM knowledge_confirmations WHERE next_attempt_at <= now()
			ORDER BY next_attempt_at, assignment_id LIMIT $1 FOR UPDATE SKIP LOCKED) due
		WHERE k.assignment_id = due.assignment_id
		RETURNING k.assignment_id, k.execution_id, k.task_id, k.instance_id, k.principal, k.attempts, k.next_attempt_at, k.created_at`,
		limit, lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("scheduler store: take knowledge confirmations: %w", err)
	}
	list, err := pgx.CollectRows(rows, scanConfirmation)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: take knowledge confirmations: %w", err)
	}
	store.SortConfirmations(list)
	return list, nil
}

// DeleteConfirmation removes a done confirmation.
func (s *Store) DeleteConfirmation(ctx context.Context, assignmentID string) error {
	if _, err := s.Pool().Exec(ctx, `DELETE FROM knowledge_confirmations WHERE assignment_id = $1`, assignmentID); err != nil {
		return fmt.Errorf("scheduler store: delete knowledge confirmation %q: %w", assignmentID, err)
	}
	return nil
}

// RetryConfirmation counts a failed try and makes the row due again after after.
func (s *Store) RetryConfirmation(ctx context.Context, assignmentID string, after time.Duration) error {
	tag, err := s.Pool().Exec(ctx, `UPDATE knowledge_confirmations SET attempts = attempts + 1,
		next_attempt_at = now() + $2 * interval '1 microsecond' WHERE assignment_id = $1`, assignmentID, after.Microseconds())
	if err != nil {
		return fmt.Errorf("scheduler store: retry knowledge confirmation %q: %w", assignmentID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("knowledge confirmation %q: %w", assignmentID, store.ErrNotFound)
	}
	return nil
}

// ListConfirmations reads the outbox without taking anything.
func (s *Store) ListConfirmations(ctx context.Context, limit int) ([]*store.Confirmation, error) {
	rows, err := s.Pool().Query(ctx, `SELECT assignment_id, execution_id, task_id, instance_id, principal, attempts,
		next_attempt_at, created_at FROM knowledge_confirmations ORDER BY assignment_id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: list knowledge confirmations: %w", err)
	}
	list, err := pgx.CollectRows(rows, scanConfirmation)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: list knowledge confirmations: %w", err)
	}
	return list, nil
}

func scanConfirmation(row pgx.CollectableRow) (*store.Confirmation, error) {
	c := &store.Confirmation{}
	err := row.Scan(&c.AssignmentID, &c.ExecutionID, &c.TaskID, &c.InstanceID, &c.Principal, &c.Attempts, &c.NextAttempt, &c.CreateTime)
	c.NextAttempt, c.CreateTime = c.NextAttempt.UTC(), c.CreateTime.UTC()
	return c, err
}
