// Package store is the Registry's storage: the [Store] interface its backends implement
// (postgres for production, sqlite embedded) and the SQL migrations they apply.
//
// The Registry owns its tables, and no other service reads or writes them: agent instances and
// heartbeats, file ownership, fencing high-water marks and SQL-backed file locks. The conformance
// suite in ./storetest holds every backend to the same behaviour.
package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"

	"github.com/converge-dev/converge/platform/database"
)

// Service is the name the Registry's migrations are recorded under (version table
// converge_registry_migrations) and the suffix of its Postgres application_name.
const Service = "registry"

// migrations holds migrations/<dialect>/NNNN_name.sql, goose-annotated.
//
//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrations embed.FS

// Migrations returns the Registry's migration files for dialect d, NNNN_name.sql at the root
// of the returned file system. It panics for a dialect without migrations, a programming error.
func Migrations(d database.Dialect) fs.FS {
	switch d {
	case database.DialectPostgres, database.DialectSQLite:
		sub, err := fs.Sub(migrations, "migrations/"+string(d))
		if err != nil {
			panic(fmt.Sprintf("store: migrations for %s: %v", d, err))
		}
		return sub
	default:
		panic(fmt.Sprintf("store: no migrations for dialect %q", d))
	}
}

// Store is the Registry's durable state. The methods that read and write it come with the
// features that need them; every backend implements all of them and passes ./storetest.
type Store interface {
	// Ping reports whether the store can serve requests. The server's health is NOT_SERVING
	// until it succeeds, and a closed store fails it.
	Ping(ctx context.Context) error
	// Close releases the store's connections. It may be called more than once.
	Close() error
}
