package scheduler

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// DefaultMaxWatchers is how many WatchExecution streams one Scheduler serves at once (every
// principal together; the server's per-principal stream quota comes first).
const DefaultMaxWatchers = 1024

// CursorOutOfRange is the ErrorInfo reason of a WatchExecution cursor outside the retained log;
// its metadata carries "oldest_cursor" (the smallest after_seq that resumes without a gap) and
// "last_seq".
const CursorOutOfRange = "CURSOR_OUT_OF_RANGE"

// WithMaxWatchers bounds the WatchExecution streams served at once (default DefaultMaxWatchers;
// 0 or less: no limit). One more is answered ResourceExhausted.
func WithMaxWatchers(n int) Option { return func(s *Server) { s.watchers.max = n } }

// watchers counts the WatchExecution streams in flight.
type watchers struct {
	mu     sync.Mutex
	max    int
	active int
}

// enter takes a watcher slot, or answers ResourceExhausted; leave gives it back.
func (w *watchers) enter() (leave func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.max > 0 && w.active >= w.max {
		return nil, status.Errorf(codes.ResourceExhausted,
			"this Scheduler already serves %d WatchExecution streams (its watcher limit, --max-watchers): retry later or poll GetExecutionLog", w.max)
	}
	w.active++
	return func() {
		w.mu.Lock()
		w.active--
		w.mu.Unlock()
	}, nil
}

// checkCursor answers OutOfRange when after_seq is beyond the execution's last seq, or older than
// the oldest entry the log retains (entries before it were removed, so resuming there would skip
// them silently): the ErrorInfo says from which cursor to resume.
func (s *Server) checkCursor(ctx context.Context, e *schedulerv1.Execution, afterSeq int64) error {
	last := e.GetLastSeq()
	if afterSeq > last {
		return cursorError(fmt.Sprintf("after_seq %d is beyond the last seq %d of execution %s: resume with an after_seq of at most %d",
			afterSeq, last, e.GetId(), last), afterSeq, last, last)
	}
	if afterSeq == last {
		return nil
	}
	first, _, _, err := s.store.ReadLog(ctx, store.LogQuery{ExecutionID: e.GetId(), Limit: 1})
	if err != nil {
		return toStatus(err)
	}
	oldest := last // nothing retained: only what comes next
	if len(first) > 0 {
		oldest = first[0].GetSeq() - 1
	}
	if afterSeq < oldest {
		return cursorError(fmt.Sprintf("after_seq %d is older than the log execution %s retains (entries up to seq %d are gone): resume with after_seq %d, the oldest cursor",
			afterSeq, e.GetId(), oldest, oldest), afterSeq, oldest, last)
	}
	return nil
}

func cursorError(msg string, afterSeq, oldest, last int64) error {
	st := status.New(codes.OutOfRange, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: CursorOutOfRange, Domain: "converge.scheduler.v1",
		Metadata: map[string]string{"after_seq": strconv.FormatInt(afterSeq, 10), "oldest_cursor": strconv.FormatInt(oldest, 10),
			"last_seq": strconv.FormatInt(last, 10)}}); err == nil {
		st = d
	}
	return st.Err()
}

// envInt reads an integer variable; unset or not a number gives def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(envOr(name, "")); err == nil {
		return v
	}
	return def
}
