package scheduler

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// A WatchExecution stream sends its entries one per message (entry), or, when the request set
// max_entries_per_message > 1, runs of what is waiting (entries) (issue 17, R8): a gRPC message
// costs ≈ 5 µs of CPU on its own (framing, the transport's writer, interceptors and stats
// handlers, the client's reading), so 1,000 streams of a busy run pay that per entry per stream
// unless the entries travel together.
//
// A batched message is built from bytes encoded once per entry for every stream of the tail:
// each window entry keeps its `entries` field (tag 3 + the LogEntry) and each snapshot its
// `execution` field (tag 2) as the wire carries them, and a stream's message is their
// concatenation, handed to the codec as the message's unknown fields (proto.Marshal writes
// those verbatim; the client decodes them as the fields they are). Only a stream whose codec is
// protobuf's takes that path (the content type says so); any other builds the message itself.

// Field numbers of WatchExecutionResponse, as the wire carries them.
const (
	watchFieldExecution = 2
	watchFieldEntries   = 3
)

// wire holds a message's bytes as one field of a WatchExecutionResponse, encoded once.
type wire struct {
	once sync.Once
	b    []byte
}

// field answers m encoded as field num (tag, length, bytes), marshalling it on the first call.
func (w *wire) field(num protowire.Number, m proto.Message, encodes *atomic.Int64) []byte {
	w.once.Do(func() {
		b, err := proto.Marshal(m)
		if err != nil {
			return // the stream builds the message itself
		}
		w.b = protowire.AppendBytes(protowire.AppendTag(make([]byte, 0, len(b)+8), num, protowire.BytesType), b)
		encodes.Add(1)
	})
	return w.b
}

// snapshot is an execution as a tail read it, shared by the window entries it follows.
type snapshot struct {
	exec *schedulerv1.Execution
	wire wire
}

// get answers the execution, or nil for no snapshot.
func (s *snapshot) get() *schedulerv1.Execution {
	if s == nil {
		return nil
	}
	return s.exec
}

// protoCodec says whether the stream's messages go through gRPC's protobuf codec (the content
// type is application/grpc or application/grpc+proto), so that a message's unknown fields reach
// the client as bytes.
func protoCodec(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	ct := md.Get("content-type")
	if len(ct) != 1 {
		return false
	}
	sub, ok := strings.CutPrefix(strings.ToLower(ct[0]), "application/grpc")
	return ok && (sub == "" || sub == "+proto" || strings.HasPrefix(sub, ";") || strings.HasPrefix(sub, "+proto;"))
}

// watchSender sends one stream's entries and keeps its cursor.
type watchSender struct {
	stream    grpc.ServerStreamingServer[schedulerv1.WatchExecutionResponse]
	snapshots bool // include_snapshots
	max       int  // entries per message; <= 1: one per message, in entry
	shared    bool // uncompressed: may send the tail's prepared messages
	raw       bool // protobuf codec: may send the tail's encoded fields
	encodes   *atomic.Int64

	cursor   int64
	lastSent time.Time

	// The batch being built: its entries, each one's encoded field (nil for an entry this stream
	// read from the store), and the latest snapshot it carries.
	entries []*commonv1.LogEntry
	fields  [][]byte
	snap    *snapshot
	buf     []byte
}

// window sends x (an entry of the tail's window), at once or in the batch being built.
func (w *watchSender) window(x tailed) error {
	en := x.entry
	if w.max <= 1 {
		if w.shared {
			// The entry as every stream of the tail sends it, marshalled once.
			if pm := x.prepared(w.stream, w.snapshots && snapshotEvents[en.GetEventType()], w.encodes); pm != nil {
				if err := w.stream.SendMsg(pm); err != nil {
					return err
				}
				w.sent(en)
				return nil
			}
		}
		return w.one(en, x.snap.get())
	}
	var f []byte
	if w.raw {
		f = x.enc.entry.field(watchFieldEntries, en, w.encodes)
	}
	return w.add(en, f, x.snap)
}

// read sends en (read from the store by this stream, behind the tail's window), with snap when
// it changes the execution.
func (w *watchSender) read(en *commonv1.LogEntry, snap *schedulerv1.Execution) error {
	if w.max <= 1 {
		return w.one(en, snap)
	}
	var s *snapshot
	if snap != nil {
		s = &snapshot{exec: snap}
	}
	return w.add(en, nil, s)
}

// one sends en alone (one entry per message).
func (w *watchSender) one(en *commonv1.LogEntry, snap *schedulerv1.Execution) error {
	msg := &schedulerv1.WatchExecutionResponse{Entry: en}
	if w.snapshots && snapshotEvents[en.GetEventType()] {
		msg.Execution = snap
	}
	if err := w.stream.Send(msg); err != nil {
		return err
	}
	w.sent(en)
	return nil
}

// add puts en (f: its encoded field, or nil) into the batch, sending the batch when full.
func (w *watchSender) add(en *commonv1.LogEntry, f []byte, snap *snapshot) error {
	w.entries = append(w.entries, en)
	w.fields = append(w.fields, f)
	if w.snapshots && snapshotEvents[en.GetEventType()] && snap.get() != nil {
		w.snap = snap
	}
	w.cursor = en.GetSeq()
	if len(w.entries) >= w.max {
		return w.flush()
	}
	return nil
}

// flush sends the batch being built, if any: the entries' encoded fields when every one has
// them, else a message built from the entries.
func (w *watchSender) flush() error {
	if len(w.entries) == 0 {
		return nil
	}
	msg := &schedulerv1.WatchExecutionResponse{}
	raw := !slices.ContainsFunc(w.fields, func(f []byte) bool { return f == nil })
	if raw {
		w.buf = w.buf[:0]
		for _, f := range w.fields {
			w.buf = append(w.buf, f...)
		}
	} else {
		msg.Entries = w.entries
	}
	if w.snap != nil {
		var f []byte
		if raw {
			f = w.snap.wire.field(watchFieldExecution, w.snap.exec, w.encodes)
		}
		if f == nil {
			msg.Execution = w.snap.exec
		}
		w.buf = append(w.buf, f...)
	}
	if raw {
		msg.ProtoReflect().SetUnknown(protoreflect.RawFields(w.buf))
	}
	if err := w.stream.Send(msg); err != nil {
		return err
	}
	w.sent(w.entries[len(w.entries)-1])
	clear(w.entries)
	clear(w.fields)
	w.entries, w.fields, w.snap = w.entries[:0], w.fields[:0], nil
	return nil
}

// sent records that the stream sent everything up to en.
func (w *watchSender) sent(en *commonv1.LogEntry) {
	w.cursor = en.GetSeq()
	w.lastSent = time.Now()
}
