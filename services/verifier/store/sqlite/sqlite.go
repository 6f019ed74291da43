// Package sqlite is the embedded SQLite backend of the Verifier store.
package sqlite

import (
	"context"
	"fmt"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/verifier/store"
)

// Store is the Verifier store on SQLite. The embedded handle provides Ping, Close, Migrate,
// MigrationStatus and DB.
type Store struct {
	*database.SQLite
}

var _ store.Store = (*Store)(nil)

// New returns a Verifier store on the SQLite database at path, created if missing;
// ":memory:" gives a private in-memory database (see [database.OpenSQLite]). Several services
// may share one file: each keeps to its own tables and version table. With
// [database.WithMigrate] pending migrations are applied first.
func New(ctx context.Context, path string, opts ...database.Option) (*Store, error) {
	db, err := database.NewSQLite(ctx, path, store.Service, store.Migrations(database.DialectSQLite), opts...)
	if err != nil {
		return nil, fmt.Errorf("verifier store: %w", err)
	}
	return &Store{SQLite: db}, nil
}
