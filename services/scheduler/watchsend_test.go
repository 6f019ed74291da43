package scheduler

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// TestWatchExecutionBatchedStreams: streams that ask for max_entries_per_message > 1 get exactly
// the log (every entry once, in order, in entries, never in entry), at most that many per
// message, with a snapshot on each message that holds an entry changing the execution, whether
// they follow the run live (from the tail's shared encodings, compressed or not, filtered or not)
// or catch up after it from the store.
func TestWatchExecutionBatchedStreams(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		s, b, e := startedDiamond(t, st, "batched")
		id := e.GetId()
		type watch struct {
			req  *schedulerv1.WatchExecutionRequest
			opts []grpc.CallOption
			keep func(*commonv1.LogEntry) bool
		}
		all := func(*commonv1.LogEntry) bool { return true }
		live := []watch{
			{req: &schedulerv1.WatchExecutionRequest{ExecutionId: id, MaxEntriesPerMessage: 64}, keep: all},
			{req: &schedulerv1.WatchExecutionRequest{ExecutionId: id, MaxEntriesPerMessage: 64}, keep: all},
			{req: &schedulerv1.WatchExecutionRequest{ExecutionId: id, MaxEntriesPerMessage: 64}, keep: all},
			{req: &schedulerv1.WatchExecutionRequest{ExecutionId: id, MaxEntriesPerMessage: 2}, keep: all},
			{req: &schedulerv1.WatchExecutionRequest{ExecutionId: id, MaxEntriesPerMessage: 64, IncludeSnapshots: true}, keep: all},
			{req: &schedulerv1.WatchExecutionRequest{ExecutionId: id, MaxEntriesPerMessage: 64, TaskId: "D"},
				keep: func(en *commonv1.LogEntry) bool { return en.GetTaskId() == "D" }},
			{req: &schedulerv1.WatchExecutionRequest{ExecutionId: id, MaxEntriesPerMessage: 64}, keep: all,
				opts: []grpc.CallOption{grpc.UseCompressor(gzip.Name)}},
		}
		got := make([][]*schedulerv1.WatchExecutionResponse, len(live))
		var wg sync.WaitGroup
		for i, w := range live {
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
			b.work(t, "agent-1", id, succeed)
		}()
		wg.Wait()
		encodes := s.tails.encodes.Load()

		// After the run: the whole log is waiting, read from the store in full messages.
		after := []watch{
			{req: &schedulerv1.WatchExecutionRequest{ExecutionId: id, MaxEntriesPerMessage: 3}, keep: all},
			{req: &schedulerv1.WatchExecutionRequest{ExecutionId: id, MaxEntriesPerMessage: 5, IncludeSnapshots: true}, keep: all},
		}
		for _, w := range after {
			stream, err := b.client.WatchExecution(t.Context(), w.req)
			require.NoError(t, err)
			got = append(got, receiveAll(t, stream, nil))
		}

		log, err := b.client.GetExecutionLog(t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: id, Limit: 500})
		require.NoError(t, err)
		var snapshots int
		for _, en := range log.GetEntries() {
			if snapshotEvents[en.GetEventType()] {
				snapshots++
			}
		}
		for i, w := range append(live, after...) {
			var want, seqs []*commonv1.LogEntry
			for _, en := range log.GetEntries() {
				if w.keep(en) {
					want = append(want, en)
				}
			}
			max := int(w.req.GetMaxEntriesPerMessage())
			for j, m := range got[i] {
				require.Nil(t, m.GetEntry(), "stream %d message %d: a batched stream sends entries", i, j)
				require.LessOrEqual(t, len(m.GetEntries()), max, "stream %d message %d", i, j)
				changes := false
				for _, en := range m.GetEntries() {
					changes = changes || snapshotEvents[en.GetEventType()]
				}
				switch {
				case !w.req.GetIncludeSnapshots():
					require.Nil(t, m.GetExecution(), "stream %d message %d", i, j)
				case j == 0:
					require.NotNil(t, m.GetExecution(), "the first message of a snapshot stream is the execution")
					require.Empty(t, m.GetEntries())
				default:
					require.Equal(t, changes, m.GetExecution() != nil, "stream %d message %d", i, j)
				}
				seqs = append(seqs, m.GetEntries()...)
			}
			require.Len(t, seqs, len(want), "stream %d", i)
			for k := range want {
				require.True(t, proto.Equal(want[k], seqs[k]), "stream %d entry %d: %v, want %v", i, k, seqs[k], want[k])
			}
			if w.req.GetIncludeSnapshots() {
				last := got[i][len(got[i])-1].GetExecution()
				require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, last.GetStatus(), "stream %d ends on the ended run", i)
			}
		}
		// The streams that caught up from the store waited for nothing: full messages.
		require.Len(t, got[len(live)][0].GetEntries(), 3)
		require.Len(t, got[len(live)+1][1].GetEntries(), 5)
		require.Positive(t, encodes, "the live streams sent shared encodings")
	})
}

// TestWatchExecutionBatchesEncodedOnce: streams that follow a run at the same position send the
// same batches, encoded once for all of them. Six streams wait at the paused run's last entry;
// the cancel's entries reach them through at most a few tail reads, so they can cut only a few
// distinct batches between them: fewer encodings than batched messages sent, where a stream that
// encoded its own would make one per message.
func TestWatchExecutionBatchesEncodedOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		s, b, e := startedDiamond(t, st, "batches-once")
		id := e.GetId()
		_, err := b.client.PauseExecution(t.Context(), &schedulerv1.PauseExecutionRequest{ExecutionId: id, Reason: "lunch"})
		require.NoError(t, err)
		paused, err := b.client.GetExecution(t.Context(), &schedulerv1.GetExecutionRequest{ExecutionId: id})
		require.NoError(t, err)
		from := paused.GetExecution().GetLastSeq()

		const streams = 6
		got := make([][]*schedulerv1.WatchExecutionResponse, streams)
		var wg sync.WaitGroup
		for i := range streams {
			stream, err := b.client.WatchExecution(t.Context(), &schedulerv1.WatchExecutionRequest{ExecutionId: id, AfterSeq: from,
				MaxEntriesPerMessage: 64, IncludeSnapshots: i%2 == 1})
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i] = receiveAll(t, stream, nil)
			}()
		}
		require.Eventually(t, func() bool {
			s.tails.mu.Lock()
			defer s.tails.mu.Unlock()
			tl := s.tails.m[id]
			if tl == nil {
				return false
			}
			tl.mu.Lock()
			defer tl.mu.Unlock()
			return tl.refs == streams
		}, 10*time.Second, 5*time.Millisecond, "every stream joined the tail")
		before := s.tails.encodes.Load()
		_, err = b.client.CancelExecution(t.Context(), &schedulerv1.CancelExecutionRequest{ExecutionId: id, Reason: "done"})
		require.NoError(t, err)
		wg.Wait()

		log, err := b.client.GetExecutionLog(t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: id, AfterSeq: from, Limit: 500})
		require.NoError(t, err)
		require.NotEmpty(t, log.GetEntries())
		var batches int64
		for i := range got {
			var seqs []int64
			for _, m := range got[i] {
				for _, en := range m.GetEntries() {
					seqs = append(seqs, en.GetSeq())
				}
				if len(m.GetEntries()) > 0 {
					batches++
				}
			}
			var want []int64
			for _, en := range log.GetEntries() {
				want = append(want, en.GetSeq())
			}
			require.Equal(t, want, seqs, "stream %d", i)
		}
		encodes := s.tails.encodes.Load() - before
		require.Positive(t, encodes)
		require.Less(t, encodes, batches, "the streams shared their batches' encodings")
	})
}

// max_entries_per_message outside 0–500 is refused with a field violation, before any stream.
func TestWatchExecutionBatchOutOfRange(t *testing.T) {
	t.Parallel()
	_, b, e := startedDiamond(t, backends["sqlite"](t), "batch-range")
	for _, n := range []int32{-1, 501} {
		stream, err := b.client.WatchExecution(t.Context(), &schedulerv1.WatchExecutionRequest{ExecutionId: e.GetId(), MaxEntriesPerMessage: n})
		require.NoError(t, err)
		_, err = stream.Recv()
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%d", n)
		v := grpcerr.Violations(err)
		require.Len(t, v, 1, "%d", n)
		require.Equal(t, "max_entries_per_message", v[0].Field)
	}
}
