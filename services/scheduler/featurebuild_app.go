package scheduler

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/proc"
)

// The app under test (seed §4.5, §5: recovery actions). Before Verify Done of a feature build's
// iteration the Scheduler starts the app in a checkout of the run branch's commit, polls its ready
// URL, and hands the Verifier its base URL; after the verification it stops it (the process group).
// It runs in the Scheduler because the Scheduler is the one that has the run branch's commit
// (checked out for the Verifier, or fetchable) and calls the Verifier: the app lives exactly as
// long as the verification, on the Scheduler's host; the Verifier reaches it at ready_url's host,
// so that host must be reachable from the Verifier (127.0.0.1 when both run in one process, as in
// converge dev and converge build). Every attempt goes to the build's recovery_log.

// Recovery limits of the seed's table (§5.2).
const (
	appStartAttempts   = 3                // "App not running": 3 attempts
	appDefaultTimeout  = 60 * time.Second // ... of 60 s each
	appPollEvery       = 250 * time.Millisecond
	appOutputCap       = 64 << 10
	appCheckoutsSubdir = "apps"
	appErrorTail       = 4000 // bytes of a failed start's output kept for its fix task
	// appBuildErrorPrefix starts the block reason of a start command that exited before it was
	// ready (a build error: decide answers it with a fix task while appMaxFixes allows).
	appBuildErrorPrefix = "build error on start: the app exited ("
	appMaxFixes         = 2 // "Build errors on start": 2 attempts (seed §5.2)
	appFixTaskID        = "fix-app-start"
)

// runningApp is a started app: stop ends it (and everything it started).
type runningApp struct {
	baseURL string
	grpc    bool // ready_url is grpc://host:port: the app is the target of grpc checks
	stop    func()
}

// aim points the Verifier's target at the app: its base URL, or its gRPC address.
func (a *runningApp) aim(t *verifierv1.Target) {
	if a.grpc {
		t.GrpcAddress = strings.TrimPrefix(a.baseURL, "grpc://")
		return
	}
	t.BaseUrl = a.baseURL
}

// iterationApp starts the app of execution e's build (nil, "" when it has none).
func (s *Server) iterationApp(ctx context.Context, e *schedulerv1.Execution, commit string) (*runningApp, string) {
	fb, _, err := s.store.GetFeatureBuild(ctx, e.GetFeatureBuildId())
	if err != nil {
		return nil, "the feature build could not be read: " + err.Error()
	}
	return s.startApp(ctx, fb, e, commit)
}

// startApp starts fb's app for the verification of execution e at commit; it answers the app
// (nil when the build has none) or why it could not (the build then ends BLOCKED with it).
func (s *Server) startApp(ctx context.Context, fb *schedulerv1.FeatureBuild, e *schedulerv1.Execution, commit string) (*runningApp, string) {
	app := fb.GetApp()
	if app == nil {
		return nil, ""
	}
	iteration := fb.GetCurrentIteration()
	logEntry := func(issue, action, result string, ok bool, attempt int) {
		_, err := s.store.UpdateFeatureBuild(ctx, fb.GetId(), func(b *schedulerv1.FeatureBuild) error {
			b.RecoveryLog = append(b.RecoveryLog, &schedulerv1.RecoveryLogEntry{Time: timestamppb.New(s.now()), Issue: issue, Action: action,
				Result: result, Succeeded: ok, Attempt: int32(attempt), Iteration: iteration})
			return nil
		})
		if err != nil && ctx.Err() == nil {
			s.log.Warn("feature build: recovery log", "feature_build", fb.GetId(), "err", err)
		}
		s.buildEvent(ctx, e.GetId(), fmt.Sprintf("Build Feature - recovery: %s; %s: %s", issue, action, result),
			map[string]any{"event": "feature_build.recovery", "feature_build_id": fb.GetId(), "iteration": float64(iteration), "attempt": float64(attempt), "succeeded": ok})
	}
	u, err := url.Parse(app.GetReadyUrl())
	if err != nil {
		return nil, "the app's ready URL does not parse: " + err.Error()
	}
	port := int(app.GetPort())
	if port == 0 {
		if port, _ = strconv.Atoi(u.Port()); port == 0 {
			port = map[string]int{"http": 80, "https": 443}[strings.ToLower(u.Scheme)]
		}
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), strconv.Itoa(port)), time.Second); err == nil {
		_ = c.Close()
		logEntry(fmt.Sprintf("Port %d in use", port), "none: the process holding it was not started by converge, and converge never kills one", "Blocked", false, 1)
		return nil, fmt.Sprintf("port %d is in use by a process converge did not start: stop it (or change the app's port), then resume", port)
	}
	dir, err := s.appCheckout(ctx, e, commit)
	if err != nil {
		logEntry("App not running", "check out the run branch", "Failed: "+err.Error(), false, 1)
		return nil, "the run branch could not be checked out to start the app: " + err.Error()
	}
	timeout := app.GetReadyTimeout().AsDuration()
	if timeout <= 0 {
		timeout = appDefaultTimeout
	}
	attempts := appStartAttempts
	if fb.GetAutonomy() == schedulerv1.Autonomy_AUTONOMY_CAUTIOUS {
		attempts = 1 // no recovery attempts
	}
	var last string
	for attempt := 1; attempt <= attempts; attempt++ {
		appCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan proc.Result, 1)
		go func() {
			done <- proc.Run(appCtx, proc.Spec{Shell: app.GetStartCommand(), Dir: dir, Env: os.Environ(), OutputCap: appOutputCap, WaitDelay: 2 * time.Second})
		}()
		stop := func() {
			cancel()
			<-done
		}
		started := time.Now()
		ready, exited := waitReady(ctx, app.GetReadyUrl(), timeout, done)
		switch {
		case ready:
			logEntry("App not running", "start: "+app.GetStartCommand(), fmt.Sprintf("Started: ready after %s", time.Since(started).Round(100*time.Millisecond)), true, attempt)
			return &runningApp{baseURL: u.Scheme + "://" + u.Host, grpc: strings.EqualFold(u.Scheme, "grpc"), stop: func() { stop(); _ = os.RemoveAll(dir) }}, ""
		case exited != nil:
			// A start command that exits is a build error (seed §5.2, §5.6): starting it again
			// would fail the same way. Verify Done ends BLOCKED with its output, and the loop
			// turns that into one fix task and a restart (decide, appFixTask).
			tail := strings.TrimSpace(exited.Output)
			if len(tail) > appErrorTail {
				tail = tail[len(tail)-appErrorTail:]
			}
			logEntry("Build errors on start", "start: "+app.GetStartCommand(), "Failed: exited ("+exited.Status+"): "+tail, false, attempt)
			_ = os.RemoveAll(dir)
			return nil, fmt.Sprintf("%s%s) before it was ready: %s", appBuildErrorPrefix, exited.Status, tail)
		default:
			stop()
			last = fmt.Sprintf("%s did not answer 2xx within %s", app.GetReadyUrl(), timeout)
			logEntry("App not running", "start: "+app.GetStartCommand(), fmt.Sprintf("Failed: not ready within %s", timeout), false, attempt)
		}
		if ctx.Err() != nil {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Sprintf("recovery exhausted: the app did not become ready in %d attempts (last: %s); see the recovery log", attempts, last)
}

// waitReady polls readyURL until it answers 2xx (true), the app exits (its result), or timeout.
func waitReady(ctx context.Context, readyURL string, timeout time.Duration, done <-chan proc.Result) (bool, *proc.Result) {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(appPollEvery)
	defer tick.Stop()
	ready := func() bool {
		if req, err := http.NewRequestWithContext(ctx, http.MethodGet, readyURL, nil); err == nil {
			if res, err := client.Do(req); err == nil {
				_ = res.Body.Close()
				return res.StatusCode >= 200 && res.StatusCode < 300
			}
		}
		return false
	}
	if u, err := url.Parse(readyURL); err == nil && strings.EqualFold(u.Scheme, "grpc") {
		conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, nil
		}
		defer func() { _ = conn.Close() }()
		health := healthpb.NewHealthClient(conn)
		ready = func() bool { // grpc.health.v1: the server's overall health
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			res, err := health.Check(cctx, &healthpb.HealthCheckRequest{})
			return err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING
		}
	}
	for {
		if ready() {
			return true, nil
		}
		select {
		case r := <-done:
			return false, &r
		case <-deadline.C:
			return false, nil
		case <-ctx.Done():
			return false, nil
		case <-tick.C:
		}
	}
}

// appCheckout clones the run branch at commit into the work dir for the app.
func (s *Server) appCheckout(ctx context.Context, e *schedulerv1.Execution, commit string) (string, error) {
	repo := e.GetRepository()
	root := s.workDir
	if root == "" {
		root = os.TempDir()
	}
	root, err := filepath.Abs(filepath.Join(root, appCheckoutsSubdir))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(root, e.GetId()+"-")
	if err != nil {
		return "", err
	}
	if repo == nil {
		return dir, nil // a scratch build: the app runs in an empty directory
	}
	if _, err := git(ctx, "", "clone", "--quiet", "--no-hardlinks", "--branch", e.GetRunBranch(), "--", repoSource(repo), dir); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	if commit != "" {
		if _, err := git(ctx, dir, "checkout", "--quiet", "--detach", commit); err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// appBuildErrors counts b's iterations whose Verify Done was blocked by a build error on start.
func appBuildErrors(b *schedulerv1.FeatureBuild) int {
	n := 0
	for _, it := range b.GetIterations() {
		if strings.HasPrefix(it.GetVerification().GetBlockReason(), appBuildErrorPrefix) {
			n++
		}
	}
	return n
}

// appFixTask is the one fix task of an iteration after a build error on start: its output, the
// start command, and what to do; the next Verify Done starts the app again (the restart).
func appFixTask(fb *schedulerv1.FeatureBuild, n int32, why string) *commonv1.Task {
	desc := fmt.Sprintf("Iteration %d of the feature %q: the app under test does not start. Its start command\n\n    %s\n\n"+
		"exited before it was ready (build error on start, attempt %d of %d). Its output:\n\n%s\n\n"+
		"Read the error (a missing import, a type error, a typo), fix the code so that the start command builds and serves, "+
		"and change nothing else: the app is started again before the done-criteria are verified.",
		n, fb.GetFeature(), fb.GetApp().GetStartCommand(), appBuildErrors(fb), appMaxFixes, strings.TrimPrefix(why, "build error on start: "))
	return &commonv1.Task{Id: appFixTaskID, Action: commonv1.TaskAction_TASK_ACTION_UPDATE, Phase: "fix",
		Title: "Fix the build error that stops the app from starting", Description: clip(desc, 16000),
		Requirements: []string{clip("the start command starts the app: "+fb.GetApp().GetStartCommand(), 1000)}}
}
