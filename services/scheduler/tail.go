package scheduler

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// One tail per watched execution (issue 17, R8): a single goroutine reads the execution's log
// from the store as it grows (woken like the streams were: by this replica's signal, another
// replica's notification, or the poll interval) and keeps its recent entries in memory; every
// WatchExecution stream of that execution sends from that window, filtering for itself. N
// streams cost one store read per change instead of N. A stream whose cursor is behind the
// window (a resume from far back, a new stream on a long log) catches up from the store first,
// as before, then joins the window.

// tailWindow is how many recent entries a tail keeps for its streams.
const tailWindow = 2048

// tailed is an entry of a tail's window and, for an entry that changes the execution, the
// execution as the tail read it right after (shared by every stream that wants snapshots), and
// the entry's WatchExecutionResponse encoded once for every stream that sends it.
type tailed struct {
	entry *commonv1.LogEntry
	snap  *schedulerv1.Execution
	enc   *encoded
}

// encoded holds an entry's response messages as the wire carries them (issue 17, R8): the first
// stream that sends the entry marshals it, the others send the same bytes. [0] is the entry
// alone, [1] the entry with its snapshot. A message that could not be prepared stays nil and each
// stream marshals its own.
type encoded struct {
	once [2]sync.Once
	msg  [2]*grpc.PreparedMsg
}

// prepared answers x's response (with the snapshot when snap), encoded by stream's codec once for
// every stream of the tail, or nil when it could not be; encodes counts the messages prepared.
// Only a stream that sends without compression may call it (sharedEncoding), so that the bytes
// suit every stream that shares them.
func (x tailed) prepared(stream grpc.ServerStream, snap bool, encodes *atomic.Int64) *grpc.PreparedMsg {
	i := 0
	if snap {
		i = 1
	}
	x.enc.once[i].Do(func() {
		msg := &schedulerv1.WatchExecutionResponse{Entry: x.entry}
		if snap {
			msg.Execution = x.snap
		}
		p := &grpc.PreparedMsg{}
		if err := p.Encode(stream, msg); err == nil {
			x.enc.msg[i] = p
			encodes.Add(1)
		}
	})
	return x.enc.msg[i]
}

// sharedEncoding says whether a stream sends its messages uncompressed (it may then send the
// tail's shared encodings): a client that sent its request compressed gets compressed responses.
func sharedEncoding(ctx context.Context) bool {
	sc, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ SendCompress() string })
	return ok && (sc.SendCompress() == "" || sc.SendCompress() == "identity")
}

// execTail is the shared tail of one execution.
type execTail struct {
	id     string
	cancel context.CancelFunc

	mu      sync.Mutex
	refs    int
	base    int64                      // the seq before window[0]: the window holds (base, last]
	last    int64                      // the last seq the tail read
	window  []tailed                   // dense by seq
	ended   bool                       // the execution ended and every entry up to its last seq is in last
	batches map[batchKey]*encodedBatch // batches of the window encoded for every stream (watchsend.go)
	err     error                      // the tail stopped on this store error
	changed chan struct{}
}

// tails are the shared tails of this Server, by execution id.
type tails struct {
	mu sync.Mutex
	m  map[string]*execTail
	// encodes counts the responses marshalled once for every stream (one per entry and kind,
	// whatever the number of streams).
	encodes atomic.Int64
}

// tail answers the shared tail of execution e (starting one after e's last seq when no stream of
// e is served), and a release the stream calls when it ends.
func (s *Server) tail(e *schedulerv1.Execution) (*execTail, func()) {
	s.tails.mu.Lock()
	defer s.tails.mu.Unlock()
	if s.tails.m == nil {
		s.tails.m = map[string]*execTail{}
	}
	t := s.tails.m[e.GetId()]
	if t == nil {
		ctx, cancel := context.WithCancel(context.Background())
		t = &execTail{id: e.GetId(), cancel: cancel, base: e.GetLastSeq(), last: e.GetLastSeq(), changed: make(chan struct{})}
		s.tails.m[e.GetId()] = t
		go s.runTail(ctx, t)
	}
	t.mu.Lock()
	t.refs++
	t.mu.Unlock()
	return t, func() {
		s.tails.mu.Lock()
		defer s.tails.mu.Unlock()
		t.mu.Lock()
		defer t.mu.Unlock()
		t.refs--
		if t.refs == 0 {
			t.cancel()
			if s.tails.m[t.id] == t {
				delete(s.tails.m, t.id)
			}
		}
	}
}

// runTail reads t's execution's log until the execution has ended and been read to its end, a
// store error, or no stream wants it any more.
func (s *Server) runTail(ctx context.Context, t *execTail) {
	stop := func(err error, ended bool) {
		s.tails.mu.Lock()
		if s.tails.m[t.id] == t {
			delete(s.tails.m, t.id) // a new stream starts a new tail
		}
		s.tails.mu.Unlock()
		t.mu.Lock()
		t.err, t.ended = err, ended
		close(t.changed)
		t.changed = make(chan struct{})
		t.mu.Unlock()
	}
	for {
		woken := s.wake.wait()
		t.mu.Lock()
		cursor := t.last
		t.mu.Unlock()
		entries, more, _, err := s.store.ReadLog(ctx, store.LogQuery{ExecutionID: t.id, AfterSeq: cursor, Limit: watchBatch})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			stop(err, false)
			return
		}
		if len(entries) > 0 {
			var snap *schedulerv1.Execution
			if slices.ContainsFunc(entries, func(en *commonv1.LogEntry) bool { return snapshotEvents[en.GetEventType()] }) {
				if snap, err = s.store.Execution(ctx, t.id); err != nil {
					snap = nil
				}
			}
			t.mu.Lock()
			for _, en := range entries {
				x := tailed{entry: en, enc: &encoded{}}
				if snapshotEvents[en.GetEventType()] {
					x.snap = snap
				}
				t.window = append(t.window, x)
			}
			t.last = entries[len(entries)-1].GetSeq()
			if drop := len(t.window) - tailWindow; drop > 0 {
				t.base = t.window[drop-1].entry.GetSeq()
				t.window = slices.Clone(t.window[drop:])
				t.dropBatches(t.base)
			}
			close(t.changed)
			t.changed = make(chan struct{})
			t.mu.Unlock()
			if more {
				continue
			}
		} else {
			cur, err := s.store.Execution(ctx, t.id)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				stop(err, false)
				return
			}
			if ended(cur) && cur.GetLastSeq() <= cursor {
				stop(nil, true)
				return
			}
		}
		timer := time.NewTimer(watchPollInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-woken:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// tailState is what a stream sees of its tail at one moment.
type tailState struct {
	base, last int64
	window     []tailed // entries after the stream's cursor
	ended      bool
	err        error
	changed    <-chan struct{}
}

// after answers t's state for a stream at cursor: the window's entries after it, when the cursor
// is in the window (cursor >= base).
func (t *execTail) after(cursor int64) tailState {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := tailState{base: t.base, last: t.last, ended: t.ended, err: t.err, changed: t.changed}
	if cursor >= t.base && cursor < t.last {
		i, _ := slices.BinarySearchFunc(t.window, cursor+1, func(x tailed, seq int64) int { return cmp.Compare(x.entry.GetSeq(), seq) })
		st.window = t.window[i:len(t.window):len(t.window)]
	}
	return st
}
