package main

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The light client's field numbers are the contract's.
func TestLiteMatchesTheContract(t *testing.T) {
	t.Parallel()
	field := func(m proto.Message, name protoreflect.Name) protowireNumber {
		f := m.ProtoReflect().Descriptor().Fields().ByName(name)
		require.NotNil(t, f, "%s has no field %s", m.ProtoReflect().Descriptor().FullName(), name)
		return protowireNumber(f.Number())
	}
	require.Equal(t, field(&schedulerv1.WatchExecutionResponse{}, "entry"), protowireNumber(fieldResponseEntry))
	require.Equal(t, field(&schedulerv1.WatchExecutionResponse{}, "entries"), protowireNumber(fieldResponseEntries))
	require.Equal(t, field(&commonv1.LogEntry{}, "seq"), protowireNumber(fieldEntrySeq))
	require.Equal(t, field(&commonv1.LogEntry{}, "time"), protowireNumber(fieldEntryTime))
	require.Equal(t, field(&timestamppb.Timestamp{}, "seconds"), protowireNumber(fieldTimeSeconds))
	require.Equal(t, field(&timestamppb.Timestamp{}, "nanos"), protowireNumber(fieldTimeNanos))
}

type protowireNumber int32

// sampleEntry is a log entry with every field a run's entries carry.
func sampleEntry(t testing.TB, seq int64, at time.Time) *commonv1.LogEntry {
	ctx, err := structpb.NewStruct(map[string]any{"eager": true, "knowledge_item_ids": []any{"k1", "k2"}, "percent": 40})
	require.NoError(t, err)
	return &commonv1.LogEntry{Seq: seq, ExecutionId: "ex_01M8W5QMEDQZYNZ376CEKZ5YN0", TaskId: "t0016", InstanceId: "agent-04",
		WaveNumber: 3, Time: timestamppb.New(at), EventType: commonv1.EventType_EVENT_TYPE_TASK_COMPLETED,
		Message: "Task t0016: true completed", Context: ctx, SourceTime: timestamppb.New(at.Add(-time.Millisecond))}
}

// The light codec reads the seq and time of each entry of a message, single (entry) or batched
// (entries), as the generated types do; an execution snapshot gives no entry; a message cut
// short is an error, not a wrong entry.
func TestLiteCodecReadsSeqAndTime(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 20, 4, 34, 653_000_123, time.UTC)
	before := time.Date(1969, 7, 20, 20, 17, 40, 5, time.UTC) // negative seconds
	for _, tc := range []struct {
		name string
		msg  *schedulerv1.WatchExecutionResponse
		want []liteEntry
	}{
		{"entry", &schedulerv1.WatchExecutionResponse{Entry: sampleEntry(t, 7, at)}, []liteEntry{{7, at}}},
		{"entries", &schedulerv1.WatchExecutionResponse{Entries: []*commonv1.LogEntry{sampleEntry(t, 1, before), sampleEntry(t, 1<<40, at)}},
			[]liteEntry{{1, before}, {1 << 40, at}}},
		{"execution snapshot", &schedulerv1.WatchExecutionResponse{Execution: &schedulerv1.Execution{Id: "ex_1", TaskListId: "tl_1"}}, nil},
		{"keep-alive", &schedulerv1.WatchExecutionResponse{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := proto.Marshal(tc.msg)
			require.NoError(t, err)
			var m liteMessage
			require.NoError(t, liteCodec{}.Unmarshal(b, &m))
			require.Len(t, m.entries, len(tc.want))
			for i, w := range tc.want {
				require.Equal(t, w.seq, m.entries[i].seq)
				require.True(t, w.at.Equal(m.entries[i].at), "entry %d: time %s, want %s", i, m.entries[i].at, w.at)
			}
			if len(b) > 0 {
				require.Error(t, liteCodec{}.Unmarshal(b[:len(b)-1], &m), "a message cut short")
			}
		})
	}
	require.Error(t, liteCodec{}.Unmarshal(nil, &schedulerv1.WatchExecutionResponse{}), "only into a liteMessage")
}

// FuzzLiteCodec: whatever the bytes, the light codec answers without a panic; bytes protobuf
// reads it reads too (it reads less of them); and on protobuf's own encoding of what it read, the
// light codec answers the same entries' seqs and times, in the wire's order (entry, then entries).
func FuzzLiteCodec(f *testing.F) {
	at := time.Date(2026, 12, 2, 20, 4, 34, 653_000_123, time.UTC)
	for _, m := range []*schedulerv1.WatchExecutionResponse{
		{Entry: sampleEntry(f, 7, at)},
		{Entries: []*commonv1.LogEntry{sampleEntry(f, 1, at), sampleEntry(f, 2, at)}},
		{Execution: &schedulerv1.Execution{Id: "ex_1"}},
	} {
		b, err := proto.Marshal(m)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m liteMessage
		err := liteCodec{}.Unmarshal(b, &m)
		var full schedulerv1.WatchExecutionResponse
		if proto.Unmarshal(b, &full) != nil {
			return
		}
		if err != nil {
			t.Fatalf("protobuf reads the message, the light codec refuses it: %v", err)
		}
		canonical, err := proto.MarshalOptions{Deterministic: true}.Marshal(&full)
		if err != nil {
			t.Fatal(err)
		}
		if err := (liteCodec{}).Unmarshal(canonical, &m); err != nil {
			t.Fatalf("protobuf's own encoding: %v", err)
		}
		var want []*commonv1.LogEntry
		if full.GetEntry() != nil {
			want = append(want, full.GetEntry())
		}
		want = append(want, full.GetEntries()...)
		if len(m.entries) != len(want) {
			t.Fatalf("%d entries, protobuf reads %d", len(m.entries), len(want))
		}
		for i, en := range m.entries {
			w := want[i]
			if w.GetSeq() != en.seq {
				t.Fatalf("entry %d: seq %d, protobuf reads %d", i, en.seq, w.GetSeq())
			}
			var wt time.Time // no time: the zero time
			if w.GetTime() != nil {
				wt = time.Unix(w.GetTime().GetSeconds(), int64(w.GetTime().GetNanos()))
			}
			if !wt.Equal(en.at) {
				t.Fatalf("entry %d: time %s, protobuf reads %s", i, en.at, wt)
			}
		}
	})
}

// A light stream against a real gRPC server receives every entry, as the generated client does.
func TestLiteWatchAgainstAServer(t *testing.T) {
	t.Parallel()
	f := &floorServer{}
	at := time.Now().UTC()
	for i := range 50 {
		f.msgs = append(f.msgs, &schedulerv1.WatchExecutionResponse{Entries: []*commonv1.LogEntry{sampleEntry(t, int64(2*i+1), at), sampleEntry(t, int64(2*i+2), at)}})
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	schedulerv1.RegisterSchedulerServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	for _, decode := range []string{decodeSeq, decodeFull} {
		recv, err := openWatch(context.Background(), cc, &schedulerv1.WatchExecutionRequest{ExecutionId: "x", MaxEntriesPerMessage: 2}, decode)
		require.NoError(t, err)
		var seqs []int64
		for {
			entries, err := recv()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, decode)
			for _, en := range entries {
				seqs = append(seqs, en.seq)
				require.True(t, at.Equal(en.at), decode)
			}
		}
		require.Len(t, seqs, 100, decode)
		for i, s := range seqs {
			require.Equal(t, int64(i+1), s, decode)
		}
	}
}
