package scheduler

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding/gzip"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// TestWatchExecutionStreamsShareOneTail: several streams of one execution, unfiltered, with
// snapshots and filtered, are served from one tail (one store reader) and each still gets
// exactly its entries, in order, once; the tail goes away with the run.
func TestWatchExecutionStreamsShareOneTail(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		s, b, e := startedDiamond(t, st, "shared")

		reqs := []*schedulerv1.WatchExecutionRequest{
			{ExecutionId: e.GetId()}, {ExecutionId: e.GetId()},
			{ExecutionId: e.GetId(), IncludeSnapshots: true}, {ExecutionId: e.GetId(), IncludeSnapshots: true},
			{ExecutionId: e.GetId(), TaskId: "D"},
			{ExecutionId: e.GetId(), EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_TASK_COMPLETED}},
		}
		got := make([][]*schedulerv1.WatchExecutionResponse, len(reqs))
		var wg sync.WaitGroup
		started := make(chan struct{}, len(reqs))
		for i, req := range reqs {
			stream, err := b.client.WatchExecution(t.Context(), req)
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The stream has joined the tail before it sends its first message.
				got[i] = receiveAll(t, stream, func() { started <- struct{}{} })
			}()
		}
		// The filtered streams' first message comes once their tasks' entries exist: start the
		// run, then check that every stream joined one tail.
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.work(t, "agent-1", e.GetId(), succeed)
		}()
		for range reqs {
			<-started
		}
		wg.Wait()
		s.tails.mu.Lock()
		require.Empty(t, s.tails.m, "the tail ended with the run and its streams")
		s.tails.mu.Unlock()

		all, err := b.client.GetExecutionLog(t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: e.GetId(), Limit: 500})
		require.NoError(t, err)
		want := func(keep func(*commonv1.LogEntry) bool) []int64 {
			var seqs []int64
			for _, en := range all.GetEntries() {
				if keep(en) {
					seqs = append(seqs, en.GetSeq())
				}
			}
			return seqs
		}
		seqs := func(msgs []*schedulerv1.WatchExecutionResponse) []int64 {
			var out []int64
			for _, m := range msgs {
				if m.GetEntry() != nil {
					out = append(out, m.GetEntry().GetSeq())
				}
			}
			return out
		}
		every := want(func(*commonv1.LogEntry) bool { return true })
		for i := range 4 {
			require.Equal(t, every, seqs(got[i]), "stream %d", i)
		}
		for i := 2; i < 4; i++ {
			require.NotNil(t, got[i][0].GetExecution(), "the first message of a snapshot stream is the execution")
			for _, m := range got[i][1:] {
				require.Equal(t, snapshotEvents[m.GetEntry().GetEventType()], m.GetExecution() != nil, "seq %d", m.GetEntry().GetSeq())
			}
		}
		require.Equal(t, want(func(en *commonv1.LogEntry) bool { return en.GetTaskId() == "D" }), seqs(got[4]))
		require.Equal(t, want(func(en *commonv1.LogEntry) bool {
			return en.GetEventType() == commonv1.EventType_EVENT_TYPE_TASK_COMPLETED
		}), seqs(got[5]))
	})
}

// TestWatchExecutionStreamsShareEncodedEntries: streams of one tail send each entry as one
// message marshalled once for all of them (not once per stream), a stream with snapshots gets its
// own encoding of the snapshot entries, and a stream whose client compresses gets its entries
// exactly too.
func TestWatchExecutionStreamsShareEncodedEntries(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		s, b, e := startedDiamond(t, st, "encoded")

		const plain = 6
		type watch struct {
			req  *schedulerv1.WatchExecutionRequest
			opts []grpc.CallOption
		}
		var watches []watch
		for range plain {
			watches = append(watches, watch{req: &schedulerv1.WatchExecutionRequest{ExecutionId: e.GetId()}})
		}
		watches = append(watches,
			watch{req: &schedulerv1.WatchExecutionRequest{ExecutionId: e.GetId(), IncludeSnapshots: true}},
			watch{req: &schedulerv1.WatchExecutionRequest{ExecutionId: e.GetId()}, opts: []grpc.CallOption{grpc.UseCompressor(gzip.Name)}})
		got := make([][]*schedulerv1.WatchExecutionResponse, len(watches))
		var wg sync.WaitGroup
		for i, w := range watches {
			stream, err := b.client.WatchExecution(t.Context(), w.req, w.opts...)
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i] = receiveAll(t, stream, nil)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.work(t, "agent-1", e.GetId(), succeed)
		}()
		wg.Wait()

		all, err := b.client.GetExecutionLog(t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: e.GetId(), Limit: 500})
		require.NoError(t, err)
		var every []int64
		snapshots := 0
		for _, en := range all.GetEntries() {
			every = append(every, en.GetSeq())
			if snapshotEvents[en.GetEventType()] {
				snapshots++
			}
		}
		for i := range got {
			var seqs []int64
			for _, m := range got[i] {
				if m.GetEntry() != nil {
					seqs = append(seqs, m.GetEntry().GetSeq())
					require.Equal(t, all.GetEntries()[len(seqs)-1].GetMessage(), m.GetEntry().GetMessage())
				}
				if i == plain {
					require.Equal(t, m.GetEntry() == nil || snapshotEvents[m.GetEntry().GetEventType()], m.GetExecution() != nil)
				} else {
					require.Nil(t, m.GetExecution())
				}
			}
			require.Equal(t, every, seqs, "stream %d", i)
		}
		// Marshalled per stream, the plain streams alone would have made plain × the window's
		// entries; shared, at most one per entry and one per snapshot entry.
		encodes := s.tails.encodes.Load()
		require.Positive(t, encodes, "the streams sent shared encodings")
		require.LessOrEqual(t, encodes, int64(len(every)+snapshots))
	})
}

// startedDiamond serves a started Scheduler on st (runServer) and starts a diamond list named name.
func startedDiamond(t *testing.T, st store.Store, name string) (*Server, *testBundle, *schedulerv1.Execution) {
	s, b := runServer(t, st)
	return s, b, b.start(t, b.createList(t, diamond(name)), nil)
}

// receiveAll receives a stream's messages until it ends (an error other than EOF fails the test);
// first, when not nil, is called once the first Recv returns.
func receiveAll(t *testing.T, stream grpc.ServerStreamingClient[schedulerv1.WatchExecutionResponse], first func()) []*schedulerv1.WatchExecutionResponse {
	var got []*schedulerv1.WatchExecutionResponse
	for {
		msg, err := stream.Recv()
		if first != nil {
			first()
			first = nil
		}
		if errors.Is(err, io.EOF) || !assertNoError(t, err) {
			return got
		}
		got = append(got, msg)
	}
}

// assertNoError reports err as a test failure from a goroutine.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

// wavesReads is a store that counts the reads of an execution with its waves (GetExecution).
type wavesReads struct {
	store.Store
	n atomic.Int64
}

func (s *wavesReads) GetExecution(ctx context.Context, id string) (*schedulerv1.Execution, []*schedulerv1.Wave, error) {
	s.n.Add(1)
	return s.Store.GetExecution(ctx, id)
}

// A watcher's snapshots and its tail's end-of-run check read the execution's row alone, never its
// waves: reading every wave per batch of entries made watching a run O(tasks) per change (one
// watcher on a 3,000-task fan-out made the run 5× slower).
func TestWatchingReadsTheExecutionWithoutItsWaves(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		counted := &wavesReads{Store: st}
		_, b, e := startedDiamond(t, counted, "row-only")
		stream, err := b.client.WatchExecution(t.Context(), &schedulerv1.WatchExecutionRequest{ExecutionId: e.GetId(), IncludeSnapshots: true})
		require.NoError(t, err)
		var got []*schedulerv1.WatchExecutionResponse
		done := make(chan struct{})
		go func() {
			defer close(done)
			got = receiveAll(t, stream, nil)
		}()
		b.work(t, "agent-1", e.GetId(), succeed)
		<-done
		snaps := 0
		for _, m := range got {
			if m.GetExecution() != nil {
				snaps++
			}
		}
		require.Greater(t, snaps, 3, "the stream carried snapshots")
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, got[len(got)-1].GetExecution().GetStatus(), "the last snapshot is the ended run")
		// While the run went, b.work read the execution with its waves itself (GetExecution) to see
		// it end, so the reads are counted on a watcher of the ended run: its start, its catch-up
		// from the store with a snapshot per status change, and its tail's end-of-run check.
		stream2, err := b.client.WatchExecution(t.Context(), &schedulerv1.WatchExecutionRequest{ExecutionId: e.GetId(), IncludeSnapshots: true})
		require.NoError(t, err)
		mid := counted.n.Load()
		again := receiveAll(t, stream2, nil)
		require.NotEmpty(t, again)
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, again[0].GetExecution().GetStatus())
		require.Zero(t, counted.n.Load()-mid, "a watcher read the execution's waves")
	})
}
