package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"google.golang.org/grpc/status"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// sseEntry is what the page gets for one log entry.
type sseEntry struct {
	Seq     int64  `json:"seq"`
	Time    string `json:"time"`
	Type    string `json:"type"`
	Task    string `json:"task,omitempty"`
	Agent   string `json:"agent,omitempty"`
	Wave    int32  `json:"wave,omitempty"`
	Message string `json:"message"`
}

// sseSnapshot is what the page gets for an execution snapshot.
type sseSnapshot struct {
	Status    string `json:"status"`
	Outcome   string `json:"outcome,omitempty"`
	Completed int32  `json:"completed"`
	Total     int32  `json:"total"`
	Wave      int32  `json:"wave"`
	Waves     int32  `json:"waves"`
}

// runEvents is GET /runs/{id}/events: WatchExecution as Server-Sent Events. Each log entry is an
// "entry" event whose SSE id is its seq, so a browser that reconnects sends Last-Event-ID and the
// stream resumes right after the last entry it saw (no gap, no duplicate); ?after= does the same
// for the first connection. Snapshots are "snapshot" events; "end" says the execution ended and
// the page should stop listening.
func (d *Dashboard) runEvents(w http.ResponseWriter, r *http.Request) {
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get("after")
	}
	var afterSeq int64
	if after != "" {
		n, err := strconv.ParseInt(after, 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "after: want a log seq (0 or more)", http.StatusBadRequest)
			return
		}
		afterSeq = n
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	stream, err := d.sched.WatchExecution(d.readCtx(r), &schedulerv1.WatchExecutionRequest{
		ExecutionId: r.PathValue("id"), AfterSeq: afterSeq, IncludeSnapshots: true, MaxEntriesPerMessage: eventsBatch})
	if err != nil {
		http.Error(w, status.Convert(err).Message(), httpStatus(status.Code(err)))
		return
	}
	// The first message tells whether the stream opened (a gRPC stream reports its status there).
	first, err := stream.Recv()
	if err != nil && !errors.Is(err, io.EOF) {
		http.Error(w, status.Convert(err).Message(), httpStatus(status.Code(err)))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	msg, recvErr := first, err
	for {
		if recvErr != nil {
			if errors.Is(recvErr, io.EOF) {
				fmt.Fprint(w, "event: end\ndata: {}\n\n")
			}
			flusher.Flush()
			return
		}
		if err := writeEvent(w, msg); err != nil {
			return
		}
		flusher.Flush()
		msg, recvErr = stream.Recv()
	}
}

// eventsBatch is how many log entries a page's stream takes per gRPC message (a burst, or a
// reconnect far behind, arrives in a few messages); each is still its own SSE event.
const eventsBatch = 100

// writeEvent writes m as SSE events: its entries, then its snapshot (taken after them).
func writeEvent(w io.Writer, m *schedulerv1.WatchExecutionResponse) error {
	if len(m.GetEntries()) == 0 && m.GetEntry() == nil && m.GetExecution() == nil {
		_, err := fmt.Fprint(w, ": keep-alive\n\n")
		return err
	}
	entries := m.GetEntries()
	if e := m.GetEntry(); e != nil {
		entries = []*commonv1.LogEntry{e}
	}
	for _, e := range entries {
		b, _ := json.Marshal(sseEntry{Seq: e.GetSeq(), Time: when(e.GetTime()), Type: enumName(e.GetEventType()),
			Task: e.GetTaskId(), Agent: e.GetInstanceId(), Wave: e.GetWaveNumber(), Message: e.GetMessage()})
		if _, err := fmt.Fprintf(w, "id: %d\nevent: entry\ndata: %s\n\n", e.GetSeq(), b); err != nil {
			return err
		}
	}
	if ex := m.GetExecution(); ex != nil {
		b, _ := json.Marshal(sseSnapshot{Status: enumName(ex.GetStatus()), Outcome: enumName(ex.GetOutcome()),
			Completed: ex.GetCompletedTasks(), Total: ex.GetTotalTasks(), Wave: ex.GetCurrentWave(), Waves: ex.GetWaveCount()})
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b); err != nil {
			return err
		}
	}
	return nil
}
