// Package postgres is the Postgres backend of the Registry store.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/services/registry/store"
)

// Store is the Registry store on Postgres. The embedded handle provides Ping, Close,
// Migrate, MigrationStatus, Pool and DB.
type Store struct {
	*database.Postgres
}

var _ store.Store = (*Store)(nil)

// New returns a Registry store on the Postgres database at url. The pool connects lazily,
// so New succeeds while Postgres is down (Ping tells when it is up) unless
// [database.WithMigrate] asks it to apply pending migrations first. See
// [database.NewPostgres] for the other options.
func New(ctx context.Context, url string, opts ...database.Option) (*Store, error) {
	db, err := database.NewPostgres(ctx, url, store.Service, store.Migrations(database.DialectPostgres), opts...)
	if err != nil {
		return nil, fmt.Errorf("registry store: %w", err)
	}
	return &Store{Postgres: db}, nil
}

// Identifiers compare and sort in byte order (COLLATE "C") on every backend, whatever the
// database's collation: pages and cursors then mean the same on Postgres and SQLite.

// Now answers the database's clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.Pool().QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, wrap(err)
	}
	return now, nil
}

// NextLockEpoch increments the epoch of lock backend name.
func (s *Store) NextLockEpoch(ctx context.Context, name string) (int64, error) {
	var epoch int64
	err := s.Pool().QueryRow(ctx, `
		INSERT INTO lock_epochs (name, epoch) VALUES ($1, 1)
		ON CONFLICT (name) DO UPDATE SET epoch = lock_epochs.epoch + 1, updated_at = now()
		RETURNING epoch`, name).Scan(&epoch)
	if err != nil {
		return 0, wrap(err)
	}
	return epoch, nil
}

const ownershipColumns = `pattern, owner, created_at, updated_at`

func scanOwnership(row pgx.Row) (store.Ownership, error) {
	var o store.Ownership
	err := row.Scan(&o.Pattern, &o.Owner, &o.CreatedAt, &o.UpdatedAt)
	return o, err
}

// SetOwner upserts pattern's owner. The pattern's row is locked while it is read and written,
// so that the previous owner answered is exact under concurrent SetOwner calls.
func (s *Store) SetOwner(ctx context.Context, pattern, owner string) (own store.Ownership, previous string, err error) {
	err = pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		for {
			err := tx.QueryRow(ctx, `SELECT owner FROM file_ownership WHERE pattern = $1 FOR UPDATE`, pattern).Scan(&previous)
			if errors.Is(err, pgx.ErrNoRows) {
				// New pattern; a concurrent insert of the same pattern makes this one insert
				// nothing, and the loop then reads and updates the winner's row.
				own, err = scanOwnership(tx.QueryRow(ctx, `
					INSERT INTO file_ownership (pattern, owner, base) VALUES ($1, $2, $3)
					ON CONFLICT (pattern) DO NOTHING
					RETURNING `+ownershipColumns, pattern, owner, repopath.Base(pattern)))
				if errors.Is(err, pgx.ErrNoRows) {
					continue
				}
				previous = ""
				return err
			}
			if err != nil {
				return err
			}
			own, err = scanOwnership(tx.QueryRow(ctx, `
				UPDATE file_ownership
				SET owner = $2, base = $3, updated_at = CASE WHEN owner <> $2 THEN now() ELSE updated_at END
				WHERE pattern = $1
				RETURNING `+ownershipColumns, pattern, owner, repopath.Base(pattern)))
			return err
		}
	})
	if err != nil {
		return store.Ownership{}, "", wrap(err)
	}
	return own, previous, nil
}

// OwnerOf fetches the patterns whose base is an ancestor of p and picks the most specific match.
func (s *Store) OwnerOf(ctx context.Context, p string) (store.Ownership, error) {
	rows, err := s.Pool().Query(ctx, `SELECT `+ownershipColumns+` FROM file_ownership WHERE base = ANY($1)`, repopath.Ancestors(p))
	if err != nil {
		return store.Ownership{}, wrap(err)
	}
	candidates, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Ownership, error) { return scanOwnership(r) })
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
	// The outer SELECT sees the table as it was before the DELETE: the current owner, if any.
	var (
		deleted int
		current *string
	)
	err := s.Pool().QueryRow(ctx, `
		WITH d AS (DELETE FROM file_ownership WHERE pattern = $1 AND owner = $2 RETURNING 1)
		SELECT (SELECT count(*) FROM d), (SELECT owner FROM file_ownership WHERE pattern = $1)`,
		pattern, owner).Scan(&deleted, &current)
	switch {
	case err != nil:
		return wrap(err)
	case deleted == 1:
		return nil
	case current == nil:
		return &store.NotFoundError{Kind: "ownership pattern", ID: pattern}
	default:
		return &store.WrongOwnerError{Pattern: pattern, Owner: *current}
	}
}

// ListOwners lists patterns in byte order.
func (s *Store) ListOwners(ctx context.Context, q store.ListOwnersQuery) ([]store.Ownership, error) {
	rows, err := s.Pool().Query(ctx, `
		SELECT `+ownershipColumns+` FROM file_ownership
		WHERE ($1 = '' OR owner = $1) AND pattern COLLATE "C" > $2
		ORDER BY pattern COLLATE "C"
		LIMIT $3`, q.Owner, q.After, q.Limit)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Ownership, error) { return scanOwnership(r) })
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
// windows in microseconds in parameters $stale and $gone (0: not derived).
func derived(stale, gone int) string {
	return fmt.Sprintf(`CASE WHEN status IN ('completed', 'failed') THEN status
		WHEN $%[2]d::bigint > 0 AND `+lastSeen+` < now() - $%[2]d::bigint * interval '1 microsecond' THEN 'gone'
		WHEN $%[1]d::bigint > 0 AND `+lastSeen+` < now() - $%[1]d::bigint * interval '1 microsecond' THEN 'stale'
		ELSE status END`, stale, gone)
}

func scanAgent(row pgx.Row, extra ...any) (store.Agent, error) {
	var (
		a                        store.Agent
		reported, status         string
		config, errCtx           []byte
		lastHeartbeat, completed *time.Time
	)
	dest := append([]any{&a.InstanceID, &a.ExecutionID, &a.AgentType, &a.CurrentTaskID, &a.WaveNumber,
		&reported, &a.Host, &config, &errCtx, &a.ProgressPercent, &a.MemoryUsageMB, &a.CPUPercent,
		&a.SpawnedAt, &lastHeartbeat, &completed, &a.SessionID, &a.Principal, &status}, extra...)
	if err := row.Scan(dest...); err != nil {
		return store.Agent{}, err
	}
	a.Status, a.ReportedStatus = store.AgentStatus(status), store.AgentStatus(reported)
	if lastHeartbeat != nil {
		a.LastHeartbeat = *lastHeartbeat
	}
	if completed != nil {
		a.CompletedAt = *completed
	}
	var err error
	if a.Config, err = store.UnmarshalConfig(config); err != nil {
		return store.Agent{}, err
	}
	if a.ErrorContext, err = store.UnmarshalErrorContext(errCtx); err != nil {
		return store.Agent{}, err
	}
	return a, nil
}

// RegisterAgent inserts the agent, or answers it again, or starts it afresh for a new session,
// in one transaction that holds the agent's row.
func (s *Store) RegisterAgent(ctx context.Context, n store.NewAgent) (reg store.Registration, err error) {
	agentType := n.AgentType
	if agentType == "" {
		agentType = store.DefaultAgentType
	}
	config := store.MarshalConfig(n.Config.WithDefaults())
	err = pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		a, err := scanAgent(tx.QueryRow(ctx, `
			INSERT INTO build_agent_instances (instance_id, execution_id, agent_type, wave_number, config, hostname, session_id, principal)
			VALUES ($1, nullif($2, ''), $3, nullif($4, 0), $5, $6, $7, $8)
			ON CONFLICT (instance_id) DO NOTHING
			RETURNING `+storedColumns,
			n.InstanceID, n.ExecutionID, agentType, n.WaveNumber, config, n.Host, n.SessionID, n.Principal))
		if err == nil {
			reg = store.Registration{Agent: a, Created: true}
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Registered before (the conflicting insert waited for that row to commit).
		var (
			previous string
			pending  bool
		)
		existing, err := scanAgent(tx.QueryRow(ctx, `SELECT `+storedColumns+`, previous_session_id, locks_release_pending
			FROM build_agent_instances WHERE instance_id = $1 FOR UPDATE`, n.InstanceID), &previous, &pending)
		if err != nil {
			return err
		}
		if existing.ExecutionID != n.ExecutionID {
			return &store.AlreadyExistsError{InstanceID: n.InstanceID, ExecutionID: existing.ExecutionID}
		}
		if n.SessionID == "" || n.SessionID == existing.SessionID {
			reg = store.Registration{Agent: existing, ReleaseLocks: pending}
			if pending {
				reg.ReplacedSession = previous
			}
			return nil
		}
		// A new session: the process restarted. The instance starts afresh.
		a, err = scanAgent(tx.QueryRow(ctx, `
			UPDATE build_agent_instances SET
				agent_type = $2, wave_number = nullif($3, 0), config = $4, hostname = $5, session_id = $6,
				previous_session_id = session_id, locks_release_pending = true,
				status = 'initializing', current_task_id = NULL, error_context = NULL, progress_percent = 0,
				memory_usage_mb = 0, cpu_percent = 0, consecutive_failures = 0, spawned_at = now(),
				last_heartbeat = NULL, completed_at = NULL, updated_at = now(),
				principal = CASE WHEN principal = '' THEN $7 ELSE principal END
			WHERE instance_id = $1
			RETURNING `+storedColumns,
			n.InstanceID, agentType, n.WaveNumber, config, n.Host, n.SessionID, n.Principal))
		if err != nil {
			return err
		}
		reg = store.Registration{Agent: a, Replaced: true, ReplacedSession: existing.SessionID, ReleaseLocks: true}
		return nil
	})
	if err != nil {
		return store.Registration{}, wrap(err)
	}
	return reg, nil
}

// LocksReleased clears the pending release of session's registration.
func (s *Store) LocksReleased(ctx context.Context, instanceID, session string) error {
	_, err := s.Pool().Exec(ctx, `
		UPDATE build_agent_instances SET locks_release_pending = false
		WHERE instance_id = $1 AND session_id = $2 AND locks_release_pending`, instanceID, session)
	return wrap(err)
}

// Heartbeat checks the session and the transition and records the report in one transaction
// that holds the agent's row, so that concurrent heartbeats of one agent apply one after the
// other.
func (s *Store) Heartbeat(ctx context.Context, b store.Beat) (agent store.Agent, sampled bool, err error) {
	err = pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		var current, session string
		err := tx.QueryRow(ctx, `SELECT status, session_id FROM build_agent_instances WHERE instance_id = $1 FOR UPDATE`, b.InstanceID).Scan(&current, &session)
		if errors.Is(err, pgx.ErrNoRows) {
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

		// Sample when nothing was sampled within SampleEvery, or the status or task changed
		// since the last sample.
		var (
			recent             bool
			lastStatus, lastTk string
		)
		err = tx.QueryRow(ctx, `
			SELECT created_at > now() - $2 * interval '1 microsecond', status, coalesce(current_task_id, '')
			FROM agent_heartbeats WHERE instance_id = $1
			ORDER BY created_at DESC, id DESC LIMIT 1`, b.InstanceID, b.SampleEvery.Microseconds()).Scan(&recent, &lastStatus, &lastTk)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			sampled = true
		case err != nil:
			return err
		default:
			sampled = !recent || lastStatus != string(b.Status) || lastTk != b.CurrentTaskID
		}

		agent, err = scanAgent(tx.QueryRow(ctx, `
			UPDATE build_agent_instances SET
				status = $2, current_task_id = nullif($3, ''), progress_percent = $4, memory_usage_mb = $5,
				cpu_percent = $6, error_context = coalesce($7, error_context), last_heartbeat = now(),
				updated_at = now(), completed_at = CASE WHEN $8 THEN now() ELSE completed_at END
			WHERE instance_id = $1
			RETURNING `+storedColumns,
			b.InstanceID, string(b.Status), b.CurrentTaskID, b.ProgressPercent, b.MemoryUsageMB, b.CPUPercent,
			store.MarshalErrorContext(b.ErrorContext), b.Status.Final()))
		if err != nil {
			return err
		}
		if sampled {
			_, err = tx.Exec(ctx, `
				INSERT INTO agent_heartbeats (instance_id, status, current_task_id, progress_percent, memory_usage_mb, cpu_percent, created_at)
				VALUES ($1, $2, nullif($3, ''), $4, $5, $6, now())`,
				b.InstanceID, string(b.Status), b.CurrentTaskID, b.ProgressPercent, b.MemoryUsageMB, b.CPUPercent)
		}
		return err
	})
	if err != nil {
		return store.Agent{}, false, wrap(err)
	}
	return agent, sampled, nil
}

// GetAgent answers one agent.
func (s *Store) GetAgent(ctx context.Context, id string, w store.AgentWindows) (store.Agent, error) {
	a, err := scanAgent(s.Pool().QueryRow(ctx, `SELECT `+agentColumns(derived(2, 3))+` FROM build_agent_instances WHERE instance_id = $1`,
		id, w.Stale.Microseconds(), w.Gone.Microseconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Agent{}, &store.NotFoundError{Kind: "agent", ID: id}
	}
	return a, wrap(err)
}

// ListAgents lists agents newest first, filtered by their derived status.
func (s *Store) ListAgents(ctx context.Context, q store.ListAgentsQuery) ([]store.Agent, error) {
	statuses := make([]string, len(q.Statuses))
	for i, st := range q.Statuses {
		statuses[i] = string(st)
	}
	var (
		afterTime *time.Time
		afterID   string
	)
	if q.After != nil {
		afterTime, afterID = &q.After.SpawnedAt, q.After.InstanceID
	}
	status := derived(6, 7)
	rows, err := s.Pool().Query(ctx, `
		SELECT `+agentColumns(status)+` FROM build_agent_instances
		WHERE ($1 = '' OR execution_id = $1)
		  AND (cardinality($2::text[]) = 0 OR (`+status+`) = ANY($2))
		  AND ($3::timestamptz IS NULL OR (spawned_at, instance_id COLLATE "C") < ($3, $4))
		ORDER BY spawned_at DESC, instance_id COLLATE "C" DESC
		LIMIT $5`, q.ExecutionID, statuses, afterTime, afterID, q.Limit, q.Windows.Stale.Microseconds(), q.Windows.Gone.Microseconds())
	if err != nil {
		return nil, wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Agent, error) { return scanAgent(r) })
	return out, wrap(err)
}

// StaleAgents is the seed's stale-heartbeat query over the candidates, for every unfinished
// agent.
func (s *Store) StaleAgents(ctx context.Context, q store.StaleQuery) ([]store.StaleAgent, error) {
	if len(q.InstanceIDs) == 0 {
		return nil, nil
	}
	rows, err := s.Pool().Query(ctx, `
		SELECT `+agentColumns(derived(4, 5))+`, floor(extract(epoch FROM now() - `+lastSeen+`))::bigint
		FROM build_agent_instances
		WHERE instance_id = ANY($1) AND status NOT IN ('completed', 'failed')
		  AND `+lastSeen+` < now() - $2 * interval '1 microsecond'
		  AND ($3 = '' OR execution_id = $3)
		ORDER BY `+lastSeen+`, instance_id COLLATE "C"`, q.InstanceIDs, q.OlderThan.Microseconds(), q.ExecutionID,
		q.Windows.Stale.Microseconds(), q.Windows.Gone.Microseconds())
	if err != nil {
		return nil, wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.StaleAgent, error) {
		var sa store.StaleAgent
		var err error
		sa.Agent, err = scanAgent(r, &sa.SecondsSinceHeartbeat)
		return sa, err
	})
	return out, wrap(err)
}

// LiveAgents lists unfinished agents by instance id.
func (s *Store) LiveAgents(ctx context.Context, after string, limit int) ([]store.LiveAgent, error) {
	rows, err := s.Pool().Query(ctx, `
		SELECT instance_id, coalesce(last_heartbeat, spawned_at) FROM build_agent_instances
		WHERE status NOT IN ('completed', 'failed') AND instance_id COLLATE "C" > $1
		ORDER BY instance_id COLLATE "C"
		LIMIT $2`, after, limit)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.LiveAgent, error) {
		var l store.LiveAgent
		err := r.Scan(&l.InstanceID, &l.LastSeen)
		return l, err
	})
	return out, wrap(err)
}

// Heartbeats answers an agent's samples, newest first.
func (s *Store) Heartbeats(ctx context.Context, id string, limit int) ([]store.HeartbeatSample, error) {
	rows, err := s.Pool().Query(ctx, `
		SELECT instance_id, status, coalesce(current_task_id, ''), coalesce(progress_percent, 0),
			coalesce(memory_usage_mb, 0), coalesce(cpu_percent, 0), created_at
		FROM agent_heartbeats WHERE instance_id = $1
		ORDER BY created_at DESC, id DESC LIMIT $2`, id, limit)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.HeartbeatSample, error) {
		var h store.HeartbeatSample
		var status string
		err := r.Scan(&h.InstanceID, &status, &h.CurrentTaskID, &h.ProgressPercent, &h.MemoryUsageMB, &h.CPUPercent, &h.CreatedAt)
		h.Status = store.AgentStatus(status)
		return h, err
	})
	return out, wrap(err)
}

// deleteBatch bounds the rows one retention DELETE removes, so that no statement holds locks
// on a large part of the table.
const deleteBatch = 5000

// DeleteHeartbeatsBefore deletes old samples in batches.
func (s *Store) DeleteHeartbeatsBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.Pool().Exec(ctx, `
			DELETE FROM agent_heartbeats WHERE id IN (
				SELECT id FROM agent_heartbeats WHERE created_at < $1 LIMIT $2)`, cutoff, deleteBatch)
		if err != nil {
			return total, wrap(err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < deleteBatch {
			return total, nil
		}
	}
}

// wrap marks the errors that mean Postgres could not be reached or answer in time
// (database.IsUnavailable) as *store.UnavailableError; the others (the store's own, bugs) pass
// unchanged.
func wrap(err error) error {
	var domainNotFound *store.NotFoundError
	if errors.As(err, &domainNotFound) {
		return err
	}
	return database.MarkUnavailable(err)
}
