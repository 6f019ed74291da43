// Package scheduler is converge's Scheduler service: see DESIGN.md §1.
//
// Where things are:
//
//   - server.go: the Server, New and its Options (With...).
//   - tasklists.go, waves.go: task lists and PlanWaves; executions.go: StartExecution and the
//     execution RPCs (get, list, pause, resume, cancel, retry, skip); events.go: the log and
//     WatchExecution; tail.go: the log tail one execution's streams share.
//   - options.go: ExecutionOptions defaults, resolved once when an execution is created.
//   - runner.go: the transaction runner (every state change of an execution) and the engine's rules.
//   - claim.go: ClaimTask, the lease and capability matching; lease.go: the lease checks;
//     progress.go: ReportProgress and RecordCheckpoint; complete.go: CompleteTask and requeues.
//   - barrier.go: the wave barrier, integration and the stop rules.
//   - driver.go: the leader's background loop; reaper.go: expired leases, stale and restarted
//     agents; verify.go: Verify Done.
//   - signal.go: the wake signal of long polls; cache.go: task-list and assignment caches.
//   - git.go: the git the Scheduler runs; errors.go: gRPC status mapping; ids.go: ids.
package scheduler

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/scheduler/plan"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Server implements schedulerv1.SchedulerServiceServer on a store.
type Server struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	store       store.Store
	verifier    verifierv1.VerifierServiceClient
	workDir     string
	log         *slog.Logger
	driverEvery time.Duration
	driverKick  chan struct{} // kickDriver: run the driver's next round now
	leading     atomic.Bool   // the driver holds the leadership (tests wait on it without taking it)
	planBudget  int64         // operations budget of one plan (plan.PlanContext)
	lists       lists
	wake        *signal
	owners      owners   // assignment → execution
	sessions    sessions // instance → the last session it claimed with
	admitted    admitted // instance → until when the Registry said it is live
	signOffs    signOffs // executions waiting for a person's sign-off
	registry    registryv1.RegistryServiceClient
	staleAfter  time.Duration
	// verifyTries and verifyBackoff bound the retries of a Verifier that answers a retryable
	// error; verifying marks the executions whose Verify Done is in flight.
	verifyTries   int
	verifyBackoff backoffPolicy
	verifying     sync.Map
	// knowledge records what fixed a feature build's failed criteria and confirms the items given
	// to passing tasks (WithKnowledge); nil: nothing.
	knowledge knowledgev1.KnowledgeServiceClient
	// confirmKick wakes the knowledge confirmation worker; confirmRetry paces its retries
	// (knowledge_confirm.go).
	confirmKick  chan struct{}
	confirmRetry backoffPolicy
	// gitExport serves local repositories to the Verifier (WithGitExport); nil: none.
	gitExport *gitExport
	// watchers bounds the WatchExecution streams in flight (watchlimits.go).
	watchers watchers
	// tails are the shared log tails of the watched executions (tail.go).
	tails tails
	// diffs bounds and caches GetTaskDiff's git work (taskdiff.go).
	diffs diffs
	// groups are the queues of group commit per execution (runner_group.go).
	groups groups
	// now is the clock of ids and of the driver's own deadlines (default time.Now); lease times
	// come from the store's clock.
	now func() time.Time
}

// WithClock sets the clock of ids, the wall-time budget and the driver's grace periods (default
// time.Now). Leases, lease expiry and log times use the store's clock.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// New returns the Scheduler service on st. Start runs its background driver.
func New(st store.Store, opts ...Option) *Server {
	s := &Server{
		store: st, log: slog.New(slog.DiscardHandler), driverEvery: driverInterval, driverKick: make(chan struct{}, 1), planBudget: plan.DefaultBudget, wake: newSignal(), now: time.Now,
		watchers: watchers{max: DefaultMaxWatchers}, confirmKick: make(chan struct{}, 1),
		lists: lists{m: map[string]*store.TaskList{}, index: map[string]map[string]int{}, byExecution: map[string]string{}},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ schedulerv1.SchedulerServiceServer = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithVerifier makes the Scheduler ask v for Verify Done after the last wave. Without it an
// execution whose list has done-criteria ends BLOCKED ("no Verifier configured").
func WithVerifier(v verifierv1.VerifierServiceClient) Option {
	return func(s *Server) { s.verifier = v }
}

// WithWorkDir sets the directory the Scheduler checks run branches out into for the Verifier when
// the Verifier cannot fetch them itself (a local repository path or a non-http(s) URL; see
// verifyTarget), and makes empty directories in for runs without a repository (default: the OS
// temp dir). The Verifier must allow it as a root.
func WithWorkDir(dir string) Option { return func(s *Server) { s.workDir = dir } }

// WithLogger sets the logger of the background driver.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithDriverInterval sets how often the leader's driver looks for expired leases, runs to verify
// and runs past their wall time (default 500 ms).
func WithDriverInterval(d time.Duration) Option { return func(s *Server) { s.driverEvery = d } }

// WithPlanBudget sets the operations budget of one plan (PlanWaves, StartExecution; default
// plan.DefaultBudget, 0 for none): a plan that needs more is refused ResourceExhausted.
func WithPlanBudget(ops int64) Option { return func(s *Server) { s.planBudget = ops } }

// WithVerifyRetries sets how many times Verify Done calls a Verifier that answers a retryable
// error (Unavailable, DeadlineExceeded, Aborted, ResourceExhausted) before the run ends BLOCKED
// with the last error (default 2: the first call and one retry, as the seed says), and the first delay between two tries, which doubles up to
// 30 s (default 1 s). Any other error ends the run BLOCKED at once.
func WithVerifyRetries(tries int, first time.Duration) Option {
	return func(s *Server) {
		s.verifyTries = tries
		s.verifyBackoff = backoffPolicy{first: first, max: max(first, verifyMaxWait)}
	}
}

// WithRegistry lets the reaper ask the Registry for stale agents (ListStaleAgents) and requeue
// what they hold before their leases run out: a lease is three execution heartbeats (90 s by
// default), a dead agent is stale after staleAfter (0: 60 s, the seed's window) without a Registry heartbeat. An
// assignment is only taken back when the Scheduler has not heard from its holder for as long
// either (no claim or report within staleAfter), so an agent cut off from the Registry alone
// keeps its work while it reports. Before requeueing, the reaper releases the dead agent's file
// locks in the Registry (the next grant of each has a higher fencing token, so a late write of the
// dead holder is still refused). Without a Registry, expired leases alone free a dead agent's
// work.
func WithRegistry(c registryv1.RegistryServiceClient, staleAfter time.Duration) Option {
	return func(s *Server) {
		s.registry = c
		if staleAfter <= 0 {
			staleAfter = defaultStaleAfter
		}
		s.staleAfter = staleAfter
	}
}
