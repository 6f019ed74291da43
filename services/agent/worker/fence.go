package worker

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
)

// Fencing of a task's writes. A task holds its assignment's lease (Scheduler) and a fenced lock
// per target file (Registry). Both last one lease and are renewed together by the lease keeper.
// Right before the task's shared writes (commit and push of the task ref) the worker checks both
// once more (fence): a worker that was stopped or cut off past its lease finds its lease or
// its lock token refused and writes nothing.

// setLocks records the locks the work holds and how long each grant lasts.
func (l *lease) setLocks(locks []heldLock, ttl time.Duration) {
	l.mu.Lock()
	l.locks, l.lockTTL = locks, ttl
	l.mu.Unlock()
}

// takeLocks answers the locks the work holds and forgets them, once the work is over (its
// release, or a replaced session's, whose locks the Registry released). It waits for any
// renewal round in flight (renewMu), so it answers the tokens that round stored, and a keeper or
// fence round that comes after finds no lock: without that, a round that ran while the release
// was on its way (a Registry waiting for its restarted Redis answers slowly) found the released
// lock free, took it again with a new token and left it held for a whole lease after the work.
func (l *lease) takeLocks() []heldLock {
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	locks := l.locks
	l.locks = nil
	return locks
}

// renewLocks extends every lock with its token. A lock that lapsed (expired, or lost with the
// Registry's hot state) and that nobody took since is taken again, with a new token; a lock
// granted to someone else since (the token is stale) or held by another is lost: the answer is
// then an error and the work must stop without writing. An unreachable Registry is no answer:
// the locks may still be ours, the next round tries again.
func (l *lease) renewLocks(ctx context.Context) error {
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	l.mu.Lock()
	if l.lockLost != nil {
		l.mu.Unlock()
		return l.lockLost
	}
	locks, ttl := append([]heldLock(nil), l.locks...), l.lockTTL
	l.mu.Unlock()
	if len(locks) == 0 || l.w.cfg.Registry == nil {
		return nil
	}
	reg, holder := l.w.cfg.Registry, l.w.cfg.InstanceID
	for i, lk := range locks {
		_, err := reg.RenewLock(ctx, &registryv1.RenewLockRequest{Resource: lk.resource, Holder: holder, Token: lk.token, Ttl: durationpb.New(ttl)})
		var lost error
		switch status.Code(err) {
		case codes.OK:
			continue
		case codes.Aborted:
			lost = fmt.Errorf("file lock %s lost: %v", lk.resource, err)
		case codes.FailedPrecondition:
			// Lapsed, or held by another: take it again if it is free.
			res, aerr := reg.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: lk.resource, Holder: holder, Ttl: durationpb.New(ttl)})
			switch {
			case aerr == nil && res.GetGranted():
				l.w.log.Warn("file lock lapsed and was taken again", "resource", lk.resource, "old_token", lk.token, "token", res.GetLock().GetToken())
				locks[i].token = res.GetLock().GetToken()
				continue
			case aerr == nil:
				lost = fmt.Errorf("file lock %s lost: now held by %s", lk.resource, res.GetLock().GetHolder())
			default:
				continue // the Registry cannot say now
			}
		default:
			continue // unreachable or busy: the next round tries again
		}
		l.mu.Lock()
		l.lockLost = lost
		l.mu.Unlock()
		l.w.log.Warn("file lock lost: the work stops without writing", "resource", lk.resource, "err", lost)
		return lost
	}
	l.mu.Lock()
	l.locks = locks
	l.mu.Unlock()
	return nil
}

// fence checks, right before the work's shared writes, that the lease is still this worker's
// (a progress report the Scheduler accepts) and that every file lock's token is still current.
// It answers false when the work must not write.
func (l *lease) fence(ctx context.Context) bool {
	if l.local != nil {
		return true
	}
	if !l.report(ctx) {
		return false
	}
	l.mu.Lock()
	lost := l.lost != nil || l.cancel != ""
	l.mu.Unlock()
	if lost {
		return false
	}
	if err := l.renewLocks(ctx); err != nil {
		l.mu.Lock()
		if l.cancel == "" {
			l.cancel = err.Error()
		}
		l.mu.Unlock()
		return false
	}
	return true
}
