// Package postgres is the Postgres backend of the Scheduler store.
package postgres

import (
	"context"
	"fmt"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Store is the Scheduler store on Postgres. The embedded handle provides Ping, Close,
// Migrate, MigrationStatus, Pool and DB.
type Store struct {
	*database.Postgres
	leads *leads // the leaderships this store holds (lead.go)
	// sessions are the backends of the pool's connections: Listen skips the notifications of
	// this store's own commits, whose waiters the Scheduler has already woken.
	sessions *database.Sessions
}

var _ store.Store = (*Store)(nil)

// New returns a Scheduler store on the Postgres database at url. The pool connects lazily,
// so New succeeds while Postgres is down (Ping tells when it is up) unless
// [database.WithMigrate] asks it to apply pending migrations first. See
// [database.NewPostgres] for the other options.
func New(ctx context.Context, url string, opts ...database.Option) (*Store, error) {
	sessions := database.NewSessions()
	opts = append(opts[:len(opts):len(opts)], database.WithSessions(sessions))
	db, err := database.NewPostgres(ctx, url, store.Service, store.Migrations(database.DialectPostgres), opts...)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: %w", err)
	}
	return &Store{Postgres: db, leads: &leads{}, sessions: sessions}, nil
}

// GroupCommits reports that the Scheduler should group the requests of one execution into one
// transaction (scheduler.GroupCommitter): a durable commit here is a WAL fsync while the
// execution's row stays locked.
func (s *Store) GroupCommits() bool { return true }
