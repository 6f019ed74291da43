package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

const (
	driverInterval = 500 * time.Millisecond
	leaderName     = "converge-scheduler-leader"
)

// The driver is the Scheduler's background work. It runs on every replica, but does anything only
// on the one that holds the leadership (store.TryLead: a Postgres advisory lock, released when
// the replica's session ends, so a killed leader is replaced within one driver interval):
//
//   - the reaper requeues assignments whose lease ran out (attempt + 1; FAILED after max_retries);
//   - executions stored PENDING by a replica that died before opening their first wave are begun;
//   - executions past their wall-time budget end ESCALATED;
//   - executions whose waves are all integrated are verified (Verify Done);
//   - executions waiting for a person's sign-off end as the sign-off decides (signoff.go).
//
// Every step is an UpdateExecution that re-checks the state it acts on, so a step repeated by a
// new leader, or racing a completion, changes nothing twice.

// Start runs the driver and the knowledge confirmation worker (knowledge_confirm.go, on every
// replica) until ctx ends. It returns at once; both stop with ctx.
func (s *Server) Start(ctx context.Context) {
	go s.drive(ctx)
	go s.confirmLoop(ctx)
	if l, ok := s.store.(changeListener); ok {
		go l.Listen(ctx, func(ended string) {
			if ended != "" {
				s.wake.end(ended)
			}
			s.wake.broadcast()
		})
	}
}

// changeListener is a store that announces every committed change of an execution to every
// other replica (Postgres LISTEN/NOTIFY): long polls and streams wake at once on any replica, and
// polling is only the fallback. A replica's own commits wake its waiters in afterCommit and are
// not announced back to it.
type changeListener interface {
	// Listen calls changed after each change committed by another replica, with the execution's
	// id when the change ended it.
	Listen(ctx context.Context, changed func(ended string))
}

// leadChecker is a store whose leadership lasts as long as the session that took it (Postgres:
// a session-level advisory lock). When that one session ends (Postgres restarted, the connection
// cut or terminated) the rest of the pool may go on working and another replica may take the
// lead. So the leader asks, every round, whether its session is still alive (one trivial round
// trip on that session's own connection), and steps down otherwise.
type leadChecker interface {
	LeadAlive(ctx context.Context, name string) error
}

func (s *Server) drive(ctx context.Context) {
	var release func()
	// stepDown lets the leadership go.
	stepDown := func() {
		s.leading.Store(false)
		release()
		release = nil
	}
	defer func() {
		if release != nil {
			stepDown()
		}
	}()
	checker, canCheck := s.store.(leadChecker)
	t := time.NewTicker(s.driverEvery)
	defer t.Stop()
	for {
		if release == nil {
			ok, rel, err := s.store.TryLead(ctx, leaderName)
			switch {
			case err != nil && ctx.Err() == nil:
				s.log.Warn("scheduler driver: leadership", "err", err)
			case ok:
				release = rel
				s.leading.Store(true)
				s.log.Info("scheduler driver: this replica leads (reaper, verification)")
			}
		} else if canCheck {
			if err := checker.LeadAlive(ctx, leaderName); err != nil {
				if ctx.Err() == nil {
					s.log.Warn("scheduler driver: leadership lost (the session holding it ended or did not answer); stepping down", "err", err)
				}
				stepDown()
			}
		}
		if release != nil {
			if err := s.driveOnce(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("scheduler driver", "err", err)
				// A store error may mean the session holding the leadership is gone: let it go
				// and take it again on the next round.
				stepDown()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.driverKick:
		}
	}
}

// kickDriver makes the driver run its next round now (an execution's waves are all integrated:
// Verify Done should not wait for the tick). Kicks coalesce; a round run by a replica that does
// not lead does nothing but try to take the leadership.
func (s *Server) kickDriver() {
	select {
	case s.driverKick <- struct{}{}:
	default:
	}
}

// driveOnce does one round of the leader's work.
func (s *Server) driveOnce(ctx context.Context) error {
	if err := s.reap(ctx); err != nil {
		return fmt.Errorf("reaper: %w", err)
	}
	pending, err := s.store.ExecutionsInStatus(ctx, []schedulerv1.ExecutionStatus{schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING}, 100)
	if err != nil {
		return err
	}
	for _, e := range pending {
		if s.now().Sub(e.GetCreateTime().AsTime()) > 5*time.Second {
			if err := s.begin(ctx, e.GetId()); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
	}
	open, err := s.store.ExecutionsInStatus(ctx, []schedulerv1.ExecutionStatus{
		schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED}, 1000)
	if err != nil {
		return err
	}
	for _, e := range open {
		if err := s.overtime(ctx, e); err != nil {
			return err
		}
		if v := e.GetVerification(); v != nil && v.GetVerdict() == commonv1.Verdict_VERDICT_UNSPECIFIED &&
			e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
			s.startVerify(ctx, e)
		}
	}
	if err := s.driveSignOffs(ctx); err != nil {
		return fmt.Errorf("sign-off: %w", err)
	}
	return s.driveFeatureBuilds(ctx)
}

// overtime ends an execution that ran past its wall-time budget.
func (s *Server) overtime(ctx context.Context, e *schedulerv1.Execution) error {
	limit := e.GetOptions().GetMaxWallTime().AsDuration()
	start := e.GetStartTime()
	if limit <= 0 || start == nil || s.now().Sub(start.AsTime()) < limit {
		return nil
	}
	return s.update(ctx, e.GetId(), func(r *runner) error {
		if ended(r.e) {
			return nil
		}
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_ESCALATED,
			fmt.Sprintf("budget spent: wall time %s (max_wall_time)", limit))
	})
}
