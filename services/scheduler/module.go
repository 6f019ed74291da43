package scheduler

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
	"github.com/converge-dev/converge/services/scheduler/store/sqlite"
)

// StaleAfterEnv sets --stale-after when the flag is not given (the Registry's stale window reads
// the same variable).
const StaleAfterEnv = "CONVERGE_STALE_AFTER"

// Module is the Scheduler as converge's binaries serve it: converge-scheduler on Postgres,
// reaching the Verifier and the Registry by its flags; converge dev on SQLite, reaching them
// through the process's own address.
func Module() servicecmd.Module {
	var (
		verifierAddr string
		registryAddr string
		stale        time.Duration
		token        string
		workDir      string
		gitListen    string
		gitURL       string
		dash         dashboardFlags
		maxWatchers  = DefaultMaxWatchers
	)
	return servicecmd.Module{
		Name:        "scheduler",
		Short:       "converge Scheduler service: task lists, waves, executions, leases and the event stream",
		Listen:      "127.0.0.1:7071",
		Needs:       servicecmd.NeedsPostgres,
		DurationEnv: map[string]string{"stale-after": StaleAfterEnv},
		Bind: func(fs *pflag.FlagSet) {
			fs.StringVar(&verifierAddr, "verifier", envOr("CONVERGE_VERIFIER_ADDR", ""), "Verifier address host:port for Verify Done; empty = runs with done-criteria end BLOCKED [CONVERGE_VERIFIER_ADDR]")
			fs.StringVar(&registryAddr, "registry", envOr("CONVERGE_REGISTRY_ADDR", ""), "Registry address host:port: the reaper requeues what agents the Registry reports stale hold, before their leases run out; empty = leases alone [CONVERGE_REGISTRY_ADDR]")
			fs.DurationVar(&stale, "stale-after", defaultStaleAfter, "an agent silent this long to the Registry and to the Scheduler loses its assignments, its Registry locks released first (with --registry) ["+StaleAfterEnv+"]")
			fs.StringVar(&token, "token", envOr("CONVERGE_TOKEN", ""), "bearer token sent to the Verifier and the Registry [CONVERGE_TOKEN]")
			fs.StringVar(&gitListen, "git-listen", envOr("CONVERGE_SCHEDULER_GIT_LISTEN", ""), "HTTP address (host:port) where local repositories are served read-only to the Verifier over git's smart HTTP while Verify Done runs, each under a random path; empty = local repositories are checked out under --work-dir instead [CONVERGE_SCHEDULER_GIT_LISTEN]")
			fs.StringVar(&gitURL, "git-url", envOr("CONVERGE_SCHEDULER_GIT_URL", ""), "URL the Verifier reaches --git-listen at, e.g. http://scheduler-0.scheduler:7076 (default http://<--git-listen>) [CONVERGE_SCHEDULER_GIT_URL]")
			dash.bind(fs)
			fs.IntVar(&maxWatchers, "max-watchers", envInt("CONVERGE_MAX_WATCHERS", DefaultMaxWatchers), "most WatchExecution streams served at once (every caller together); one more is ResourceExhausted; 0 for no limit [CONVERGE_MAX_WATCHERS]")
			fs.StringVar(&workDir, "work-dir", envOr("CONVERGE_SCHEDULER_WORK_DIR", os.TempDir()), "where Verify Done checks run branches out for the Verifier when it cannot fetch them itself (local paths, non-http(s) URLs; the Verifier must allow it as a root) [CONVERGE_SCHEDULER_WORK_DIR]")
		},
		Build: func(ctx context.Context, rt servicecmd.Runtime) (servicecmd.Built, error) {
			var closers []func()
			closeAll := func() {
				for i := len(closers) - 1; i >= 0; i-- {
					closers[i]()
				}
			}
			var (
				st interface {
					store.Store
					servicecmd.Store
				}
				err                   error
				verifierConn, regConn *grpc.ClientConn
			)
			opts := []Option{WithLogger(rt.Logger), WithMaxWatchers(maxWatchers)}
			serveGit := func(*Server) {}
			if e := rt.Embedded; e != nil {
				st, err = sqlite.New(ctx, e.SQLite, database.WithLogger(rt.Logger), database.WithMigrate())
				verifierConn, regConn = e.Self, e.Self
				opts = append(opts, WithWorkDir(e.WorkDir))
			} else {
				st, err = postgres.New(ctx, rt.Flags.PostgresURL, database.WithLogger(rt.Logger))
				opts = append(opts, WithWorkDir(workDir))
			}
			if err != nil {
				return servicecmd.Built{}, err
			}
			closers = append(closers, func() { _ = st.Close() })
			dial := func(addr string) (*grpc.ClientConn, error) {
				conn, err := client.Dial(addr, client.Options{Token: token})
				if err == nil {
					closers = append(closers, func() { _ = conn.Close() })
				}
				return conn, err
			}
			if rt.Embedded == nil && gitListen != "" {
				lis, err := net.Listen("tcp", gitListen)
				if err != nil {
					return servicecmd.Built{Close: closeAll}, fmt.Errorf("--git-listen %s: %w", gitListen, err)
				}
				base := gitURL
				if base == "" {
					base = "http://" + lis.Addr().String()
				}
				opts = append(opts, WithGitExport(base))
				srv := &http.Server{ReadHeaderTimeout: 10 * time.Second}
				closers = append(closers, func() { _ = srv.Close() })
				serveGit = func(s *Server) {
					srv.Handler = s.GitHandler()
					go func() { _ = srv.Serve(lis) }()
					rt.Logger.Info("serving local repositories to the Verifier over git's smart HTTP", "listen", lis.Addr().String(), "url", base)
				}
			}
			if rt.Embedded == nil && verifierAddr != "" {
				if verifierConn, err = dial(verifierAddr); err != nil {
					return servicecmd.Built{Close: closeAll}, err
				}
			}
			if rt.Embedded == nil && registryAddr != "" {
				if regConn, err = dial(registryAddr); err != nil {
					return servicecmd.Built{Close: closeAll}, err
				}
			}
			if verifierConn != nil {
				opts = append(opts, WithVerifier(verifierv1.NewVerifierServiceClient(verifierConn)))
			}
			if e := rt.Embedded; e != nil {
				opts = append(opts, WithKnowledge(knowledgev1.NewKnowledgeServiceClient(e.Self)))
			} else if dash.KnowledgeAddr != "" {
				conn, err := dial(dash.KnowledgeAddr)
				if err != nil {
					return servicecmd.Built{Close: closeAll}, err
				}
				opts = append(opts, WithKnowledge(knowledgev1.NewKnowledgeServiceClient(conn)))
			}
			if regConn != nil {
				opts = append(opts, WithRegistry(registryv1.NewRegistryServiceClient(regConn), stale))
			}
			s := New(st, opts...)
			serveGit(s)
			if rt.Embedded == nil && dash.Listen != "" {
				stop, err := dash.serve(ctx, rt, verifierAddr, registryAddr)
				if err != nil {
					return servicecmd.Built{Close: closeAll}, err
				}
				closers = append(closers, stop)
			}
			// The driver (lease reaper, Verify Done) runs on every replica; one leads at a time. It
			// starts once the schema is current (the readiness probe's first success).
			return servicecmd.Built{
				Desc:  &server.Service{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: s},
				Store: st,
				Start: s.Start,
				Close: closeAll,
			}, nil
		},
	}
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
