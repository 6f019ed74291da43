package sqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// ReadLog reads log entries and the execution's last seq in one statement, so both come from
// one snapshot.
func (s *Store) ReadLog(ctx context.Context, q store.LogQuery) ([]*commonv1.LogEntry, bool, int64, error) {
	where := []string{"l.execution_id = ?", "l.seq > ?"}
	args := []any{q.ExecutionID, q.AfterSeq}
	if q.TaskID != "" {
		where = append(where, "l.task_key = ?")
		args = append(args, q.TaskID)
	}
	if q.InstanceID != "" {
		where = append(where, "l.instance_id = ?")
		args = append(args, q.InstanceID)
	}
	if len(q.EventTypes) > 0 {
		types, err := store.EventTypeNames(q.EventTypes)
		if err != nil {
			return nil, false, 0, err
		}
		where = append(where, "l.event_type IN "+in(types, &args))
	}
	order := "ASC"
	if q.Tail {
		order = "DESC"
	}
	args = append(args, q.Limit+1, q.ExecutionID)
	query := `SELECT r.last_seq, p.* FROM task_list_execution_runs r
		LEFT JOIN (SELECT ` + logColumns + ` FROM task_execution_log l WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY l.seq ` + order + ` LIMIT ?) p ON true
		WHERE r.execution_id = ? ORDER BY p.seq`
	rows, err := s.DB().QueryContext(ctx, query, args...)
	if err != nil {
		return nil, false, 0, fmt.Errorf("scheduler store: read log of %q: %w", q.ExecutionID, err)
	}
	defer func() { _ = rows.Close() }()
	found := false
	var lastSeq int64
	var list []store.LogRow
	for rows.Next() {
		found = true
		var (
			r                 store.LogRow
			execID, eventType *string
			seq               *int64
			message           *string
			created           *time.Time
		)
		if err := rows.Scan(&lastSeq, &execID, &seq, &r.TaskKey, &r.InstanceID, &r.WaveNumber, &eventType,
			&message, &r.Context, nullTimeCol{&created}, nullTimeCol{&r.SourceTime}); err != nil {
			return nil, false, 0, fmt.Errorf("scheduler store: read log of %q: %w", q.ExecutionID, err)
		}
		if seq == nil {
			continue // the execution without a matching entry
		}
		r.ExecutionID, r.Seq, r.EventType, r.Message, r.Time = *execID, *seq, *eventType, *message, *created
		list = append(list, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, 0, fmt.Errorf("scheduler store: read log of %q: %w", q.ExecutionID, err)
	}
	if !found {
		return nil, false, 0, fmt.Errorf("execution %q: %w", q.ExecutionID, store.ErrNotFound)
	}
	entries, hasMore, err := store.LogPage(list, q)
	return entries, hasMore, lastSeq, err
}
