package scheduler

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
	"github.com/converge-dev/converge/services/scheduler/store/sqlite"
)

// testBundle is a Scheduler served by the real platform server (interceptors, protovalidate,
// health) over an in-memory connection, on a fresh store.
type testBundle struct {
	client schedulerv1.SchedulerServiceClient
	store  store.Store
}

// backends are the stores every handler test runs on.
var backends = map[string]func(t *testing.T) store.Store{
	"postgres": func(t *testing.T) store.Store {
		st, err := postgres.New(t.Context(), dbtest.Postgres(t), database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	},
	"sqlite": func(t *testing.T) store.Store {
		st, err := sqlite.New(t.Context(), dbtest.SQLite(t), database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	},
}

// forEachBackend runs test as parallel subtests, one per backend, each on a new, migrated
// store of its own (serve it with setup, runBundle or bundleWith).
func forEachBackend(t *testing.T, test func(t *testing.T, st store.Store)) {
	t.Helper()
	for name, newStore := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newStore(t))
		})
	}
}

// setup serves the Scheduler on st until the test ends and connects a client to it.
func setup(t *testing.T, st store.Store) *testBundle {
	t.Helper()
	conn := servertest.Serve(t, server.Config{
		Name: "scheduler-test",
		Services: []server.Service{{
			Desc:  &schedulerv1.SchedulerService_ServiceDesc,
			Impl:  New(st),
			Ready: st.Ping,
		}},
	})
	return &testBundle{client: schedulerv1.NewSchedulerServiceClient(conn), store: st}
}

// requireViolations checks that err is InvalidArgument with exactly these field → description
// violations.
func requireViolations(t *testing.T, err error, want map[string]string) {
	t.Helper()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	got := map[string]string{}
	for _, v := range grpcerr.Violations(err) {
		got[v.Field] = v.Description
	}
	require.Equal(t, want, got, "%v", err)
}

// requireCode checks err's status code.
func requireCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	require.Equal(t, code, status.Code(err), "%v", err)
}

// example reads a file of examples/tasks.
func example(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "tasks", name))
	require.NoError(t, err)
	return b
}
