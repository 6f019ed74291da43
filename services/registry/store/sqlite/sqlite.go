// Package sqlite is the embedded SQLite backend of the Registry store.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/services/registry/store"
)

// Store is the Registry store on SQLite. The embedded handle provides Ping, Close, Migrate,
// MigrationStatus and DB.
type Store struct {
	*database.SQLite
}

var _ store.Store = (*Store)(nil)

// New returns a Registry store on the SQLite database at path, created if missing;
// ":memory:" gives a private in-memory database (see [database.OpenSQLite]). Several services
// may share one file: each keeps to its own tables and version table. With
// [database.WithMigrate] pending migrations are applied first.
func New(ctx context.Context, path string, opts ...database.Option) (*Store, error) {
	db, err := database.NewSQLite(ctx, path, store.Service, store.Migrations(database.DialectSQLite), opts...)
	if err != nil {
		return nil, fmt.Errorf("registry store: %w", err)
	}
	return &Store{SQLite: db}, nil
}

// Every write runs in a transaction that takes the write lock when it begins (see
// database.OpenSQLite), so read-check-write sequences are serialised. Timestamps are text in
// database.SQLiteTimeLayout, taken from SQLite's clock once per transaction.

// querier is what both *sql.DB and *sql.Tx offer.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// inTx runs fn in a write transaction.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return wrap(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return wrap(err)
	}
	return wrap(tx.Commit())
}

// now answers SQLite's clock, as stored text and as time.
func now(ctx context.Context, q querier) (string, time.Time, error) {
	var s string
	if err := q.QueryRowContext(ctx, `SELECT `+database.SQLiteNow).Scan(&s); err != nil {
		return "", time.Time{}, err
	}
	t, err := database.ParseSQLiteTime(s)
	return s, t, err
}

func format(t time.Time) string { return database.FormatSQLiteTime(t) }

// Now answers SQLite's clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	_, t, err := now(ctx, s.DB())
	return t, wrap(err)
}

// NextLockEpoch increments the epoch of lock backend name.
func (s *Store) NextLockEpoch(ctx context.Context, name string) (int64, error) {
	var epoch int64
	err := s.DB().QueryRowContext(ctx, `
		INSERT INTO lock_epochs (name, epoch) VALUES (?, 1)
		ON CONFLICT (name) DO UPDATE SET epoch = epoch + 1, updated_at = `+database.SQLiteNow+`
		RETURNING epoch`, name).Scan(&epoch)
	return epoch, wrap(err)
}

const ownershipColumns = `pattern, owner, created_at, updated_at`

type scanner interface{ Scan(dest ...any) error }

func scanOwnership(row scanner) (store.Ownership, error) {
	var (
		o                 store.Ownership
		created, upd      string
		errCreate, errUpd error
	)
	if err := row.Scan(&o.Pattern, &o.Owner, &created, &upd); err != nil {
		return store.Ownership{}, err
	}
	o.CreatedAt, errCreate = database.ParseSQLiteTime(created)
	o.UpdatedAt, errUpd = database.ParseSQLiteTime(upd)
	return o, errors.Join(errCreate, errUpd)
}

// SetOwner upserts pattern's owner and answers the previous one.
func (s *Store) SetOwner(ctx context.Context, pattern, owner string) (own store.Ownership, previous string, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT owner FROM file_ownership WHERE pattern = ?`, pattern).Scan(&previous)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		nowText, _, err := now(ctx, tx)
		if err != nil {
			return err
		}
		own, err = scanOwnership(tx.QueryRowContext(ctx, `
			INSERT INTO file_ownership (pattern, owner, base, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4)
			ON CONFLICT (pattern) DO UPDATE SET
				owner = excluded.owner, base = excluded.base,
				updated_at = CASE WHEN owner <> excluded.owner THEN excluded.updated_at ELSE updated_at END
			RETURNING `+ownershipColumns, pattern, owner, repopath.Base(pattern), nowText))
		return err
	})
	if err != nil {
		return store.Ownership{}, "", err
	}
	return own, previous, nil
}

// OwnerOf fetches the patterns whose base is an ancestor of p and picks the most specific match.
func (s *Store) OwnerOf(ctx context.Context, p string) (store.Ownership, error) {
	bases := repopath.Ancestors(p)
	args := make([]any, len(bases))
	for i, b := range bases {
		args[i] = b
	}
	rows, err := s.DB().QueryContext(ctx, `SELECT `+ownershipColumns+` FROM file_ownership WHERE base IN (`+placeholders(len(args))+`)`, args...)
	if err != nil {
		return store.Ownership{}, wrap(err)
	}
	candidates, err := collect(rows, scanOwnership)
	if err != nil {
		return store.Ownership{}, wrap(err)
	}
	best, ok := store.MostSpecific(candidates, p)
	if !ok {
		return store.Ownership{}, &store.NotFoundError{Kind: "owner", ID: p}
	}
	return best, nil
}

// ReleaseOwner deletes pattern if owner owns it.
func (s *Store) ReleaseOwner(ctx context.Context, pattern, owner string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var current string
		err := tx.QueryRowContext(ctx, `SELECT owner FROM file_ownership WHERE pattern = ?`, pattern).Scan(&current)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return &store.NotFoundError{Kind: "ownership pattern", ID: pattern}
		case err != nil:
			return err
		case current != owner:
			return &store.WrongOwnerError{Pattern: pattern, Owner: current}
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM file_ownership WHERE pattern = ?`, pattern)
		return err
	})
}

// ListOwners lists patterns in byte order.
func (s *Store) ListOwners(ctx context.Context, q store.ListOwnersQuery) ([]store.Ownership, error) {
	rows, err := s.DB().QueryContext(ctx, `
		SELECT `+ownershipColumns+` FROM file_ownership
		WHERE (?1 = '' OR owner = ?1) AND pattern > ?2
		ORDER BY pattern
		LIMIT ?3`, q.Owner, q.After, q.Limit)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := collect(rows, scanOwnership)
	return out, wrap(err)
}

// agentColumns are the columns scanAgent reads, in its order, ending with the derived status
// (see derived).
func agentColumns(derivedStatus string) string {
	return `instance_id, coalesce(execution_id, ''), agent_type, coalesce(current_task_id, ''),
	coalesce(wave_number, 0), status, hostname, config, error_context, progress_percent, memory_usage_mb,
	cpu_percent, spawned_at, last_heartbeat, completed_at, session_id, principal, ` + derivedStatus
}

// storedColumns are agentColumns without derivation: the status as stored.
var storedColumns = agentColumns("status")

// lastSeen is an agent's last sign of life: its last heartbeat, or its registration before the
// first.
const lastSeen = `coalesce(last_heartbeat, spawned_at)`

// derived answers the SQL of an agent's status as the Registry sees it, with the stale and gone
// cutoffs (see cutoffs; an empty one derives nothing) in parameters ?stale and ?gone.
func derived(stale, gone int) string {
	return fmt.Sprintf(`CASE WHEN status IN ('completed', 'failed') THEN status
		WHEN ?%[2]d <> '' AND `+lastSeen+` < ?%[2]d THEN 'gone'
		WHEN ?%[1]d <> '' AND `+lastSeen+` < ?%[1]d THEN 'stale'
		ELSE status END`, stale, gone)
}

// cutoffs answers SQLite's clock and the stale and gone cutoffs of w before it, as stored text
// ("" for a zero window).
func cutoffs(ctx context.Context, q querier, w store.AgentWindows) (nowTime time.Time, stale, gone string, err error) {
	_, nowTime, err = now(ctx, q)
	if err != nil {
		return time.Time{}, "", "", err
	}
	if w.Stale > 0 {
		stale = format(nowTime.Add(-w.Stale))
	}
	if w.Gone > 0 {
		gone = format(nowTime.Add(-w.Gone))
	}
	return nowTime, stale, gone, nil
}

func scanAgent(row scanner, extra ...any) (store.Agent, error) {
	var (
		a                                 store.Agent
		reported, status, spawned, config string
		errCtx                            sql.NullString
		lastHeartbeat, completed          sql.NullString
	)
	dest := append([]any{&a.InstanceID, &a.ExecutionID, &a.AgentType, &a.CurrentTaskID, &a.WaveNumber,
		&reported, &a.Host, &config, &errCtx, &a.ProgressPercent, &a.MemoryUsageMB, &a.CPUPercent,
		&spawned, &lastHeartbeat, &completed, &a.SessionID, &a.Principal, &status}, extra...)
	if err := row.Scan(dest...); err != nil {
		return store.Agent{}, err
	}
	a.Status, a.ReportedStatus = store.AgentStatus(status), store.AgentStatus(reported)
	var err error
	if a.SpawnedAt, err = database.ParseSQLiteTime(spawned); err != nil {
		return store.Agent{}, err
	}
	if lastHeartbeat.Valid {
		if a.LastHeartbeat, err = database.ParseSQLiteTime(lastHeartbeat.String); err != nil {
			return store.Agent{}, err
		}
	}
	if completed.Valid {
		if a.CompletedAt, err = database.ParseSQLiteTime(completed.String); err != nil {
			return store.Agent{}, err
		}
	}
	if a.Config, err = store.UnmarshalConfig([]byte(config)); err != nil {
		return store.Agent{}, err
	}
	if errCtx.Valid {
		if a.ErrorContext, err = store.UnmarshalErrorContext([]byte(errCtx.String)); err != nil {
			return store.Agent{}, err
		}
	}
	return a, nil
}

// RegisterAgent inserts the agent, or answers it again, or starts it afresh for a new session,
// in one write transaction.
func (s *Store) RegisterAgent(ctx context.Context, n store.NewAgent) (reg store.Registration, err error) {
	agentType := n.AgentType
	if agentType == "" {
		agentType = store.DefaultAgentType
	}
	config := string(store.MarshalConfig(n.Config.WithDefaults()))
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var (
			previous string
			pending  bool
		)
		existing, err := scanAgent(tx.QueryRowContext(ctx, `SELECT `+storedColumns+`, previous_session_id, locks_release_pending
			FROM build_agent_instances WHERE instance_id = ?`, n.InstanceID), &previous, &pending)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		found := err == nil
		if found && existing.ExecutionID != n.ExecutionID {
			return &store.AlreadyExistsError{InstanceID: n.InstanceID, ExecutionID: existing.ExecutionID}
		}
		if found && (n.SessionID == "" || n.SessionID == existing.SessionID) {
			reg = store.Registration{Agent: existing, ReleaseLocks: pending}
			if pending {
				reg.ReplacedSession = previous
			}
			return nil
		}
		nowText, _, err := now(ctx, tx)
		if err != nil {
			return err
		}
		if !found {
			a, err := scanAgent(tx.QueryRowContext(ctx, `
				INSERT INTO build_agent_instances (instance_id, execution_id, agent_type, wave_number, config, hostname, session_id, spawned_at, updated_at, principal)
				VALUES (?1, nullif(?2, ''), ?3, nullif(?4, 0), ?5, ?6, ?7, ?8, ?8, ?9)
				RETURNING `+storedColumns,
				n.InstanceID, n.ExecutionID, agentType, n.WaveNumber, config, n.Host, n.SessionID, nowText, n.Principal))
			reg = store.Registration{Agent: a, Created: true}
			return err
		}
		// A new session: the process restarted. The instance starts afresh.
		a, err := scanAgent(tx.QueryRowContext(ctx, `
			UPDATE build_agent_instances SET
				agent_type = ?2, wave_number = nullif(?3, 0), config = ?4, hostname = ?5, session_id = ?6,
				previous_session_id = session_id, locks_release_pending = 1,
				status = 'initializing', current_task_id = NULL, error_context = NULL, progress_percent = 0,
				memory_usage_mb = 0, cpu_percent = 0, consecutive_failures = 0, spawned_at = ?7,
				last_heartbeat = NULL, completed_at = NULL, updated_at = ?7,
				principal = CASE WHEN principal = '' THEN ?8 ELSE principal END
			WHERE instance_id = ?1
			RETURNING `+storedColumns,
			n.InstanceID, agentType, n.WaveNumber, config, n.Host, n.SessionID, nowText, n.Principal))
		reg = store.Registration{Agent: a, Replaced: true, ReplacedSession: existing.SessionID, ReleaseLocks: true}
		return err
	})
	if err != nil {
		return store.Registration{}, err
	}
	return reg, nil
}

// LocksReleased clears the pending release of session's registration.
func (s *Store) LocksReleased(ctx context.Context, instanceID, session string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
			UPDATE build_agent_instances SET locks_release_pending = 0
			WHERE instance_id = ? AND session_id = ? AND locks_release_pending = 1`, instanceID, session)
		return err
	})
}

// Heartbeat checks the session and the transition and records the report in one write
// transaction.
func (s *Store) Heartbeat(ctx context.Context, b store.Beat) (agent store.Agent, sampled bool, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var current, session string
		err := tx.QueryRowContext(ctx, `SELECT status, session_id FROM build_agent_instances WHERE instance_id = ?`, b.InstanceID).Scan(&current, &session)
		if errors.Is(err, sql.ErrNoRows) {
			return &store.NotFoundError{Kind: "agent", ID: b.InstanceID}
		}
		if err != nil {
			return err
		}
		if b.SessionID != "" && b.SessionID != session {
			return &store.SessionReplacedError{InstanceID: b.InstanceID, Session: b.SessionID, Current: session}
		}
		if from := store.AgentStatus(current); !store.CanTransition(from, b.Status) {
			return &store.TransitionError{InstanceID: b.InstanceID, From: from, To: b.Status}
		}
		nowText, nowTime, err := now(ctx, tx)
		if err != nil {
			return err
		}

		// Sample when nothing was sampled within SampleEvery, or the status or task changed
		// since the last sample.
		var lastAt, lastStatus, lastTask string
		err = tx.QueryRowContext(ctx, `
			SELECT created_at, status, coalesce(current_task_id, '') FROM agent_heartbeats WHERE instance_id = ?
			ORDER BY created_at DESC, id DESC LIMIT 1`, b.InstanceID).Scan(&lastAt, &lastStatus, &lastTask)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			sampled = true
		case err != nil:
			return err
		default:
			recent := lastAt > format(nowTime.Add(-b.SampleEvery))
			sampled = !recent || lastStatus != string(b.Status) || lastTask != b.CurrentTaskID
		}

		var errCtx any // NULL keeps the stored error context
		if b.ErrorContext != nil {
			errCtx = string(store.MarshalErrorContext(b.ErrorContext))
		}
		agent, err = scanAgent(tx.QueryRowContext(ctx, `
			UPDATE build_agent_instances SET
				status = ?2, current_task_id = nullif(?3, ''), progress_percent = ?4, memory_usage_mb = ?5,
				cpu_percent = ?6, error_context = coalesce(?7, error_context), last_heartbeat = ?8,
				updated_at = ?8, completed_at = CASE WHEN ?9 THEN ?8 ELSE completed_at END
			WHERE instance_id = ?1
			RETURNING `+storedColumns,
			b.InstanceID, string(b.Status), b.CurrentTaskID, b.ProgressPercent, b.MemoryUsageMB, b.CPUPercent,
			errCtx, nowText, b.Status.Final()))
		if err != nil {
			return err
		}
		if sampled {
			_, err = tx.ExecContext(ctx, `
				INSERT INTO agent_heartbeats (instance_id, status, current_task_id, progress_percent, memory_usage_mb, cpu_percent, created_at)
				VALUES (?, ?, nullif(?, ''), ?, ?, ?, ?)`,
				b.InstanceID, string(b.Status), b.CurrentTaskID, b.ProgressPercent, b.MemoryUsageMB, b.CPUPercent, nowText)
		}
		return err
	})
	if err != nil {
		return store.Agent{}, false, err
	}
	return agent, sampled, nil
}

// GetAgent answers one agent.
func (s *Store) GetAgent(ctx context.Context, id string, w store.AgentWindows) (store.Agent, error) {
	_, stale, gone, err := cutoffs(ctx, s.DB(), w)
	if err != nil {
		return store.Agent{}, wrap(err)
	}
	a, err := scanAgent(s.DB().QueryRowContext(ctx, `SELECT `+agentColumns(derived(2, 3))+` FROM build_agent_instances WHERE instance_id = ?1`,
		id, stale, gone))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Agent{}, &store.NotFoundError{Kind: "agent", ID: id}
	}
	return a, wrap(err)
}

// ListAgents lists agents newest first, filtered by their derived status.
func (s *Store) ListAgents(ctx context.Context, q store.ListAgentsQuery) ([]store.Agent, error) {
	_, stale, gone, err := cutoffs(ctx, s.DB(), q.Windows)
	if err != nil {
		return nil, wrap(err)
	}
	status := derived(3, 4)
	where := []string{"(?1 = '' OR execution_id = ?1)"}
	args := []any{q.ExecutionID, q.Limit, stale, gone}
	if q.After != nil {
		where = append(where, fmt.Sprintf("(spawned_at, instance_id) < (?%d, ?%d)", len(args)+1, len(args)+2))
		args = append(args, format(q.After.SpawnedAt), q.After.InstanceID)
	}
	if len(q.Statuses) > 0 {
		marks := make([]string, len(q.Statuses))
		for i, st := range q.Statuses {
			args = append(args, string(st))
			marks[i] = fmt.Sprintf("?%d", len(args))
		}
		where = append(where, "("+status+") IN ("+strings.Join(marks, ", ")+")")
	}
	rows, err := s.DB().QueryContext(ctx, `
		SELECT `+agentColumns(status)+` FROM build_agent_instances
		WHERE `+strings.Join(where, " AND ")+`
		ORDER BY spawned_at DESC, instance_id DESC
		LIMIT ?2`, args...)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := collect(rows, func(r scanner) (store.Agent, error) { return scanAgent(r) })
	return out, wrap(err)
}

// StaleAgents is the seed's stale-heartbeat query over the candidates, for every unfinished
// agent.
func (s *Store) StaleAgents(ctx context.Context, q store.StaleQuery) ([]store.StaleAgent, error) {
	if len(q.InstanceIDs) == 0 {
		return nil, nil
	}
	nowTime, stale, gone, err := cutoffs(ctx, s.DB(), q.Windows)
	if err != nil {
		return nil, wrap(err)
	}
	args := []any{format(nowTime.Add(-q.OlderThan)), q.ExecutionID, stale, gone}
	for _, id := range q.InstanceIDs {
		args = append(args, id)
	}
	rows, err := s.DB().QueryContext(ctx, `
		SELECT `+agentColumns(derived(3, 4))+`, `+lastSeen+` FROM build_agent_instances
		WHERE instance_id IN (`+numbered(5, len(q.InstanceIDs))+`) AND status NOT IN ('completed', 'failed')
		  AND `+lastSeen+` < ?1 AND (?2 = '' OR execution_id = ?2)
		ORDER BY `+lastSeen+`, instance_id`, args...)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := collect(rows, func(r scanner) (store.StaleAgent, error) {
		var seenText string
		a, err := scanAgent(r, &seenText)
		if err != nil {
			return store.StaleAgent{}, err
		}
		seen, err := database.ParseSQLiteTime(seenText)
		return store.StaleAgent{Agent: a, SecondsSinceHeartbeat: int64(nowTime.Sub(seen) / time.Second)}, err
	})
	return out, wrap(err)
}

// LiveAgents lists unfinished agents by instance id.
func (s *Store) LiveAgents(ctx context.Context, after string, limit int) ([]store.LiveAgent, error) {
	rows, err := s.DB().QueryContext(ctx, `
		SELECT instance_id, coalesce(last_heartbeat, spawned_at) FROM build_agent_instances
		WHERE status NOT IN ('completed', 'failed') AND instance_id > ?
		ORDER BY instance_id
		LIMIT ?`, after, limit)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := collect(rows, func(r scanner) (store.LiveAgent, error) {
		var (
			l    store.LiveAgent
			seen string
		)
		if err := r.Scan(&l.InstanceID, &seen); err != nil {
			return l, err
		}
		var err error
		l.LastSeen, err = database.ParseSQLiteTime(seen)
		return l, err
	})
	return out, wrap(err)
}

// Heartbeats answers an agent's samples, newest first.
func (s *Store) Heartbeats(ctx context.Context, id string, limit int) ([]store.HeartbeatSample, error) {
	rows, err := s.DB().QueryContext(ctx, `
		SELECT instance_id, status, coalesce(current_task_id, ''), coalesce(progress_percent, 0),
			coalesce(memory_usage_mb, 0), coalesce(cpu_percent, 0), created_at
		FROM agent_heartbeats WHERE instance_id = ?
		ORDER BY created_at DESC, id DESC LIMIT ?`, id, limit)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := collect(rows, func(r scanner) (store.HeartbeatSample, error) {
		var (
			h               store.HeartbeatSample
			status, created string
		)
		if err := r.Scan(&h.InstanceID, &status, &h.CurrentTaskID, &h.ProgressPercent, &h.MemoryUsageMB, &h.CPUPercent, &created); err != nil {
			return h, err
		}
		h.Status = store.AgentStatus(status)
		var err error
		h.CreatedAt, err = database.ParseSQLiteTime(created)
		return h, err
	})
	return out, wrap(err)
}

// deleteBatch bounds the rows one retention DELETE removes, so that the write lock is never
// held for long.
const deleteBatch = 5000

// DeleteHeartbeatsBefore deletes old samples in batches.
func (s *Store) DeleteHeartbeatsBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		res, err := s.DB().ExecContext(ctx, `
			DELETE FROM agent_heartbeats WHERE id IN (
				SELECT id FROM agent_heartbeats WHERE created_at < ? LIMIT ?)`, format(cutoff), deleteBatch)
		if err != nil {
			return total, wrap(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, wrap(err)
		}
		total += n
		if n < deleteBatch {
			return total, nil
		}
	}
}

// placeholders answers "?, ?, ..." with n marks.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// numbered answers "?first, ?first+1, ..." with n marks, for lists in statements that also use
// numbered parameters (an unnumbered '?' takes the number after the largest one seen so far).
func numbered(first, n int) string {
	marks := make([]string, n)
	for i := range marks {
		marks[i] = fmt.Sprintf("?%d", first+i)
	}
	return strings.Join(marks, ", ")
}

// collect scans every row with scan.
func collect[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// wrap marks the errors that mean SQLite could not serve the request now (busy or locked past
// the busy timeout, a closed database: database.IsUnavailable) as *store.UnavailableError; the
// others pass unchanged.
func wrap(err error) error {
	return database.MarkUnavailable(err)
}
