package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeadHolder answers the backend process id of the session that holds the named leadership
// (TryLead's advisory lock) in this database, or 0 when no session holds it. It runs on any
// pooled connection, so a leader can check that the session it took the leadership on is still
// the holder: when that session ends (Postgres restarted, the connection was cut or terminated)
// the lock is gone while the rest of the pool goes on working, and another replica may lead.
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

// lead is a held leadership: its session and lock key; released at most once.
type lead struct {
	conn *pgx.Conn
	key  int64
	once sync.Once
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
	var held bool
	if err := pc.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&held); err != nil {
		pc.Release()
		return false, func() {}, fmt.Errorf("scheduler store: lead %q: %w", name, err)
	}
	if !held {
		pc.Release()
		return false, func() {}, nil
	}
	l := &lead{conn: pc.Hijack(), key: key}
	return true, l.release, nil
}

func (l *lead) release() {
	l.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, l.key)
		_ = l.conn.Close(ctx) // ends the session, and so the lock, whatever the unlock did
	})
}
