package scheduler

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// A WatchExecution stream sends its entries one per message (entry), or, when the request set
// max_entries_per_message > 1, runs of what is waiting (entries) (issue 17, R8): a gRPC message
// costs ≈ 5 µs of CPU on its own (framing, the transport's writer, interceptors and stats
// handlers, the client's reading), so 1,000 streams of a busy run pay that per entry per stream
// unless the entries travel together.
//
// Batches are cut the same way for every stream (from its cursor to what the tail holds, at most
// max per message), so streams that follow a run together send the same batches: an unfiltered,
// uncompressed stream sends a batch its tail encoded once for every stream at that position
// (execTail.batch), like one-entry messages share their entry's encoding.

// batchKey names a batch of a tail's window: its first and last seq, and whether it carries a
// snapshot (the one after its last entry that changes the execution).
type batchKey struct {
	from, to int64
	snap     bool
}

// encodedBatch is a batch's response as the wire carries it, encoded by the first stream that
// sends it.
type encodedBatch struct {
	once sync.Once
	msg  *grpc.PreparedMsg
}

// maxTailBatches bounds a tail's encoded batches (each up to 500 entries' bytes); past it the
// tail starts a new set (the streams that follow together re-encode theirs once). Streams that
// follow a run stand at a few positions at a time, so few batches are live at once.
const maxTailBatches = 256

// batch answers the response of batch k (built by msg), encoded once for every stream of t that
// sends it, or nil when it could not be encoded; encodes counts the messages encoded.
func (t *execTail) batch(k batchKey, stream grpc.ServerStream, msg func() *schedulerv1.WatchExecutionResponse, encodes *atomic.Int64) *grpc.PreparedMsg {
	t.mu.Lock()
	if t.batches == nil || len(t.batches) >= maxTailBatches {
		t.batches = map[batchKey]*encodedBatch{}
	}
	b := t.batches[k]
	if b == nil {
		b = &encodedBatch{}
		t.batches[k] = b
	}
	t.mu.Unlock()
	b.once.Do(func() {
		p := &grpc.PreparedMsg{}
		if err := p.Encode(stream, msg()); err == nil {
			b.msg = p
			encodes.Add(1)
		}
	})
	return b.msg
}

// dropBatches forgets the encoded batches that start at or before seq (out of the window).
// Called with t.mu held.
func (t *execTail) dropBatches(seq int64) {
	for k := range t.batches {
		if k.from <= seq {
			delete(t.batches, k)
		}
	}
}

// watchSender sends one stream's entries and keeps its cursor.
type watchSender struct {
	stream    grpc.ServerStreamingServer[schedulerv1.WatchExecutionResponse]
	tail      *execTail
	snapshots bool // include_snapshots
	max       int  // entries per message; <= 1: one per message, in entry
	shared    bool // uncompressed: may send the tail's encoded messages
	filtered  bool // task_id or event_types: its batches are its own
	encodes   *atomic.Int64

	cursor   int64
	lastSent time.Time

	// The batch being built: its entries, the latest snapshot it carries, and whether its
	// entries came from the tail's window (it may then be shared). The caller flushes between
	// entries of the window and entries read from the store, so a batch holds one kind.
	entries []*commonv1.LogEntry
	snap    *schedulerv1.Execution
	window  bool
}

// fromWindow sends x (an entry of the tail's window), at once or in the batch being built.
func (w *watchSender) fromWindow(x tailed) error {
	en := x.entry
	if w.max > 1 {
		w.window = true
		return w.add(en, x.snap)
	}
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
	return w.one(en, x.snap)
}

// fromStore sends en (read from the store by this stream, behind the tail's window), with snap
// when it changes the execution.
func (w *watchSender) fromStore(en *commonv1.LogEntry, snap *schedulerv1.Execution) error {
	if w.max <= 1 {
		return w.one(en, snap)
	}
	w.window = false
	return w.add(en, snap)
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

// add puts en into the batch, sending the batch when full.
func (w *watchSender) add(en *commonv1.LogEntry, snap *schedulerv1.Execution) error {
	w.entries = append(w.entries, en)
	if w.snapshots && snapshotEvents[en.GetEventType()] && snap != nil {
		w.snap = snap
	}
	w.cursor = en.GetSeq()
	if len(w.entries) >= w.max {
		return w.flush()
	}
	return nil
}

// flush sends the batch being built, if any.
func (w *watchSender) flush() error {
	if len(w.entries) == 0 {
		return nil
	}
	build := func() *schedulerv1.WatchExecutionResponse {
		return &schedulerv1.WatchExecutionResponse{Entries: w.entries, Execution: w.snap}
	}
	var pm *grpc.PreparedMsg
	if w.shared && !w.filtered && w.window {
		k := batchKey{from: w.entries[0].GetSeq(), to: w.entries[len(w.entries)-1].GetSeq(), snap: w.snap != nil}
		pm = w.tail.batch(k, w.stream, build, w.encodes)
	}
	var err error
	if pm != nil {
		err = w.stream.SendMsg(pm)
	} else {
		err = w.stream.Send(build())
	}
	if err != nil {
		return err
	}
	// The cursor moved with each entry added (add), and may since have passed entries this
	// stream filters out: only the time of the send is recorded.
	w.lastSent = time.Now()
	clear(w.entries)
	w.entries, w.snap = w.entries[:0], nil
	return nil
}

// sent records that the stream sent everything up to en.
func (w *watchSender) sent(en *commonv1.LogEntry) {
	w.cursor = en.GetSeq()
	w.lastSent = time.Now()
}
