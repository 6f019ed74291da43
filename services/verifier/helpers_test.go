package verifier_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/netguard"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/verifier"
	"github.com/converge-dev/converge/services/verifier/store"
	"github.com/converge-dev/converge/services/verifier/store/postgres"
	"github.com/converge-dev/converge/services/verifier/store/sqlite"
)

// backend opens a new, empty, migrated store for one test.
type backend struct {
	name string
	open func(t testing.TB) store.Store
}

var backends = []backend{
	{"postgres", func(t testing.TB) store.Store {
		st, err := postgres.New(t.Context(), dbtest.Postgres(t), database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}},
	{"sqlite", func(t testing.TB) store.Store {
		st, err := sqlite.New(t.Context(), dbtest.SQLite(t), database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}},
}

// forEachBackend runs test once per store backend, as parallel subtests.
func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// bundle is a Verifier served in-process over bufconn through the real platform server, with an
// allowed root of its own.
type bundle struct {
	client verifierv1.VerifierServiceClient
	store  store.Store
	// root is the verifier's allowed root.
	root string
	// env is the verifier's environment as checks see it.
	env map[string]string
}

// setup starts a Verifier on b's store. opts add to the test defaults (allowed root, 1 ms retry
// backoff, the bundle's environment).
func setup(t testing.TB, b backend, opts ...verifier.Option) *bundle {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	bu := &bundle{store: b.open(t), root: root, env: map[string]string{"PATH": os.Getenv("PATH"), "HOME": root}}
	opts = append([]verifier.Option{
		verifier.WithAllowedRoots(root),
		verifier.WithRetryBackoff(time.Millisecond),
		verifier.WithScratchDir(t.TempDir()),
		verifier.WithDestinations(netguard.AllowAll()), // the test's apps run on loopback
		verifier.WithLookupEnv(func(name string) (string, bool) {
			v, ok := bu.env[name]
			return v, ok
		}),
	}, opts...)
	bu.client = verifierv1.NewVerifierServiceClient(serveBuf(t, verifier.New(bu.store, opts...), bu.store))
	return bu
}

// serveBuf serves svc in-process (bufconn) through the real platform server until the test ends
// and answers a client connection.
func serveBuf(t testing.TB, svc *verifier.Server, st store.Store) *grpc.ClientConn {
	t.Helper()
	return servertest.Serve(t, server.Config{
		Name:     "verifier-test",
		Services: []server.Service{{Desc: &verifierv1.VerifierService_ServiceDesc, Impl: svc, Ready: st.Ping}},
	})
}

// serve runs a platform server with the Verifier service on lis (a real TCP listener, for grpc
// checks) until the test ends.
func serve(t testing.TB, lis net.Listener, svc *verifier.Server, st store.Store) {
	t.Helper()
	srv, err := server.Config{
		Name:           "verifier-test",
		Logger:         slog.New(slog.DiscardHandler),
		DrainDelay:     -1,
		DisableTracing: true,
		Services: []server.Service{{
			Desc: &verifierv1.VerifierService_ServiceDesc, Impl: svc, Ready: st.Ping,
		}},
	}.Complete()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// grpcTarget starts a real converge service on a loopback port, for grpc checks: a Verifier of
// its own on SQLite. It answers the address.
func grpcTarget(t *testing.T) string {
	t.Helper()
	st := backends[1].open(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serve(t, lis, verifier.New(st), st)
	return lis.Addr().String()
}

// dir creates a directory inside the bundle's allowed root with files (path → content).
func (b *bundle) dir(t testing.TB, files map[string]string) string {
	t.Helper()
	d, err := os.MkdirTemp(b.root, "app-")
	require.NoError(t, err)
	for rel, content := range files {
		writeFile(t, filepath.Join(d, rel), content)
	}
	return d
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func (b *bundle) verify(t *testing.T, req *verifierv1.VerifyRequest) *verifierv1.VerifyReport {
	t.Helper()
	res, err := b.client.Verify(t.Context(), req)
	require.NoError(t, err)
	return res.GetReport()
}

// requireCode checks err's status code and answers its field violations.
func requireCode(t *testing.T, err error, code codes.Code) []grpcerr.FieldViolation {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, status.Code(err), "error: %v", err)
	return grpcerr.Violations(err)
}

// requireViolation checks that err is InvalidArgument with a violation of field whose
// description contains want.
func requireViolation(t *testing.T, err error, field, want string) {
	t.Helper()
	vs := requireCode(t, err, codes.InvalidArgument)
	for _, v := range vs {
		if v.Field == field && strings.Contains(v.Description, want) {
			return
		}
	}
	t.Fatalf("no violation of %s saying %q in %v", field, want, vs)
}

// statusOf answers the status of each criterion of r by id.
func statusOf(r *verifierv1.VerifyReport) map[string]string {
	out := map[string]string{}
	for _, res := range r.GetResults() {
		out[res.GetCriterionId()] = strings.TrimPrefix(res.GetStatus().String(), "CRITERION_STATUS_")
	}
	return out
}

func resultOf(t *testing.T, r *verifierv1.VerifyReport, id string) *verifierv1.CriterionResult {
	t.Helper()
	for _, res := range r.GetResults() {
		if res.GetCriterionId() == id {
			return res
		}
	}
	t.Fatalf("no result for %s", id)
	return nil
}

// inventoryApp is the small real app the example criteria (examples/criteria/inventory-export.md)
// describe: an HTTP API, a source directory, and a converge gRPC service beside it.
type inventoryApp struct {
	http   *httptest.Server
	dir    string
	grpc   string
	broken atomic.Bool
}

const serverGo = "package app\n\n// Serve serves the inventory API.\nfunc Serve() {}\n"

func startInventoryApp(t *testing.T, b *bundle) *inventoryApp {
	t.Helper()
	a := &inventoryApp{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/inventory", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if a.broken.Load() {
			_, _ = io.WriteString(w, `{"count": 2, "items": [{"sku": "SKU-1"}, {"sku": "SKU-2"}]}`)
			return
		}
		_, _ = io.WriteString(w, `{"count": 3, "items": [{"sku": "SKU-1"}, {"sku": "SKU-2"}, {"sku": "SKU-3"}]}`)
	})
	mux.HandleFunc("GET /api/inventory/export", func(w http.ResponseWriter, r *http.Request) {
		if f := r.URL.Query().Get("format"); f != "" && f != "csv" {
			http.Error(w, "unsupported format "+f, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/csv")
		if a.broken.Load() {
			_, _ = io.WriteString(w, "sku,name,quantity\nSKU-1,Bolt,10\n")
			return
		}
		_, _ = io.WriteString(w, "sku,name,location,quantity\nSKU-1,Bolt,A1,10\n")
	})
	a.http = httptest.NewServer(mux)
	t.Cleanup(a.http.Close)
	a.dir = b.dir(t, map[string]string{
		"VERSION":                   "1.4.0\n",
		"app/server.go":             serverGo,
		"migrations/0001_items.sql": "CREATE TABLE items (sku text PRIMARY KEY);\n",
	})
	a.grpc = grpcTarget(t)
	return a
}

// breakIt makes the app fail F1 (wrong count), F2 (missing column) and F4 (debug output).
func (a *inventoryApp) breakIt(t *testing.T) {
	t.Helper()
	a.broken.Store(true)
	writeFile(t, filepath.Join(a.dir, "app/server.go"), serverGo+"\nfunc debug() {\n\tfmt.Println(\"here\")\n}\n")
}

func (a *inventoryApp) target() *verifierv1.Target {
	return &verifierv1.Target{
		Directory:   &verifierv1.Target_LocalDir{LocalDir: a.dir},
		BaseUrl:     a.http.URL,
		GrpcAddress: a.grpc,
	}
}

// example reads a done-criteria document of the project's examples/ folder.
func example(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "criteria", name))
	require.NoError(t, err)
	return string(b)
}
