package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/converge-dev/converge/services/scheduler/store"
)

// EnqueueConfirmation inserts the outbox row in the execution's transaction.
func (t *execTx) EnqueueConfirmation(c *store.Confirmation) error {
	if err := t.Check(); err != nil {
		return err
	}
	c.ExecutionID, c.Attempts, c.NextAttempt, c.CreateTime = t.ID(), 0, t.At, t.At
	if _, err := t.tx.ExecContext(t.ctx, `INSERT INTO knowledge_confirmations
		(assignment_id, execution_id, task_id, instance_id, principal, next_attempt_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (assignment_id) DO NOTHING`,
		c.AssignmentID, c.ExecutionID, c.TaskID, c.InstanceID, c.Principal, ts(t.At), ts(t.At)); err != nil {
		return fmt.Errorf("scheduler store: enqueue knowledge confirmation %q: %w", c.AssignmentID, err)
	}
	return nil
}

// TakeConfirmations leases the due rows in one statement (SQLite has one writer: no other taker
// runs between its read and its write).
func (s *Store) TakeConfirmations(ctx context.Context, limit int, lease time.Duration) ([]*store.Confirmation, error) {
	s.writeMu.Lock() // queue with the executions' write transactions, not in SQLite's busy handler
	defer s.writeMu.Unlock()
	at := now()
	rows, err := s.DB().QueryContext(ctx, `UPDATE knowledge_confirmations SET next_attempt_at = ?
		WHERE assignment_id IN (SELECT assignment_id FROM knowledge_confirmations WHERE next_attempt_at <= ?
			ORDER BY next_attempt_at, assignment_id LIMIT ?)
		RETURNING assignment_id, execution_id, task_id, instance_id, principal, attempts, next_attempt_at, created_at`,
		ts(at.Add(lease)), ts(at), limit)
	list, err := scanConfirmations(rows, err)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: take knowledge confirmations: %w", err)
	}
	store.SortConfirmations(list)
	return list, nil
}

// DeleteConfirmation removes a done confirmation.
func (s *Store) DeleteConfirmation(ctx context.Context, assignmentID string) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if _, err := s.DB().ExecContext(ctx, `DELETE FROM knowledge_confirmations WHERE assignment_id = ?`, assignmentID); err != nil {
		return fmt.Errorf("scheduler store: delete knowledge confirmation %q: %w", assignmentID, err)
	}
	return nil
}

// RetryConfirmation counts a failed try and makes the row due again after after.
func (s *Store) RetryConfirmation(ctx context.Context, assignmentID string, after time.Duration) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	res, err := s.DB().ExecContext(ctx, `UPDATE knowledge_confirmations SET attempts = attempts + 1, next_attempt_at = ?
		WHERE assignment_id = ?`, ts(now().Add(after)), assignmentID)
	if err != nil {
		return fmt.Errorf("scheduler store: retry knowledge confirmation %q: %w", assignmentID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(fmt.Errorf("knowledge confirmation %q: %w", assignmentID, store.ErrNotFound), err)
	}
	return nil
}

// ListConfirmations reads the outbox without taking anything.
func (s *Store) ListConfirmations(ctx context.Context, limit int) ([]*store.Confirmation, error) {
	rows, err := s.DB().QueryContext(ctx, `SELECT assignment_id, execution_id, task_id, instance_id, principal, attempts,
		next_attempt_at, created_at FROM knowledge_confirmations ORDER BY assignment_id LIMIT ?`, limit)
	list, err := scanConfirmations(rows, err)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: list knowledge confirmations: %w", err)
	}
	return list, nil
}

func scanConfirmations(rows *sql.Rows, err error) ([]*store.Confirmation, error) {
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var list []*store.Confirmation
	for rows.Next() {
		c := &store.Confirmation{}
		if err := rows.Scan(&c.AssignmentID, &c.ExecutionID, &c.TaskID, &c.InstanceID, &c.Principal, &c.Attempts,
			timeCol{&c.NextAttempt}, timeCol{&c.CreateTime}); err != nil {
			return nil, err
		}
		list = append(list, c)
	}
	return list, rows.Err()
}
