package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

const (
	handoffTailEntries     = 100
	defaultHandoffEntries  = 500
	defaultLogLimit        = 100
	watchPollInterval      = 100 * time.Millisecond
	watchKeepAliveInterval = 30 * time.Second // as WatchExecution's contract says
	watchBatch             = 500
)

// The execution log is the record of everything that happened in a run. Its seq is dense per
// execution and assigned in commit order (store.ExecTx.Append), so a stream that sends entries by
// seq from a cursor never skips one that commits later, and a client that reconnects with the last
// seq it processed continues without a gap or a duplicate.

// snapshotEvents change an execution's status, counts or current wave.
var snapshotEvents = map[commonv1.EventType]bool{
	commonv1.EventType_EVENT_TYPE_TASK_COMPLETED: true, commonv1.EventType_EVENT_TYPE_TASK_FAILED: true,
	commonv1.EventType_EVENT_TYPE_TASK_SKIPPED: true, commonv1.EventType_EVENT_TYPE_LEASE_GRANTED: true,
	commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED: true, commonv1.EventType_EVENT_TYPE_TASK_REQUEUED: true,
	commonv1.EventType_EVENT_TYPE_EXECUTION_STARTED: true, commonv1.EventType_EVENT_TYPE_EXECUTION_PAUSED: true,
	commonv1.EventType_EVENT_TYPE_EXECUTION_RESUMED: true, commonv1.EventType_EVENT_TYPE_EXECUTION_CANCELLED: true,
	commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED: true, commonv1.EventType_EVENT_TYPE_WAVE_STARTED: true,
	commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED: true, commonv1.EventType_EVENT_TYPE_VERDICT: true,
}

// WatchExecution streams the execution's log from a cursor until the execution has ended and
// every entry was sent, or the client goes away.
func (s *Server) WatchExecution(req *schedulerv1.WatchExecutionRequest, stream grpc.ServerStreamingServer[schedulerv1.WatchExecutionResponse]) error {
	ctx := stream.Context()
	leave, err := s.watchers.enter()
	if err != nil {
		return err
	}
	defer leave()
	e, err := s.store.Execution(ctx, req.GetExecutionId())
	if err != nil {
		return toStatus(err)
	}
	if err := s.checkCursor(ctx, e, req.GetAfterSeq()); err != nil {
		return err
	}
	if req.GetIncludeSnapshots() {
		if err := stream.Send(&schedulerv1.WatchExecutionResponse{Execution: e}); err != nil {
			return err
		}
	}
	t, release := s.tail(e)
	defer release()
	taskID, types := req.GetTaskId(), req.GetEventTypes()
	w := &watchSender{stream: stream, tail: t, snapshots: req.GetIncludeSnapshots(), max: int(req.GetMaxEntriesPerMessage()),
		shared: sharedEncoding(ctx), filtered: taskID != "" || len(types) > 0, encodes: &s.tails.encodes,
		cursor: req.GetAfterSeq(), lastSent: time.Now()}
	var keepAlive *time.Timer
	for {
		st := t.after(w.cursor)
		if w.cursor < st.base {
			// Behind the tail's window: catch up from the store.
			entries, more, last, err := s.store.ReadLog(ctx, store.LogQuery{ExecutionID: req.GetExecutionId(), AfterSeq: w.cursor,
				TaskID: req.GetTaskId(), EventTypes: req.GetEventTypes(), Limit: watchBatch})
			if err != nil {
				return toStatus(err)
			}
			for _, en := range entries {
				var snap *schedulerv1.Execution
				if req.GetIncludeSnapshots() && snapshotEvents[en.GetEventType()] {
					snap, _ = s.store.Execution(ctx, req.GetExecutionId())
				}
				if err := w.fromStore(en, snap); err != nil {
					return err
				}
			}
			if err := w.flush(); err != nil {
				return err
			}
			// A filtered stream moves its cursor past the entries it did not want (ReadLog
			// reads last before the entries, so every entry up to last was seen).
			if !more && last > w.cursor {
				w.cursor = last
			}
			continue
		}
		for _, x := range st.window {
			en := x.entry
			if (taskID != "" && en.GetTaskId() != taskID) || (len(types) > 0 && !slices.Contains(types, en.GetEventType())) {
				w.cursor = en.GetSeq()
				continue
			}
			if err := w.fromWindow(x); err != nil {
				return err
			}
		}
		// Whatever was waiting goes out now, never held back to fill a message.
		if err := w.flush(); err != nil {
			return err
		}
		if len(st.window) > 0 {
			continue // the tail may have read more meanwhile
		}
		if st.err != nil {
			return toStatus(st.err)
		}
		if st.ended && w.cursor >= st.last {
			return nil
		}
		if time.Since(w.lastSent) >= watchKeepAliveInterval {
			if err := stream.Send(&schedulerv1.WatchExecutionResponse{}); err != nil {
				return err
			}
			w.lastSent = time.Now()
		}
		// One timer per stream, reset at each wait (a stream waits once per batch of the tail).
		if keepAlive == nil {
			keepAlive = time.NewTimer(watchKeepAliveInterval - time.Since(w.lastSent))
			defer keepAlive.Stop()
		} else {
			keepAlive.Reset(watchKeepAliveInterval - time.Since(w.lastSent))
		}
		select {
		case <-ctx.Done():
			return toStatus(ctx.Err())
		case <-st.changed:
		case <-keepAlive.C:
		}
	}
}

// GetExecutionLog returns a page of the execution's log.
func (s *Server) GetExecutionLog(ctx context.Context, req *schedulerv1.GetExecutionLogRequest) (*schedulerv1.GetExecutionLogResponse, error) {
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = defaultLogLimit
	}
	entries, more, last, err := s.store.ReadLog(ctx, store.LogQuery{ExecutionID: req.GetExecutionId(), AfterSeq: req.GetAfterSeq(),
		TaskID: req.GetTaskId(), InstanceID: req.GetInstanceId(), EventTypes: req.GetEventTypes(), Limit: limit, Tail: req.GetTail()})
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.GetExecutionLogResponse{Entries: entries, HasMore: more, LastSeq: last}, nil
}

// GetHandoffContext gathers what a person needs to take over a stuck task or agent (the seed's
// handoff context): error history, the last entries of the log and a formatted tail.
func (s *Server) GetHandoffContext(ctx context.Context, req *schedulerv1.GetHandoffContextRequest) (*schedulerv1.GetHandoffContextResponse, error) {
	e, err := s.store.Execution(ctx, req.GetExecutionId())
	if err != nil {
		return nil, toStatus(err)
	}
	tl, idx, err := s.taskList(ctx, e.GetTaskListId())
	if err != nil {
		return nil, toStatus(err)
	}
	max := int(req.GetMaxEntries())
	if max == 0 {
		max = defaultHandoffEntries
	}
	taskID, instance := req.GetTaskId(), req.GetInstanceId()
	if taskID == "" && instance == "" {
		taskID, instance = e.GetEscalatedTaskId(), e.GetEscalatedInstanceId()
	}
	if taskID != "" {
		if _, ok := idx[taskID]; !ok {
			return nil, toStatus(fmt.Errorf("task %s in task list %s: %w", taskID, tl.ID, store.ErrNotFound))
		}
	}
	entries, _, _, err := s.store.ReadLog(ctx, store.LogQuery{ExecutionID: e.GetId(), TaskID: taskID, InstanceID: instance, Limit: max, Tail: true})
	if err != nil {
		return nil, toStatus(err)
	}
	hc := &schedulerv1.HandoffContext{ExecutionId: e.GetId(), InstanceId: instance, RecentEntries: entries}
	if taskID != "" {
		hc.Task = tl.Spec.GetTasks()[idx[taskID]]
		as, _, err := s.store.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: e.GetId(), TaskID: taskID, PageSize: 1})
		if err != nil {
			return nil, toStatus(err)
		}
		if len(as) > 0 {
			hc.LastAssignment = as[0].Assignment
		}
	}
	title := func(id string) string {
		if i, ok := idx[id]; ok {
			return tl.Spec.GetTasks()[i].GetTitle()
		}
		return ""
	}
	for _, en := range entries {
		switch en.GetEventType() {
		case commonv1.EventType_EVENT_TYPE_TASK_FAILED, commonv1.EventType_EVENT_TYPE_ERROR, commonv1.EventType_EVENT_TYPE_INTEGRATION_FAILED:
			hc.ErrorHistory = append(hc.ErrorHistory, &schedulerv1.ErrorRecord{Time: en.GetTime(), Message: en.GetMessage(),
				TaskId: en.GetTaskId(), InstanceId: en.GetInstanceId(), EventType: en.GetEventType(), Seq: en.GetSeq()})
			if en.GetEventType() == commonv1.EventType_EVENT_TYPE_TASK_FAILED {
				hc.ConsecutiveFailures++
			}
		case commonv1.EventType_EVENT_TYPE_TASK_COMPLETED:
			hc.ConsecutiveFailures = 0
		case commonv1.EventType_EVENT_TYPE_AGENT_ESCALATED:
			hc.EscalateTime, hc.Reason = en.GetTime(), en.GetMessage()
		}
	}
	if hc.Reason == "" && e.GetOutcome() == commonv1.Outcome_OUTCOME_ESCALATED {
		hc.Reason, hc.EscalateTime = e.GetStatusMessage(), e.GetEndTime()
	}
	tail := entries
	if len(tail) > handoffTailEntries {
		tail = tail[len(tail)-handoffTailEntries:]
	}
	var b strings.Builder
	for _, en := range tail {
		fmt.Fprintf(&b, "[%s] %s: %s - %s\n", en.GetTime().AsTime().UTC().Format(time.RFC3339), strings.ToLower(strings.TrimPrefix(en.GetEventType().String(), "EVENT_TYPE_")),
			title(en.GetTaskId()), en.GetMessage())
	}
	hc.LogTail = b.String()
	return &schedulerv1.GetHandoffContextResponse{Context: hc}, nil
}
