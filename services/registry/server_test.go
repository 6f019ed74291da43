package registry_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/gen"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/registry"
	"github.com/converge-dev/converge/services/registry/hot"
	"github.com/converge-dev/converge/services/registry/hot/inproc"
	"github.com/converge-dev/converge/services/registry/hot/redishot"
	"github.com/converge-dev/converge/services/registry/internal/redistest"
	"github.com/converge-dev/converge/services/registry/store"
	"github.com/converge-dev/converge/services/registry/store/postgres"
	"github.com/converge-dev/converge/services/registry/store/sqlite"
)

// backend is one production combination of durable store and hot state.
type backend struct {
	name string
	// open answers a new, empty environment for one test, closed when it ends.
	open func(t *testing.T) *env
}

// env is a durable store and hot state.
type env struct {
	store store.Store
	hot   hot.Backend
	// lose makes the hot state lose everything (Redis flushed; the dev process restarted) and
	// answers the hot state to serve from then on, on the same durable store.
	lose func(t *testing.T) hot.Backend
}

var backends = []backend{
	{
		name: "redis+postgres",
		open: func(t *testing.T) *env {
			st, err := postgres.New(t.Context(), dbtest.Postgres(t), database.WithMigrate())
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			rdb := redistest.Client(t)
			prefix := redistest.Prefix(t, rdb)
			hb := redishot.New(rdb, prefix, st)
			t.Cleanup(func() { _ = hb.Close() })
			return &env{store: st, hot: hb, lose: func(t *testing.T) hot.Backend {
				redistest.DeletePrefix(t, rdb, prefix)
				return hb
			}}
		},
	},
	{
		name: "inproc+sqlite",
		open: func(t *testing.T) *env {
			st, err := sqlite.New(t.Context(), dbtest.SQLite(t), database.WithMigrate())
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			hb := inproc.New(st, "inproc")
			t.Cleanup(func() { _ = hb.Close() })
			return &env{store: st, hot: hb, lose: func(t *testing.T) hot.Backend {
				require.NoError(t, hb.Close())
				fresh := inproc.New(st, "inproc")
				t.Cleanup(func() { _ = fresh.Close() })
				return fresh
			}}
		},
	},
}

// forEachBackend runs test once per backend, in parallel.
func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// bundle is a Registry served through the real platform server on an in-memory connection.
type bundle struct {
	client registryv1.RegistryServiceClient
	env    *env
}

// setup serves a Registry on a new environment of b until the test ends.
func setup(t *testing.T, b backend, opts ...registry.Option) *bundle {
	t.Helper()
	e := b.open(t)
	return serve(t, e, e.hot, opts...)
}

// serve serves a Registry on e's store and hb until the test ends.
func serve(t *testing.T, e *env, hb hot.Backend, opts ...registry.Option) *bundle {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	srv := registry.New(e.store, hb, append([]registry.Option{registry.WithLogger(logger)}, opts...)...)
	srv.Start(ctx)
	t.Cleanup(cancel)
	files, err := gen.Files()
	require.NoError(t, err)
	conn := servertest.Serve(t, server.Config{
		Name:               "registry-test",
		Logger:             logger,
		DescriptorResolver: files,
		Services: []server.Service{{
			Desc:  &registryv1.RegistryService_ServiceDesc,
			Impl:  srv,
			Ready: srv.Ready,
		}},
	})
	return &bundle{client: registryv1.NewRegistryServiceClient(conn), env: e}
}

// requireCode checks err's status code.
func requireCode(t *testing.T, want codes.Code, err error) {
	t.Helper()
	require.Equal(t, want.String(), status.Code(err).String(), "%v", err)
}

// requireInvalid checks that err is InvalidArgument with a violation of field.
func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	requireCode(t, codes.InvalidArgument, err)
	var fields []string
	for _, v := range grpcerr.Violations(err) {
		fields = append(fields, v.Field)
	}
	require.True(t, slices.Contains(fields, field), "want a violation of %s, got %v (%v)", field, fields, err)
}

// statusCode answers err's status code.
func statusCode(err error) codes.Code { return status.Code(err) }
