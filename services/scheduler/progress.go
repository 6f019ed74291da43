package scheduler

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/ids"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// What a lease holder reports while it works: ReportProgress (extends the lease) and
// RecordCheckpoint.

// agentEntries turns an agent's events into log entries of assignment a.
func agentEntries(a *store.Assignment, events []*schedulerv1.AgentEvent) []*commonv1.LogEntry {
	out := make([]*commonv1.LogEntry, 0, len(events))
	for _, ev := range events {
		e := entry(ev.GetEventType(), a, ev.GetMessage(), nil)
		e.Context = ev.GetContext()
		if ev.GetTime().IsValid() {
			e.SourceTime = ev.GetTime() // when it happened, by the agent's clock; e.Time is the store's
		}
		out = append(out, e)
	}
	return out
}

// ReportProgress extends the lease, records progress, events and a checkpoint, and tells the
// agent whether to go on.
func (s *Server) ReportProgress(ctx context.Context, req *schedulerv1.ReportProgressRequest) (*schedulerv1.ReportProgressResponse, error) {
	res := &schedulerv1.ReportProgressResponse{}
	eid, err := s.executionOf(ctx, req.GetAssignmentId())
	if err != nil {
		return nil, toStatus(err)
	}
	err = s.updateGrouped(store.WithAssignmentHint(ctx, req.GetAssignmentId()), eid, func(r *runner) error {
		a, err := r.holder(ctx, req.GetAssignmentId(), req.GetInstanceId(), req.GetFencingToken())
		if err != nil {
			return err
		}
		if err := r.live(a); err != nil {
			return err
		}
		res.Directive, res.Reason = r.directive(a)
		if req.GetReportSeq() <= a.LastReportSeq {
			res.LeaseExpireTime = a.GetLeaseExpireTime()
			return nil // a retried report: acknowledged, no effect
		}
		a.LastReportSeq = req.GetReportSeq()
		async := !ended(r.e) && startedOnly(req, a, r.tx.Now(), leaseDuration(r.e.GetOptions()))
		if !ended(r.e) {
			a.LeaseExpireTime = timestamppb.New(r.tx.Now().Add(leaseDuration(r.e.GetOptions())))
		}
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING
		a.ProgressPercent, a.ProgressMessage, a.LastReportTime = req.GetProgressPercent(), req.GetMessage(), r.now()
		if cp := req.GetCheckpoint(); cp != nil {
			id, err := r.checkpoint(a, cp)
			if err != nil {
				return err
			}
			res.CheckpointId = id
		}
		if err := r.tx.PutAssignment(a); err != nil {
			return err
		}
		res.LeaseExpireTime = a.GetLeaseExpireTime()
		if async && !r.changed {
			r.tx.CommitAsync()
		}
		return r.log(agentEntries(a, req.GetEvents())...)
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return res, nil
}

// startedOnly reports whether req only says that the task started (TASK_STARTED events, no
// checkpoint) while the lease it extends (a's, before this report) still has at least half its
// length (lease) to run at now: it was granted, durably, moments before. Such a report is an
// event, not a grant: its transaction commits without waiting for durability
// (store.ExecTx.CommitAsync), so a crash of the store loses at most the "started" event, the
// RUNNING status and the extension (the lease keeps its granted deadline), and the next durable
// commit of the run (the completion's) makes it durable. A renewal near expiry, a checkpoint and
// every grant, completion and fence commit durably.
func startedOnly(req *schedulerv1.ReportProgressRequest, a *store.Assignment, now time.Time, lease time.Duration) bool {
	if req.GetCheckpoint() != nil || len(req.GetEvents()) == 0 {
		return false
	}
	for _, ev := range req.GetEvents() {
		if ev.GetEventType() != commonv1.EventType_EVENT_TYPE_TASK_STARTED {
			return false
		}
	}
	return a.GetLeaseExpireTime().AsTime().Sub(now) >= lease/2
}

// checkpoint stores an agent's checkpoint of assignment a.
func (r *runner) checkpoint(a *store.Assignment, cp *commonv1.Checkpoint) (string, error) {
	c := &commonv1.Checkpoint{Id: ids.New("ck", r.tx.Now()), ExecutionId: r.e.GetId(), TaskId: a.GetTaskId(),
		InstanceId: a.GetInstanceId(), GitRef: cp.GetGitRef(), Files: cp.GetFiles(), Metadata: cp.GetMetadata()}
	if err := r.tx.PutCheckpoint(c, a.GetId(), a.GetAttempt()); err != nil {
		return "", err
	}
	return c.Id, r.log(entry(commonv1.EventType_EVENT_TYPE_CHECKPOINT_CREATED, a,
		fmt.Sprintf("checkpoint %s at %s (%d files)", c.Id, c.GetGitRef(), len(c.GetFiles())), map[string]any{"checkpoint_id": c.Id}))
}

// RecordCheckpoint stores a checkpoint for the lease holder.
func (s *Server) RecordCheckpoint(ctx context.Context, req *schedulerv1.RecordCheckpointRequest) (*schedulerv1.RecordCheckpointResponse, error) {
	var out *commonv1.Checkpoint
	eid, err := s.executionOf(ctx, req.GetAssignmentId())
	if err != nil {
		return nil, toStatus(err)
	}
	err = s.updateGrouped(store.WithAssignmentHint(ctx, req.GetAssignmentId()), eid, func(r *runner) error {
		a, err := r.holder(ctx, req.GetAssignmentId(), req.GetInstanceId(), req.GetFencingToken())
		if err != nil {
			return err
		}
		if err := r.live(a); err != nil {
			return err
		}
		id, err := r.checkpoint(a, req.GetCheckpoint())
		if err != nil {
			return err
		}
		out = &commonv1.Checkpoint{Id: id, ExecutionId: r.e.GetId(), TaskId: a.GetTaskId(), InstanceId: a.GetInstanceId(),
			GitRef: req.GetCheckpoint().GetGitRef(), Files: req.GetCheckpoint().GetFiles(), Metadata: req.GetCheckpoint().GetMetadata(),
			CreateTime: r.now()}
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.RecordCheckpointResponse{Checkpoint: out}, nil
}
