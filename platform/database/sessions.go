package database

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Sessions is the set of Postgres backend process ids of a pool's open connections
// ([WithSessions] keeps it): a process that LISTENs tells the notifications its own
// connections sent (pgconn.Notification.PID) from other processes', and can skip those it has
// already acted on.
//
// A connection's id is added once it has connected and removed when the pool closes it. A
// connection whose backend died is removed only when the pool finds it broken, and Postgres may
// give its id to a new backend of another process meanwhile: a caller may take that process's
// notifications for its own in that window, so it must keep a fallback (polling) for them.
type Sessions struct {
	mu  sync.Mutex
	ids map[uint32]struct{}
}

// NewSessions returns an empty set, for [WithSessions].
func NewSessions() *Sessions { return &Sessions{ids: map[uint32]struct{}{}} }

// Has reports whether pid is the backend of one of the pool's open connections.
func (s *Sessions) Has(pid uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[pid]
	return ok
}

// Len is the number of open connections in the set.
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// Forget removes pid: the caller took its connection out of the pool (pgxpool.Conn.Hijack), so
// the pool will not report its closing.
func (s *Sessions) Forget(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, pid)
}

func (s *Sessions) add(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[pid] = struct{}{}
}

// WithSessions keeps s the set of the pool's open connections' backend ids. Honoured by
// [OpenPostgres] and [NewPostgres].
func WithSessions(s *Sessions) Option {
	return func(o *options) { o.sessions = s }
}

// afterConnect and beforeClose are the pool hooks that keep s current.
func (s *Sessions) afterConnect(_ context.Context, c *pgx.Conn) error {
	s.add(c.PgConn().PID())
	return nil
}

func (s *Sessions) beforeClose(c *pgx.Conn) { s.Forget(c.PgConn().PID()) }
