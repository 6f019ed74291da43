package store_test

import (
	"context"
	"testing"

	"github.com/converge-dev/converge/platform/database"
	harness "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
	"github.com/converge-dev/converge/services/scheduler/store/sqlite"
	"github.com/converge-dev/converge/services/scheduler/store/storetest"
)

// TestConformance runs the Scheduler store suite against every backend.
func TestConformance(t *testing.T) {
	t.Parallel()
	harness.Run(t, []harness.Backend[store.Store]{
		harness.PostgresBackend(func(ctx context.Context, url string) (store.Store, error) {
			return postgres.New(ctx, url, database.WithMigrate())
		}),
		harness.SQLiteBackend(func(ctx context.Context, path string) (store.Store, error) {
			return sqlite.New(ctx, path, database.WithMigrate())
		}),
	}, storetest.Run)
}
