package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"buf.build/go/protovalidate"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The worker's tests drive a real worker (real git repositories, real processes) against
// in-memory stand-ins of the Scheduler, Registry and Knowledge clients (the services live in
// other modules; cmd/converge's agent_*_test.go run the same paths against the real ones). The
// stand-ins check every request with protovalidate, as the services' interceptors do, and record
// what they were sent.

// validate answers InvalidArgument for a request that breaks its contract, as the servers do.
func validate(m proto.Message) error {
	if err := protovalidate.Validate(m); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// fakeScheduler hands out the queued assignments and records the reports and completions.
type fakeScheduler struct {
	schedulerv1.SchedulerServiceClient

	mu        sync.Mutex
	queue     []*schedulerv1.ClaimedAssignment
	wake      chan struct{}
	claims    []*schedulerv1.ClaimTaskRequest
	reports   []*schedulerv1.ReportProgressRequest
	directive schedulerv1.Directive // answered to ReportProgress (0 = CONTINUE)
	// onClaim, when set, runs when an assignment is handed out (before ClaimTask answers).
	onClaim   func(*schedulerv1.ClaimedAssignment)
	completed chan *schedulerv1.CompleteTaskRequest
	// checkpoints are the RecordCheckpoint requests, in order.
	checkpoints []*schedulerv1.RecordCheckpointRequest
	// fuse answers a CompleteTask with claim_next the next queued assignment (fused
	// complete-and-claim).
	fuse bool
	// onReport, when set, sees every accepted ReportProgress (under f.mu).
	onReport func(*schedulerv1.ReportProgressRequest)
	// answerReport, when set, runs after a report was recorded and before it is answered (not
	// under f.mu): as on a real server, a caller that gave up meanwhile gets its context's error
	// although the report was recorded.
	answerReport func(ctx context.Context)
	// gate, when set, runs after a completion was recorded and before it is answered (not under
	// f.mu): a test holds a completion in flight.
	gate func(*schedulerv1.CompleteTaskRequest)
}

func (f *fakeScheduler) RecordCheckpoint(_ context.Context, req *schedulerv1.RecordCheckpointRequest, _ ...grpc.CallOption) (*schedulerv1.RecordCheckpointResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checkpoints = append(f.checkpoints, proto.Clone(req).(*schedulerv1.RecordCheckpointRequest))
	ck := proto.Clone(req.GetCheckpoint()).(*commonv1.Checkpoint)
	ck.Id = fmt.Sprintf("ck_%d", len(f.checkpoints))
	return &schedulerv1.RecordCheckpointResponse{Checkpoint: ck}, nil
}

// recorded answers the checkpoints recorded so far.
func (f *fakeScheduler) recorded() []*schedulerv1.RecordCheckpointRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*schedulerv1.RecordCheckpointRequest(nil), f.checkpoints...)
}

func newFakeScheduler() *fakeScheduler {
	return &fakeScheduler{wake: make(chan struct{}, 1), completed: make(chan *schedulerv1.CompleteTaskRequest, 16)}
}

// push queues assignments for the next ClaimTasks, all of them at once: a worker already waiting
// in ClaimTask sees every one of them queued when it takes the first (a prefetching worker's
// claim ahead, which does not wait, would otherwise race the next push).
func (f *fakeScheduler) push(cas ...*schedulerv1.ClaimedAssignment) {
	f.mu.Lock()
	f.queue = append(f.queue, cas...)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *fakeScheduler) ClaimTask(ctx context.Context, req *schedulerv1.ClaimTaskRequest, _ ...grpc.CallOption) (*schedulerv1.ClaimTaskResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.claims = append(f.claims, proto.Clone(req).(*schedulerv1.ClaimTaskRequest))
	f.mu.Unlock()
	wait := time.NewTimer(req.GetWait().AsDuration())
	defer wait.Stop()
	for {
		f.mu.Lock()
		if len(f.queue) > 0 {
			ca := f.queue[0]
			f.queue = f.queue[1:]
			hook := f.onClaim
			f.mu.Unlock()
			if hook != nil {
				hook(ca)
			}
			return &schedulerv1.ClaimTaskResponse{Assignment: ca}, nil
		}
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-wait.C:
			return &schedulerv1.ClaimTaskResponse{}, nil
		case <-f.wake:
		}
	}
}

func (f *fakeScheduler) ReportProgress(ctx context.Context, req *schedulerv1.ReportProgressRequest, _ ...grpc.CallOption) (*schedulerv1.ReportProgressResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.reports = append(f.reports, proto.Clone(req).(*schedulerv1.ReportProgressRequest))
	if f.onReport != nil {
		f.onReport(req)
	}
	answer := f.answerReport
	f.mu.Unlock()
	if answer != nil {
		answer(ctx)
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.directive
	if d == 0 {
		d = schedulerv1.Directive_DIRECTIVE_CONTINUE
	}
	return &schedulerv1.ReportProgressResponse{Directive: d, Reason: "cancelled by the test"}, nil
}

func (f *fakeScheduler) CompleteTask(_ context.Context, req *schedulerv1.CompleteTaskRequest, _ ...grpc.CallOption) (*schedulerv1.CompleteTaskResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	f.completed <- proto.Clone(req).(*schedulerv1.CompleteTaskRequest)
	res := &schedulerv1.CompleteTaskResponse{Directive: schedulerv1.Directive_DIRECTIVE_CONTINUE}
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		gate(req)
	}
	f.mu.Lock()
	if f.fuse && req.GetClaimNext() != nil && len(f.queue) > 0 {
		res.Next, f.queue = f.queue[0], f.queue[1:]
	}
	f.mu.Unlock()
	return res, nil
}

// firstReportEvents answers the events of the first ReportProgress, which must have come.
func (f *fakeScheduler) firstReportEvents(t *testing.T) []*schedulerv1.AgentEvent {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.reports)
	return f.reports[0].GetEvents()
}

// events answers every event the worker sent, in order (reports, then completions given).
func (f *fakeScheduler) events(completions ...*schedulerv1.CompleteTaskRequest) []*schedulerv1.AgentEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*schedulerv1.AgentEvent
	for _, r := range f.reports {
		out = append(out, r.GetEvents()...)
	}
	for _, c := range completions {
		out = append(out, c.GetEvents()...)
	}
	return out
}

// fakeRegistry registers agents, records heartbeats and grants every lock.
type fakeRegistry struct {
	registryv1.RegistryServiceClient

	mu         sync.Mutex
	registers  []*registryv1.RegisterAgentRequest
	heartbeats []*registryv1.HeartbeatRequest
	token      int64
	released   []string
	// batches are the resources of each AcquireLocks call, releases those of each ReleaseLocks.
	batches, releases [][]string
	// noBatch answers AcquireLocks and ReleaseLocks Unimplemented (a Registry before them).
	noBatch bool
	// unavailable answers that many AcquireLocks calls Unavailable (a Registry whose Redis is
	// restarting) before it grants; acquireCalls counts every AcquireLocks call.
	unavailable, acquireCalls int
	// releaseUnavailable answers that many ReleaseLocks calls Unavailable before it releases;
	// releaseCalls counts every ReleaseLocks call.
	releaseUnavailable, releaseCalls int
	// replaced, when set, is a session whose heartbeats are answered Aborted.
	replaced string
	// onHeartbeat, when set, sees every heartbeat.
	onHeartbeat func(*registryv1.HeartbeatRequest)
	// hangRegister records registrations but answers none (until the caller gives up).
	hangRegister bool
	// owners and renews count the GetOwner and RenewLock calls.
	owners, renews int
	// ownerWaitsForLocks, when set, makes GetOwner wait (up to 20 s) until AcquireLocks was
	// called; ownerSawLocks says whether it was.
	ownerWaitsForLocks chan struct{}
	ownerSawLocks      bool
}

func (f *fakeRegistry) RegisterAgent(ctx context.Context, req *registryv1.RegisterAgentRequest, _ ...grpc.CallOption) (*registryv1.RegisterAgentResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.registers = append(f.registers, proto.Clone(req).(*registryv1.RegisterAgentRequest))
	hang := f.hangRegister
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &registryv1.RegisterAgentResponse{Agent: &registryv1.AgentInstance{InstanceId: req.GetInstanceId(), SessionId: req.GetSessionId(),
		Status: commonv1.AgentStatus_AGENT_STATUS_INITIALIZING}}, nil
}

func (f *fakeRegistry) Heartbeat(_ context.Context, req *registryv1.HeartbeatRequest, _ ...grpc.CallOption) (*registryv1.HeartbeatResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.heartbeats = append(f.heartbeats, proto.Clone(req).(*registryv1.HeartbeatRequest))
	replaced, hook := f.replaced, f.onHeartbeat
	f.mu.Unlock()
	if hook != nil {
		hook(req)
	}
	if replaced != "" && req.GetSessionId() == replaced {
		return nil, status.Errorf(codes.Aborted, "agent %s: session %s was replaced by a newer registration", req.GetInstanceId(), replaced)
	}
	return &registryv1.HeartbeatResponse{}, nil
}

func (f *fakeRegistry) beats() []*registryv1.HeartbeatRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*registryv1.HeartbeatRequest(nil), f.heartbeats...)
}

func (f *fakeRegistry) GetOwner(context.Context, *registryv1.GetOwnerRequest, ...grpc.CallOption) (*registryv1.GetOwnerResponse, error) {
	f.mu.Lock()
	f.owners++
	wait := f.ownerWaitsForLocks
	f.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
			f.mu.Lock()
			f.ownerSawLocks = true
			f.mu.Unlock()
		case <-time.After(20 * time.Second):
		}
	}
	return nil, status.Error(codes.NotFound, "no owner")
}

func (f *fakeRegistry) AcquireLock(_ context.Context, req *registryv1.AcquireLockRequest, _ ...grpc.CallOption) (*registryv1.AcquireLockResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.token++
	return &registryv1.AcquireLockResponse{Granted: true, Lock: &registryv1.Lock{Resource: req.GetResource(), Holder: req.GetHolder(), Token: f.token}}, nil
}

func (f *fakeRegistry) RenewLock(_ context.Context, req *registryv1.RenewLockRequest, _ ...grpc.CallOption) (*registryv1.RenewLockResponse, error) {
	f.mu.Lock()
	f.renews++
	f.mu.Unlock()
	return &registryv1.RenewLockResponse{Lock: &registryv1.Lock{Resource: req.GetResource(), Holder: req.GetHolder(), Token: req.GetToken()}}, nil
}

func (f *fakeRegistry) ReleaseLock(_ context.Context, req *registryv1.ReleaseLockRequest, _ ...grpc.CallOption) (*registryv1.ReleaseLockResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, req.GetResource())
	return &registryv1.ReleaseLockResponse{}, nil
}

func (f *fakeRegistry) AcquireLocks(_ context.Context, req *registryv1.AcquireLocksRequest, _ ...grpc.CallOption) (*registryv1.AcquireLocksResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noBatch {
		return nil, status.Error(codes.Unimplemented, "unknown method AcquireLocks")
	}
	f.acquireCalls++
	if f.unavailable > 0 {
		f.unavailable--
		return nil, status.Error(codes.Unavailable, "the store cannot answer now: retry later")
	}
	f.batches = append(f.batches, req.GetResources())
	if f.ownerWaitsForLocks != nil {
		select {
		case <-f.ownerWaitsForLocks:
		default:
			close(f.ownerWaitsForLocks)
		}
	}
	res := &registryv1.AcquireLocksResponse{Granted: true}
	for _, r := range req.GetResources() {
		f.token++
		res.Locks = append(res.Locks, &registryv1.Lock{Resource: r, Holder: req.GetHolder(), Token: f.token})
	}
	return res, nil
}

func (f *fakeRegistry) ReleaseLocks(_ context.Context, req *registryv1.ReleaseLocksRequest, _ ...grpc.CallOption) (*registryv1.ReleaseLocksResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noBatch {
		return nil, status.Error(codes.Unimplemented, "unknown method ReleaseLocks")
	}
	f.releaseCalls++
	if f.releaseUnavailable > 0 {
		f.releaseUnavailable--
		return nil, status.Error(codes.Unavailable, "the store cannot answer now: retry later")
	}
	var rs []string
	for _, l := range req.GetLocks() {
		rs = append(rs, l.GetResource())
	}
	f.releases = append(f.releases, rs)
	f.released = append(f.released, rs...)
	return &registryv1.ReleaseLocksResponse{Released: int32(len(rs))}, nil
}

// fakeKnowledge stores recorded items and answers them to queries by exact file pattern; it
// records every query.
type fakeKnowledge struct {
	knowledgev1.KnowledgeServiceClient

	mu      sync.Mutex
	items   []*knowledgev1.RecordItemRequest
	queries []*knowledgev1.QueryItemsRequest
}

func (f *fakeKnowledge) RecordItem(_ context.Context, req *knowledgev1.RecordItemRequest, _ ...grpc.CallOption) (*knowledgev1.RecordItemResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items = append(f.items, proto.Clone(req).(*knowledgev1.RecordItemRequest))
	return &knowledgev1.RecordItemResponse{Item: &knowledgev1.Item{Id: fmt.Sprintf("kn_%d", len(f.items))}}, nil
}

func (f *fakeKnowledge) QueryItems(_ context.Context, req *knowledgev1.QueryItemsRequest, _ ...grpc.CallOption) (*knowledgev1.QueryItemsResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, proto.Clone(req).(*knowledgev1.QueryItemsRequest))
	res := &knowledgev1.QueryItemsResponse{}
	for i, it := range f.items {
		if it.GetFilePattern() == req.GetFilePath() {
			res.Matches = append(res.Matches, &knowledgev1.ItemMatch{Item: &knowledgev1.Item{Id: fmt.Sprintf("kn_%d", i+1), Type: it.GetType(),
				Content: it.GetContent(), FilePattern: it.GetFilePattern(), EffectiveConfidence: it.GetConfidence()}})
		}
	}
	return res, nil
}

// queried answers the QueryItems requests so far.
func (f *fakeKnowledge) queried() []*knowledgev1.QueryItemsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*knowledgev1.QueryItemsRequest(nil), f.queries...)
}

// harness is one worker running against the stand-ins until the test ends.
type harness struct {
	t     *testing.T
	w     *Worker
	sched *fakeScheduler
	reg   *fakeRegistry
	know  *fakeKnowledge
	data  string
	done  chan error
	stop  context.CancelFunc
}

// startWorker runs a worker on a fresh data dir; mutate may change its config first.
func startWorker(t *testing.T, mutate func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, sched: newFakeScheduler(), reg: &fakeRegistry{}, know: &fakeKnowledge{}, data: t.TempDir(), done: make(chan error, 1)}
	cfg := Config{InstanceID: "agent-test", Scheduler: h.sched, Registry: h.reg, Knowledge: h.know, DataDir: h.data, ClaimWait: time.Second}
	if mutate != nil {
		mutate(&cfg)
	}
	w, err := New(cfg)
	require.NoError(t, err)
	h.w = w
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go func() { h.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-h.done:
			_ = err // the worker's own error is checked by the tests that stop it on purpose
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop within 30s of its context ending")
		}
	})
	return h
}

// complete waits for the next CompleteTask.
func (h *harness) complete() *schedulerv1.CompleteTaskRequest {
	h.t.Helper()
	select {
	case c := <-h.sched.completed:
		return c
	case <-time.After(60 * time.Second):
		h.t.Fatal("no CompleteTask within 60s")
		return nil
	}
}

// wait waits for Run to return and answers its error.
func (h *harness) wait() error {
	h.t.Helper()
	select {
	case err := <-h.done:
		h.done <- err // for the cleanup
		return err
	case <-time.After(60 * time.Second):
		h.t.Fatal("the worker's Run did not return within 60s")
		return nil
	}
}

// resolvedOptions are options as the Scheduler resolves them (every default filled), with
// maxRetries.
func resolvedOptions(maxRetries int32) *schedulerv1.ExecutionOptions {
	return &schedulerv1.ExecutionOptions{MaxRetries: proto.Int32(maxRetries), TaskTimeout: durationpb.New(300 * time.Second),
		KnowledgeMinConfidence: proto.Float64(0.6),
		AgentConfig: &commonv1.AgentConfig{MaxRetries: proto.Int32(maxRetries), TaskTimeout: durationpb.New(300 * time.Second),
			ValidationTimeout: durationpb.New(120 * time.Second), HeartbeatInterval: durationpb.New(30 * time.Second)}}
}

// claimed is a TASK assignment of task on repo ("" = no repository), max_retries 3.
func claimed(t *testing.T, task *commonv1.Task, repo string) *schedulerv1.ClaimedAssignment {
	t.Helper()
	ca := &schedulerv1.ClaimedAssignment{
		Assignment: &schedulerv1.Assignment{Id: "as_" + sanitizeTag(task.GetId()), Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK,
			ExecutionId: "ex_1", TaskId: task.GetId(), Attempt: 1, FencingToken: 1, Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING},
		Task: task, Options: resolvedOptions(3),
		LeaseDuration: durationpb.New(30 * time.Second), HeartbeatInterval: durationpb.New(time.Second),
	}
	if repo != "" {
		ca.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}, BaseRef: "main"}
		ca.TaskRef = "refs/converge/ex_1/" + task.GetId()
	}
	return ca
}

// lines answers the lines of a file ("" when it does not exist).
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// eventually polls cond every 10 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, timeout, 10*time.Millisecond, fmt.Sprintf(msg, args...))
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// tmpFile answers a path in a fresh temporary directory.
func tmpFile(t *testing.T, name string) string { return filepath.Join(t.TempDir(), name) }
