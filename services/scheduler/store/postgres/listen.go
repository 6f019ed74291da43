package postgres

import (
	"context"
	"strings"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/backoff"
)

// ChangesChannel is the LISTEN/NOTIFY channel on which every committed change of an execution
// is announced (the payload is its id, followed by " ended" when the execution has ended): a
// Scheduler replica's long-polling ClaimTask and its WatchExecution streams wake when another
// replica completes a task, instead of waiting for their next poll, and a ClaimTask filtered on
// an execution another replica ended answers at once.
const ChangesChannel = "converge_scheduler_changes"

// endedSuffix ends the payload of a change after which the execution has ended.
const endedSuffix = " ended"

// changePayload is the notification of a committed change of e.
func changePayload(e *schedulerv1.Execution) string {
	switch e.GetStatus() {
	case schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
		schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		return e.GetId() + endedSuffix
	}
	return e.GetId()
}

// Listen calls changed after every change of an execution committed by another replica (or any
// other store on the database), until ctx ends, with the execution's id when the change ended it
// ("" otherwise). The notifications of this store's own commits are skipped: the Scheduler wakes
// its waiters itself once it has committed (runner.go's afterCommit), and waking them a second
// time would send every long-polling claim into another transaction that finds nothing.
// It holds one connection of the pool for as long as it listens and takes a new one (with
// backoff) when that one is lost; changed("") is also called then, since notifications may have
// been missed. Polling stays the callers' fallback.
func (s *Store) Listen(ctx context.Context, changed func(ended string)) {
	retry := backoff.New()
	for ctx.Err() == nil {
		if err := s.listenOnce(ctx, changed, retry); err != nil && ctx.Err() == nil {
			changed("")
			if backoff.Wait(ctx, retry.Next()) != nil {
				return
			}
		}
	}
}

func (s *Store) listenOnce(ctx context.Context, changed func(ended string), retry *backoff.Backoff) error {
	pc, err := s.Pool().Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection will have a LISTEN on it: it leaves the pool for good.
	conn := pc.Hijack()
	s.sessions.Forget(conn.PgConn().PID())
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "LISTEN "+ChangesChannel); err != nil {
		return err
	}
	retry.Reset()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if s.sessions.Has(n.PID) {
			continue // sent by one of this store's connections: already acted on
		}
		id, ended := strings.CutSuffix(n.Payload, endedSuffix)
		if !ended {
			id = ""
		}
		changed(id)
	}
}
