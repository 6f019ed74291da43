package scheduler

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// TestWatchExecutionBatchedStreams: streams that ask for max_entries_per_message > 1 get exactly
// the log (every entry once, in order, in entries, never in entry), at most that many per
// message, with a snapshot on each message that holds an entry changing the execution, whether
// they follow the run live (from the tail's shared encodings, compressed or not, filtered or not)
// or catch up after it from the store; the live plain streams' entries are encoded once for all.
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
		// Encoded per stream, the live streams would have made about len(live) × the log's
		// entries; shared, at most one per entry and one per snapshot the tail read.
		require.Positive(t, encodes, "the live streams sent shared encodings")
		require.LessOrEqual(t, encodes, int64(len(log.GetEntries())+snapshots))
	})
}

// The shared encodings go to a stream only when its codec is protobuf's: gRPC's content type
// without a subtype or with +proto, parameters allowed, any case.
func TestProtoCodecFromContentType(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{
		"application/grpc": true, "application/grpc+proto": true, "Application/GRPC+Proto": true,
		"application/grpc;charset=utf-8": true, "application/grpc+proto;x=y": true,
		"application/grpc+json": false, "application/grpc+protox": false, "application/json": false, "": false,
	} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("content-type", ct))
		require.Equal(t, want, protoCodec(ctx), "%q", ct)
	}
	require.False(t, protoCodec(context.Background()), "no metadata")
}
