package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// A leadership (TryLead) is a session-level advisory lock held by one session of its own, taken
// out of the pool. It lasts as long as that session: when the session ends (Postgres restarted,
// the connection was cut or terminated) the lock is gone while the rest of the pool goes on
// working, and another replica may lead. LeadAlive lets the leader notice: it asks the held
// session itself, which costs one trivial round trip on an idle connection, where reading
// pg_locks (LeadHolder) copies the whole lock table on the server.

// leadCheckTimeout bounds LeadAlive's round trip. When it runs out pgx closes the session, which
// ends the leadership: the answer (not alive) is then true.
const leadCheckTimeout = 5 * time.Second

// errLeadLost: the leadership is no longer held by this store.
var errLeadLost = errors.New("leadership not held")

// LeadHolder answers the backend process id of the session that holds the named leadership
// (TryLead's advisory lock) in this database, or 0 when no session holds it. It runs on any
// pooled connection and reads pg_locks (a copy of the server's whole lock table): for tools and
// tests; a leader checks its own leadership with LeadAlive.
func (s *Store) LeadHolder(ctx context.Context, name string) (int64, error) {
	key := uint64(leadKey(name))
	var pid int64
	// A bigint advisory key is stored as classid (high 32 bits), objid (low 32 bits), objsubid 1.
	err := s.Pool().QueryRow(ctx, `SELECT COALESCE(max(pid), 0) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid::bigint = $1 AND objid::bigint = $2`, int64(key>>32), int64(key&0xffffffff)).Scan(&pid)
	if err != nil {
		return 0, fmt.Errorf("scheduler store: holder of %q: %w", name, err)
	}
	return pid, nil
}

// LeadAlive answers nil while the session this store took the named leadership on (TryLead) is
// alive, and so still holds it; an error once that session ended, could not answer within
// leadCheckTimeout, or the leadership was released. It asks the session its backend pid (one
// round trip on the lead's own connection) and compares it with the pid that took the lock: a
// pgx connection never reconnects, so an answer from the same backend is an answer from the
// session that holds the lock.
func (s *Store) LeadAlive(ctx context.Context, name string) error {
	l := s.leads.get(name)
	if l == nil {
		return fmt.Errorf("scheduler store: lead %q: %w", name, errLeadLost)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return fmt.Errorf("scheduler store: lead %q: %w", name, errLeadLost)
	}
	cctx, cancel := context.WithTimeout(ctx, leadCheckTimeout)
	defer cancel()
	var pid int64
	if err := l.conn.QueryRow(cctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return fmt.Errorf("scheduler store: lead %q: the session holding it: %w", name, err)
	}
	if pid != l.pid {
		return fmt.Errorf("scheduler store: lead %q: session %d answered, %d holds the lock: %w", name, pid, l.pid, errLeadLost)
	}
	return nil
}

// leads are the leaderships a store holds, by name.
type leads struct {
	mu sync.Mutex
	m  map[string]*lead
}

func (ls *leads) get(name string) *lead {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.m[name]
}

func (ls *leads) put(name string, l *lead) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.m == nil {
		ls.m = make(map[string]*lead)
	}
	ls.m[name] = l
}

func (ls *leads) remove(name string, l *lead) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.m[name] == l {
		delete(ls.m, name)
	}
}

// lead is a held leadership: its session (conn, backend pid) and lock key; released at most
// once. mu serialises the session's use (a pgx.Conn is not safe for concurrent use).
type lead struct {
	mu       sync.Mutex
	conn     *pgx.Conn
	pid      int64
	key      int64
	released bool
}

// leadKey is the advisory lock key of a named leadership: the FNV-1a hash of
// "converge:scheduler:lead:<name>".
func leadKey(name string) int64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, "converge:scheduler:lead:"+name)
	return int64(h.Sum64())
}

// TryLead takes the session-level advisory lock of the leadership on a connection of its own,
// taken out of the pool: the lock lasts as long as that session, and release (unlock and close)
// ends it. Closing the store does not wait for a held leadership.
func (s *Store) TryLead(ctx context.Context, name string) (bool, func(), error) {
	pc, err := s.Pool().Acquire(ctx)
	if err != nil {
		return false, func() {}, fmt.Errorf("scheduler store: lead %q: %w", name, err)
	}
	key := leadKey(name)
	var (
		held bool
		pid  int64
	)
	if err := pc.QueryRow(ctx, `SELECT pg_try_advisory_lock($1), pg_backend_pid()`, key).Scan(&held, &pid); err != nil {
		pc.Release()
		return false, func() {}, fmt.Errorf("scheduler store: lead %q: %w", name, err)
	}
	if !held {
		pc.Release()
		return false, func() {}, nil
	}
	l := &lead{conn: pc.Hijack(), pid: pid, key: key}
	s.leads.put(name, l)
	return true, func() {
		s.leads.remove(name, l)
		l.release()
	}, nil
}

func (l *lead) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return
	}
	l.released = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, l.key)
	_ = l.conn.Close(ctx) // ends the session, and so the lock, whatever the unlock did
}
