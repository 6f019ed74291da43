package worker

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/backoff"
)

// maxLockBatch is the most resources of one AcquireLocks or ReleaseLocks call (the contract's
// bound).
const maxLockBatch = 1000

// errRegistryUnavailable marks a lock request the Registry could not answer (Unavailable,
// ResourceExhausted: restarting, unreachable, overloaded) for as long as the agent retried it
// (Config.RegistryRetry). Nothing is wrong with the task: it goes back to the queue instead of failing.
var errRegistryUnavailable = errors.New("the Registry could not answer")

// lockRetryable says whether a lock call's error is the Registry's state rather than an answer:
// such a call is retried (a grant lost with its answer is harmless: a holder that already
// holds a lock gets it extended with the same token).
func lockRetryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	}
	return false
}

// retryLock calls call until it answers, the error is not retryable, ctx ends or retryFor has
// passed since the first try; an error still retryable then wraps errRegistryUnavailable.
func retryLock[T any](ctx context.Context, retryFor time.Duration, call func() (T, error)) (T, error) {
	deadline := time.Now().Add(retryFor)
	retry := backoff.New()
	for {
		r, err := call()
		if err == nil || !lockRetryable(err) {
			return r, err
		}
		d := retry.Next()
		if time.Now().Add(d).After(deadline) {
			return r, fmt.Errorf("%w for %s: %w", errRegistryUnavailable, retryFor, err)
		}
		if backoff.Wait(ctx, d) != nil {
			return r, err
		}
	}
}

// heldLock is one fenced file lock.
type heldLock struct {
	resource string
	token    int64
}

// lockTargets takes a fenced lock on every concrete target file, scoped to the execution: all
// of them in one AcquireLocks call (all or nothing, waiting up to lockWait for all to be free
// together), or one call per 1,000 files. A Registry that does not serve AcquireLocks yet gets
// one AcquireLock per file. A call the Registry cannot answer (restarting, unreachable) is
// retried with backoff for up to Config.RegistryRetry before the task gives up (errRegistryUnavailable).
func (w *Worker) lockTargets(ctx context.Context, ca *schedulerv1.ClaimedAssignment) ([]heldLock, error) {
	if w.cfg.Registry == nil {
		return nil, nil
	}
	exec := ca.GetAssignment().GetExecutionId()
	var resources []string
	seen := map[string]bool{}
	for _, p := range concrete(targets(ca.GetTask())) {
		if res := path.Join(exec, p); !seen[res] {
			seen[res] = true
			resources = append(resources, res)
		}
	}
	ttl := lockTTL(ca)
	var locks []heldLock
	for len(resources) > 0 {
		batch := resources[:min(len(resources), maxLockBatch)]
		resources = resources[len(batch):]
		r, err := retryLock(ctx, w.cfg.RegistryRetry, func() (*registryv1.AcquireLocksResponse, error) {
			return w.cfg.Registry.AcquireLocks(ctx, &registryv1.AcquireLocksRequest{Resources: batch, Holder: w.cfg.InstanceID,
				Ttl: durationpb.New(ttl), Wait: durationpb.New(lockWait)})
		})
		if status.Code(err) == codes.Unimplemented {
			return w.lockOneByOne(ctx, exec, append(batch, resources...), ttl, locks)
		}
		if err != nil {
			return locks, fmt.Errorf("lock %d files: %w", len(batch), err)
		}
		if !r.GetGranted() {
			c := r.GetConflict()
			return locks, fmt.Errorf("lock %s is held by %s", strings.TrimPrefix(c.GetResource(), exec+"/"), c.GetHolder())
		}
		for _, l := range r.GetLocks() {
			locks = append(locks, heldLock{resource: l.GetResource(), token: l.GetToken()})
		}
	}
	return locks, nil
}

// lockOneByOne takes the locks on resources one AcquireLock at a time, after held.
func (w *Worker) lockOneByOne(ctx context.Context, exec string, resources []string, ttl time.Duration, held []heldLock) ([]heldLock, error) {
	for _, res := range resources {
		p := strings.TrimPrefix(res, exec+"/")
		r, err := retryLock(ctx, w.cfg.RegistryRetry, func() (*registryv1.AcquireLockResponse, error) {
			return w.cfg.Registry.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: res, Holder: w.cfg.InstanceID,
				Ttl: durationpb.New(ttl), Wait: durationpb.New(lockWait)})
		})
		if err != nil {
			return held, fmt.Errorf("lock %s: %w", p, err)
		}
		if !r.GetGranted() {
			return held, fmt.Errorf("lock %s is held by %s", p, r.GetLock().GetHolder())
		}
		held = append(held, heldLock{resource: res, token: r.GetLock().GetToken()})
	}
	return held, nil
}

// lockTTL is how long a file lock grant lasts: one lease (the keeper renews both together).
func lockTTL(ca *schedulerv1.ClaimedAssignment) time.Duration {
	return max(ca.GetLeaseDuration().AsDuration(), time.Second)
}

// releaseTimeout bounds the release of a task's locks, retries included: a lock the Registry
// could not be told of expires with its lease.
const releaseTimeout = 10 * time.Second

// unlock releases locks, also when ctx was cancelled: one ReleaseLocks call per 1,000 locks
// (one ReleaseLock per lock on a Registry that does not serve it). A call the Registry cannot
// answer (restarting, its Redis away) is retried with backoff for up to releaseTimeout, as the
// acquire is: a release given up at once left the lock held for a whole lease. A lock the
// Registry no longer counts as ours (expired, taken again) is left to its holder.
func (w *Worker) unlock(ctx context.Context, locks []heldLock) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	for len(locks) > 0 {
		batch := locks[:min(len(locks), maxLockBatch)]
		locks = locks[len(batch):]
		grants := make([]*registryv1.LockGrant, len(batch))
		for i, lk := range batch {
			grants[i] = &registryv1.LockGrant{Resource: lk.resource, Token: lk.token}
		}
		r, err := retryLock(rctx, releaseTimeout, func() (*registryv1.ReleaseLocksResponse, error) {
			return w.cfg.Registry.ReleaseLocks(rctx, &registryv1.ReleaseLocksRequest{Holder: w.cfg.InstanceID, Locks: grants})
		})
		switch {
		case status.Code(err) == codes.Unimplemented:
			w.unlockOneByOne(rctx, append(batch, locks...))
			return
		case err != nil:
			w.log.Warn("release locks", "locks", len(batch), "err", err)
		default:
			for _, n := range r.GetNotReleased() {
				w.log.Warn("release lock", "resource", n.GetResource(), "reason", n.GetReason().String(), "err", n.GetMessage())
			}
		}
	}
}

// unlockOneByOne releases locks one ReleaseLock at a time.
func (w *Worker) unlockOneByOne(ctx context.Context, locks []heldLock) {
	for _, lk := range locks {
		_, err := retryLock(ctx, releaseTimeout, func() (*registryv1.ReleaseLockResponse, error) {
			return w.cfg.Registry.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: lk.resource, Holder: w.cfg.InstanceID, Token: lk.token})
		})
		if err != nil {
			w.log.Warn("release lock", "resource", lk.resource, "err", err)
		}
	}
}
