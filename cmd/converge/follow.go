package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// followOptions say how to follow an execution.
type followOptions struct {
	// out receives the progress.
	out io.Writer
	// live draws the terminal's live block.
	live bool
	// agents is the number of local agents (for the header; 0 = not local).
	agents int
	// afterSeq continues after this log entry; 0 replays the log from its start.
	afterSeq int64
	// reconnectFor is how long a dropped stream is retried before giving up (default 1 min).
	reconnectFor time.Duration
}

// follow shows an execution's progress until it ends (or ctx does): the header, then the
// WatchExecution stream with snapshots, reconnecting after a dropped stream from the last entry
// seen. It answers the progress as it ended.
func follow(ctx context.Context, client schedulerv1.SchedulerServiceClient, id string, o followOptions) (*progress, error) {
	got, err := client.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
	if err != nil {
		return nil, rpcError("execution "+id, err)
	}
	ex := got.GetExecution()
	list, err := client.GetTaskList(ctx, &schedulerv1.GetTaskListRequest{TaskListId: ex.GetTaskListId(), View: schedulerv1.TaskListView_TASK_LIST_VIEW_FULL})
	if err != nil {
		return nil, rpcError("task list "+ex.GetTaskListId(), err)
	}
	lookup := func(taskID string) (*schedulerv1.Assignment, error) {
		res, err := client.ListAssignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: id, TaskId: taskID,
			Statuses: nil, PageSize: 100})
		if err != nil {
			return nil, err
		}
		var last *schedulerv1.Assignment
		for _, a := range res.GetAssignments() {
			if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
				last = a
			}
		}
		if last == nil {
			return nil, fmt.Errorf("no assignment for task %s", taskID)
		}
		return last, nil
	}
	p := newProgress(ex, got.GetWaves(), list.GetTaskList(), lookup)
	if o.afterSeq == 0 {
		// The stream replays everything from the start.
		for _, w := range p.waves {
			w.completed, w.failed, w.skipped, w.commit = 0, 0, 0, ""
			w.status = schedulerv1.WaveStatus_WAVE_STATUS_PENDING
		}
	} else if err := p.resume(ctx, client, id); err != nil {
		return nil, err
	}
	v := newView(o.out, p, o.live, 250*time.Millisecond)
	defer v.close()
	v.println(p.header(o.agents))

	after := o.afterSeq
	retryFor := o.reconnectFor
	if retryFor == 0 {
		retryFor = time.Minute
	}
	var failingSince time.Time
	for {
		err := stream(ctx, client, id, after, v)
		if p.lastSeq > after { // it got somewhere: a new drop starts a new count
			failingSince = time.Time{}
		}
		after = max(after, p.lastSeq)
		if err == nil {
			return p, nil
		}
		if !isTransient(err) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return p, ctx.Err()
			}
			return p, rpcError("watch "+id, err)
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
		} else if time.Since(failingSince) > retryFor {
			return p, rpcError(fmt.Sprintf("watch %s (reconnecting for %s)", id, retryFor), err)
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return p, ctx.Err()
		case <-t.C:
		}
	}
}

// stream reads one WatchExecution stream into v until it closes. nil means the execution ended
// and every entry was seen.
func stream(ctx context.Context, client schedulerv1.SchedulerServiceClient, id string, after int64, v *view) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := client.WatchExecution(sctx, &schedulerv1.WatchExecutionRequest{ExecutionId: id, AfterSeq: after, IncludeSnapshots: true})
	if err != nil {
		return err
	}
	for {
		msg, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if status.Code(err) == codes.Canceled && ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		v.handle(msg)
	}
}

// resume sets the state of the tasks from their assignments, for a watch that continues after a
// cursor instead of replaying the whole log: tasks already ended are counted and their replayed
// lines are not printed again.
func (p *progress) resume(ctx context.Context, client schedulerv1.SchedulerServiceClient, id string) error {
	as, err := allAssignments(ctx, client, id)
	if err != nil {
		return err
	}
	for _, a := range as {
		if a.GetKind() != schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
			continue
		}
		t := p.task(a.GetTaskId())
		t.wave = a.GetWaveNumber()
		t.attempt = a.GetAttempt()
		switch a.GetStatus() {
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED:
			t.state = taskCompleted
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED:
			t.state = taskFailed
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED:
			t.state = taskSkipped
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING:
			t.state, t.instance, t.since = taskRunning, a.GetInstanceId(), a.GetAssignTime().AsTime()
			t.activity = a.GetProgressMessage()
			continue
		default:
			continue
		}
		if !t.counted {
			t.counted = true
			p.counted++
		}
	}
	return nil
}

// allAssignments reads every assignment of an execution.
func allAssignments(ctx context.Context, client schedulerv1.SchedulerServiceClient, id string) ([]*schedulerv1.Assignment, error) {
	var (
		out   []*schedulerv1.Assignment
		token string
	)
	for {
		res, err := client.ListAssignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: id, PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, rpcError("assignments of "+id, err)
		}
		out = append(out, res.GetAssignments()...)
		if token = res.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}
