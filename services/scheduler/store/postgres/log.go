package postgres

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
	args := []any{q.ExecutionID, q.AfterSeq}
	where := []string{"l.execution_id = $1", "l.seq > $2"}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.TaskID != "" {
		where = append(where, "l.task_key = "+arg(q.TaskID))
	}
	if q.InstanceID != "" {
		where = append(where, "l.instance_id = "+arg(q.InstanceID))
	}
	if len(q.EventTypes) > 0 {
		types, err := store.EventTypeNames(q.EventTypes)
		if err != nil {
			return nil, false, 0, err
		}
		where = append(where, "l.event_type = ANY("+arg(types)+")")
	}
	order := "ASC"
	if q.Tail {
		order = "DESC"
	}
	query := `SELECT r.last_seq, p.* FROM task_list_execution_runs r
		LEFT JOIN (SELECT ` + logColumns + ` FROM task_execution_log l WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY l.seq ` + order + ` LIMIT ` + arg(q.Limit+1) + `) p ON true
		WHERE r.execution_id = $1 ORDER BY p.seq`
	rows, err := s.Pool().Query(ctx, query, args...)
	if err != nil {
		return nil, false, 0, fmt.Errorf("scheduler store: read log of %q: %w", q.ExecutionID, err)
	}
	defer rows.Close()
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
			&message, &r.Context, &created, &r.SourceTime); err != nil {
			return nil, false, 0, fmt.Errorf("scheduler store: read log of %q: %w", q.ExecutionID, err)
		}
		if seq == nil {
			continue // the execution without a matching entry
		}
		r.ExecutionID, r.Seq, r.EventType, r.Message, r.Time = *execID, *seq, *eventType, *message, created.UTC()
		utcp(r.SourceTime)
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

// insertLogManySQL inserts the log entries of one execution made at one time ($1, $2), one row
// per element of the arrays.
const insertLogManySQL = `INSERT INTO task_execution_log (execution_id, seq, task_key, instance_id,
	wave_number, event_type, message, context, created_at, source_time)
	SELECT $1, u.seq, u.task_key, u.instance_id, u.wave_number, u.event_type, u.message, u.context::jsonb, $2, u.source_time
	FROM unnest($3::bigint[], $4::text[], $5::text[], $6::int[], $7::text[], $8::text[], $9::text[], $10::timestamptz[])
		AS u(seq, task_key, instance_id, wave_number, event_type, message, context, source_time)`

// insertLog is the statement inserting a transaction's log entries, all of one execution and
// one time (its store time): one INSERT whatever their number (a grouped transaction of two
// fused completions writes eight), so Postgres parses, plans and executes one statement, not
// one per entry.
func insertLog(rows []store.LogRow) stmt {
	if len(rows) == 1 {
		return stmt{fmt.Sprintf("insert log entry %d", rows[0].Seq), insertLogSQL, logArgs(rows[0])}
	}
	n := len(rows)
	var (
		seqs            = make([]int64, n)
		keys, instances = make([]*string, n), make([]*string, n)
		waves           = make([]*int32, n)
		types, messages = make([]string, n), make([]string, n)
		contexts        = make([]*string, n)
		sources         = make([]*time.Time, n)
	)
	for i, r := range rows {
		seqs[i], keys[i], instances[i], waves[i] = r.Seq, r.TaskKey, r.InstanceID, r.WaveNumber
		types[i], messages[i], contexts[i], sources[i] = r.EventType, r.Message, r.Context, r.SourceTime
	}
	return stmt{fmt.Sprintf("insert log entries %d to %d", seqs[0], seqs[n-1]), insertLogManySQL,
		[]any{rows[0].ExecutionID, rows[0].Time, seqs, keys, instances, waves, types, messages, contexts, sources}}
}
