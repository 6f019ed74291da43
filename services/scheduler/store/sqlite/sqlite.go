// Package sqlite is the embedded SQLite backend of the Scheduler store.
package sqlite

import (
	"context"
	"fmt"
	"sync"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Store is the Scheduler store on SQLite. The embedded handle provides Ping, Close, Migrate,
// MigrationStatus and DB.
type Store struct {
	*database.SQLite
	// writeMu serialises UpdateExecution's write transactions in this process. SQLite has one
	// writer; without it two transactions meet in BEGIN IMMEDIATE and the loser sleeps in SQLite's
	// busy handler (1, 2, 5, 10 ms ...) instead of being handed the lock the moment it is free.
	writeMu sync.Mutex
	// rows are the rows the last committed UpdateExecution read and wrote, under writeMu
	// (rowcache.go).
	rows rowCache
	// placements keeps the waves' placements GetExecution decoded last (wavecache.go).
	placements placementCache
}

var _ store.Store = (*Store)(nil)

// New returns a Scheduler store on the SQLite database at path, created if missing;
// ":memory:" gives a private in-memory database (see [database.OpenSQLite]). Several services
// may share one file: each keeps to its own tables and version table. With
// [database.WithMigrate] pending migrations are applied first.
func New(ctx context.Context, path string, opts ...database.Option) (*Store, error) {
	db, err := database.NewSQLite(ctx, path, store.Service, store.Migrations(database.DialectSQLite), opts...)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: %w", err)
	}
	return &Store{SQLite: db}, nil
}
