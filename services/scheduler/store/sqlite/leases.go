package sqlite

import (
	"context"
	"fmt"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// ClaimableExecutions reads the running executions with a pending assignment in an open wave.
// Only the execution's current wave is looked at (the one wave that is open, and the only one a
// claim leases from): indexed look-ups, not a scan of every pending assignment of later waves,
// which every waiting claim made while a wave's last tasks ran; and, for eager dispatch, the
// pending assignments of later waves that may start early (eager index: only those rows).
func (s *Store) ClaimableExecutions(ctx context.Context, limit int) ([]*schedulerv1.Execution, error) {
	rows, err := s.DB().QueryContext(ctx, `SELECT `+executionColumns+` FROM task_list_execution_runs r
		WHERE r.status = 'running' AND (EXISTS (SELECT 1 FROM parallel_execution_waves w
			JOIN wave_task_assignments a ON a.execution_id = w.execution_id AND a.wave_number = w.wave_number AND a.status = 'pending'
			WHERE w.execution_id = r.execution_id AND w.wave_number = r.current_wave AND w.status IN ('running', 'integrating'))
			OR EXISTS (SELECT 1 FROM wave_task_assignments e WHERE e.execution_id = r.execution_id
				AND e.status = 'pending' AND e.ready_wave IS NOT NULL AND e.ready_wave <= r.current_wave AND e.wave_number > r.current_wave AND e.unmet_deps = 0))
		ORDER BY r.created_at, r.execution_id LIMIT ?`, limit)
	list, err := collect(rows, err, scanExecution)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: claimable executions: %w", err)
	}
	return list, nil
}

// ExpiredLeases reads the held assignments whose lease ran out by the store's clock.
func (s *Store) ExpiredLeases(ctx context.Context, limit int) ([]*store.Assignment, error) {
	rows, err := s.DB().QueryContext(ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.status IN ('assigned', 'running') AND a.lease_expires_at <= ?
		ORDER BY a.lease_expires_at, a.assignment_id LIMIT ?`, ts(now()), limit)
	list, err := collect(rows, err, scanAssignment)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: expired leases: %w", err)
	}
	return list, nil
}

// HeldAssignments reads the assignments that the instances hold (ASSIGNED or RUNNING).
func (s *Store) HeldAssignments(ctx context.Context, instances []string, limit int) ([]*store.Assignment, error) {
	if len(instances) == 0 {
		return nil, nil
	}
	args := []any{}
	where := in(instances, &args)
	args = append(args, limit)
	rows, err := s.DB().QueryContext(ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.status IN ('assigned', 'running') AND a.instance_id IN `+where+`
		ORDER BY a.assigned_at, a.assignment_id LIMIT ?`, args...)
	list, err := collect(rows, err, scanAssignment)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: held assignments: %w", err)
	}
	return list, nil
}

// AwaitingSignOff reads the executions waiting for a person's sign-off, oldest first.
func (s *Store) AwaitingSignOff(ctx context.Context, limit int) ([]*schedulerv1.Execution, error) {
	rows, err := s.DB().QueryContext(ctx, `SELECT `+executionColumns+` FROM task_list_execution_runs r
		WHERE r.status = 'completed' AND r.outcome = 'converged_pending_human' ORDER BY r.created_at, r.execution_id LIMIT ?`, limit)
	list, err := collect(rows, err, scanExecution)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: executions awaiting sign-off: %w", err)
	}
	return list, nil
}

// ExecutionsInStatus reads the executions in some statuses, oldest first.
func (s *Store) ExecutionsInStatus(ctx context.Context, statuses []schedulerv1.ExecutionStatus, limit int) ([]*schedulerv1.Execution, error) {
	if len(statuses) == 0 {
		return nil, nil
	}
	names, err := store.ExecutionStatusNames(statuses)
	if err != nil {
		return nil, err
	}
	var args []any
	query := `SELECT ` + executionColumns + ` FROM task_list_execution_runs r
		WHERE r.status IN ` + in(names, &args) + ` ORDER BY r.created_at, r.execution_id LIMIT ?`
	rows, err := s.DB().QueryContext(ctx, query, append(args, limit)...)
	list, err := collect(rows, err, scanExecution)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: executions in status: %w", err)
	}
	return list, nil
}
