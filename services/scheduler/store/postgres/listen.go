package postgres

import (
	"context"

	"github.com/converge-dev/converge/platform/backoff"
)

// ChangesChannel is the LISTEN/NOTIFY channel on which every committed change of an execution
// is announced (the payload is its id): a Scheduler replica's long-polling ClaimTask and its
// WatchExecution streams wake when another replica completes a task, instead of waiting for
// their next poll.
const ChangesChannel = "converge_scheduler_changes"

// Listen calls changed after every change of an execution committed by any replica (this one
// included), until ctx ends. It holds one connection of the pool for as long as it listens and
// takes a new one (with backoff) when that one is lost; changed is also called then, since
// notifications may have been missed. Polling stays the callers' fallback.
func (s *Store) Listen(ctx context.Context, changed func()) {
	retry := backoff.New()
	for ctx.Err() == nil {
		if err := s.listenOnce(ctx, changed, retry); err != nil && ctx.Err() == nil {
			changed()
			if backoff.Wait(ctx, retry.Next()) != nil {
				return
			}
		}
	}
}

func (s *Store) listenOnce(ctx context.Context, changed func(), retry *backoff.Backoff) error {
	pc, err := s.Pool().Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection will have a LISTEN on it: it leaves the pool for good.
	conn := pc.Hijack()
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "LISTEN "+ChangesChannel); err != nil {
		return err
	}
	retry.Reset()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		changed()
	}
}
