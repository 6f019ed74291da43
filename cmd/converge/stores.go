package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/converge-dev/converge/platform/database"
	knowledgepg "github.com/converge-dev/converge/services/knowledge/store/postgres"
	knowledgelite "github.com/converge-dev/converge/services/knowledge/store/sqlite"
	registrypg "github.com/converge-dev/converge/services/registry/store/postgres"
	registrylite "github.com/converge-dev/converge/services/registry/store/sqlite"
	schedulerpg "github.com/converge-dev/converge/services/scheduler/store/postgres"
	schedulerlite "github.com/converge-dev/converge/services/scheduler/store/sqlite"
	verifierpg "github.com/converge-dev/converge/services/verifier/store/postgres"
	verifierlite "github.com/converge-dev/converge/services/verifier/store/sqlite"
)

// stateful are the services that keep a store, in the order they are migrated and reported.
var stateful = []string{"scheduler", "registry", "knowledge", "verifier"}

// migrator is what `converge migrate` needs of a store.
type migrator interface {
	Migrate(ctx context.Context) error
	MigrationStatus(ctx context.Context) ([]database.MigrationStatus, error)
	Close() error
}

// openPostgres opens service's Postgres store at url.
func openPostgres(ctx context.Context, service, url string, opts ...database.Option) (migrator, error) {
	switch service {
	case "scheduler":
		return schedulerpg.New(ctx, url, opts...)
	case "registry":
		return registrypg.New(ctx, url, opts...)
	case "knowledge":
		return knowledgepg.New(ctx, url, opts...)
	case "verifier":
		return verifierpg.New(ctx, url, opts...)
	}
	return nil, fmt.Errorf("unknown service %q (want one of %v)", service, stateful)
}

// sqlitePath is where `converge dev` keeps service's database: one file per service under dataDir,
// so that the services' writers do not queue behind each other; or a private in-memory database.
func sqlitePath(dataDir, service string, inMemory bool) string {
	if inMemory {
		return database.SQLiteMemory
	}
	return filepath.Join(dataDir, service+".db")
}

// devStores are the embedded stores of `converge dev`.
type devStores struct {
	scheduler *schedulerlite.Store
	registry  *registrylite.Store
	knowledge *knowledgelite.Store
	verifier  *verifierlite.Store
}

// openDevStores opens (and migrates) the four SQLite stores.
func openDevStores(ctx context.Context, dataDir string, inMemory bool, opts ...database.Option) (s *devStores, err error) {
	s = &devStores{}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	opts = append(opts, database.WithMigrate())
	if s.scheduler, err = schedulerlite.New(ctx, sqlitePath(dataDir, "scheduler", inMemory), opts...); err != nil {
		return s, err
	}
	if s.registry, err = registrylite.New(ctx, sqlitePath(dataDir, "registry", inMemory), opts...); err != nil {
		return s, err
	}
	if s.knowledge, err = knowledgelite.New(ctx, sqlitePath(dataDir, "knowledge", inMemory), opts...); err != nil {
		return s, err
	}
	if s.verifier, err = verifierlite.New(ctx, sqlitePath(dataDir, "verifier", inMemory), opts...); err != nil {
		return s, err
	}
	return s, nil
}

// openSQLite opens service's dev SQLite store under dataDir (for `converge migrate --data-dir`).
func openSQLite(ctx context.Context, service, dataDir string) (migrator, error) {
	path := sqlitePath(dataDir, service, false)
	switch service {
	case "scheduler":
		return schedulerlite.New(ctx, path)
	case "registry":
		return registrylite.New(ctx, path)
	case "knowledge":
		return knowledgelite.New(ctx, path)
	case "verifier":
		return verifierlite.New(ctx, path)
	}
	return nil, fmt.Errorf("unknown service %q (want one of %v)", service, stateful)
}

// Close closes every store that was opened.
func (s *devStores) Close() error {
	var errs []error
	if s.scheduler != nil {
		errs = append(errs, s.scheduler.Close())
	}
	if s.registry != nil {
		errs = append(errs, s.registry.Close())
	}
	if s.knowledge != nil {
		errs = append(errs, s.knowledge.Close())
	}
	if s.verifier != nil {
		errs = append(errs, s.verifier.Close())
	}
	return errors.Join(errs...)
}
