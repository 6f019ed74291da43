// Package hot is the Registry's hot state: file locks with fencing tokens, and the liveness of
// agents (a TTL key per agent and a staleness index). It changes on every lock operation and
// heartbeat, so it lives in Redis in production (package redishot) and in process in
// `converge dev` (package inproc); both pass the conformance suite in ./hottest.
//
// # Fencing tokens
//
// A token is epoch<<32 | counter. The counter is one per backend (not per resource), incremented
// on every new grant, so tokens strictly increase for every resource because they strictly
// increase overall; a backend keeps no state per resource that was ever locked. The epoch comes
// from the durable store ([Epochs]) and is taken anew whenever the backend's state may have been
// lost: Redis flushed, restarted (also from an old snapshot), or failed over to a replica; the
// `converge dev` process restarted; or the counter reached 2^32-1. Every epoch is greater than
// every earlier one, so every token after such an event is greater than every token before it.
//
// # Time
//
// Lock times are the backend's clock: Redis' TIME in Redis, the process clock in process, in
// milliseconds. Heartbeat times are given by the caller, who takes them from the durable
// store's clock, so that the staleness index and the durable last heartbeats agree.
package hot

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Lock is a held lock.
type Lock struct {
	// Resource is the normalised resource name.
	Resource string
	// Holder holds the lock.
	Holder string
	// Token is the grant's fencing token; 0 when withheld (a lock answered to someone else who
	// asked for it).
	Token int64
	// AcquiredAt is when the lock was granted, or last re-granted to the same holder; zero
	// when withheld with the token.
	AcquiredAt time.Time
	// ExpiresAt is when the lock is free unless renewed.
	ExpiresAt time.Time
}

// Grant names one grant of a lock, for ReleaseAll.
type Grant struct {
	Resource string
	Token    int64
}

// MaxBatch is the most resources one AcquireAll or ReleaseAll takes (the RPCs' bound).
const MaxBatch = 1000

// ListQuery filters and pages Locks.List.
type ListQuery struct {
	// Prefix keeps only resources starting with it; "" keeps all.
	Prefix string
	// Holder keeps only this holder's locks; "" keeps all.
	Holder string
	// After keeps only resources sorting after it (byte order), to continue a listing.
	After string
	// Limit is the most locks answered.
	Limit int
}

// Locks are file locks with a TTL and fencing tokens. Resource names are normalised by the
// caller (package paths).
type Locks interface {
	// Acquire grants resource to holder for ttl, or answers the current holder's lock (its
	// token withheld) with granted false. A holder that already holds the lock gets it extended
	// to now + ttl with the same token. With wait > 0 Acquire blocks up to wait for the lock to
	// become free (released or expired) without polling the backend; ctx ending ends the wait
	// with ctx's error.
	Acquire(ctx context.Context, resource, holder string, ttl, wait time.Duration) (lock Lock, granted bool, err error)
	// Renew extends the lock to now + ttl, for the holder with the current token. Otherwise: a
	// *NotHeldError (free: never taken, released or expired), a *StaleTokenError (the token is
	// older than the current grant's: the lock was lost and granted again), a *WrongTokenError
	// (the token was never granted for the resource) or a *HeldByOtherError (the token is
	// current but the holder is not).
	Renew(ctx context.Context, resource, holder string, token int64, ttl time.Duration) (Lock, error)
	// Release frees the lock, for the holder with the current token; otherwise the errors of
	// Renew. Waiters are woken.
	Release(ctx context.Context, resource, holder string, token int64) error
	// Get answers the lock on resource, with its token, or a *FreeError.
	Get(ctx context.Context, resource string) (Lock, error)
	// AcquireAll grants every resource to holder for ttl, all or nothing, atomically: either
	// every lock is granted (answered in the order of resources) or none is, and conflict is a
	// lock held by another holder (its token withheld) that stood in the way. Each lock is
	// granted as Acquire grants it: a lock the holder already holds is extended with its token,
	// the others get new tokens (consecutive, in the order of resources). With wait > 0 it
	// blocks up to wait for all of them to be free together, holding none meanwhile. resources
	// are distinct.
	AcquireAll(ctx context.Context, resources []string, holder string, ttl, wait time.Duration) (locks []Lock, conflict Lock, granted bool, err error)
	// ReleaseAll releases, atomically, every grant of holder that is current (Release's rule),
	// and leaves the others. refused holds one error per grant, in order: nil when released,
	// else Release's error. err is an error of the backend, in which case nothing was released.
	ReleaseAll(ctx context.Context, holder string, grants []Grant) (refused []error, err error)
	// List answers held locks in resource order, at most q.Limit, and where to continue (the
	// After of the next call) or "" at the end. A page may hold fewer than q.Limit locks
	// before the end when a filter skips many: continue until next is "".
	List(ctx context.Context, q ListQuery) (locks []Lock, next string, err error)
}

// Seen is when an agent was last heard of.
type Seen struct {
	InstanceID string
	At         time.Time
}

// Liveness keeps a TTL key per agent and an index of agents by their last heartbeat, for the
// staleness scan.
type Liveness interface {
	// Beat records a heartbeat of instanceID at (the durable store's time): its TTL key lives
	// for ttl, and its index entry moves to at unless it already is later.
	Beat(ctx context.Context, instanceID string, at time.Time, ttl time.Duration) error
	// Forget removes a finished agent's key and index entry.
	Forget(ctx context.Context, instanceID string) error
	// Alive reports whether instanceID's TTL key is live: it beat within its TTL.
	Alive(ctx context.Context, instanceID string) (bool, error)
	// Stale answers index entries last seen before before, oldest first, skipping offset and
	// answering at most limit. ErrIndexLost says the index may miss agents (the backend's state
	// was lost or never built): rebuild it with Reindex and MarkIndexed, then ask again.
	Stale(ctx context.Context, before time.Time, offset, limit int) ([]Seen, error)
	// Reindex adds entries to the index; an entry already later is kept.
	Reindex(ctx context.Context, seen []Seen) error
	// MarkIndexed records that the index holds every live agent, after a rebuild.
	MarkIndexed(ctx context.Context) error
}

// Backend is the hot state of the Registry.
type Backend interface {
	Locks
	Liveness
	// Ping reports whether the backend can serve requests.
	Ping(ctx context.Context) error
	// Close releases the backend. It may be called more than once.
	Close() error
}

// Epochs hands out fencing epochs, durably: the Registry's durable store.
type Epochs interface {
	// NextLockEpoch increments and answers the epoch of the lock backend called name.
	NextLockEpoch(ctx context.Context, name string) (int64, error)
}

// MaxCounter is the largest counter of an epoch; the grant after it takes a new epoch.
const MaxCounter = 1<<32 - 1

// MaxEpoch is the largest epoch a token can carry.
const MaxEpoch = 1<<31 - 1

// Token answers the fencing token of a grant.
func Token(epoch, counter int64) int64 { return epoch<<32 | counter }

// SplitToken answers the epoch and counter of a token.
func SplitToken(token int64) (epoch, counter int64) { return token >> 32, token & MaxCounter }

// ErrIndexLost: the staleness index may miss agents; see Liveness.Stale.
var ErrIndexLost = errors.New("the liveness index was lost and must be rebuilt")

// FreeError: nobody holds the lock (Get).
type FreeError struct {
	Resource string
}

func (e *FreeError) Error() string { return fmt.Sprintf("lock on %q is free", e.Resource) }

// NotHeldError: the lock to renew or release is not held: it was never taken, was released or
// expired.
type NotHeldError struct {
	Resource string
}

func (e *NotHeldError) Error() string {
	return fmt.Sprintf("lock on %q is not held (released or expired): acquire it again", e.Resource)
}

// StaleTokenError: the token is older than the current grant's: the caller lost the lock and
// it was granted again. Writes under the old token must stop.
type StaleTokenError struct {
	Resource string
	Token    int64
	// Holder holds the current grant.
	Holder string
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fencing token %d of lock on %q is stale: the lock was lost and granted again (now held by %q)", e.Token, e.Resource, e.Holder)
}

// WrongTokenError: the token was never granted for the resource (it is newer than the current
// grant's).
type WrongTokenError struct {
	Resource string
	Token    int64
}

func (e *WrongTokenError) Error() string {
	return fmt.Sprintf("fencing token %d was not granted for the lock on %q", e.Token, e.Resource)
}

// HeldByOtherError: the lock is held by another holder than the caller.
type HeldByOtherError struct {
	Resource string
	Holder   string
}

func (e *HeldByOtherError) Error() string {
	return fmt.Sprintf("lock on %q is held by %q", e.Resource, e.Holder)
}

// CheckGrant answers the error of Renew or Release for a caller presenting holder and token to
// a lock whose current grant is current: nil when both are the current ones. Backends that can
// run Go at the point of the check use it; the Redis scripts implement the same rule.
func CheckGrant(resource, holder string, token int64, current Lock) error {
	switch {
	case token < current.Token:
		return &StaleTokenError{Resource: resource, Token: token, Holder: current.Holder}
	case token > current.Token:
		return &WrongTokenError{Resource: resource, Token: token}
	case holder != current.Holder:
		return &HeldByOtherError{Resource: resource, Holder: current.Holder}
	}
	return nil
}

// ReleaseHolder releases every lock holder holds in l and answers them: the locks of an agent
// whose process restarted. Each release is the holder's own (with the current token), so waiters
// are woken and the next grant of each resource has a greater token than the released one. A
// lock that changes hands meanwhile (expired and granted again) is left alone. On an error the
// locks released so far are answered with it; calling again releases the rest.
func ReleaseHolder(ctx context.Context, l Locks, holder string) ([]Lock, error) {
	const page = 256
	var (
		released []Lock
		after    string
	)
	for {
		locks, next, err := l.List(ctx, ListQuery{Holder: holder, After: after, Limit: page})
		if err != nil {
			return released, err
		}
		for _, lock := range locks {
			err := l.Release(ctx, lock.Resource, holder, lock.Token)
			var (
				notHeld *NotHeldError
				stale   *StaleTokenError
				wrong   *WrongTokenError
				other   *HeldByOtherError
			)
			switch {
			case err == nil:
				released = append(released, lock)
			case errors.As(err, &notHeld), errors.As(err, &stale), errors.As(err, &wrong), errors.As(err, &other):
				// Expired or granted again since the listing: no longer the holder's.
			default:
				return released, err
			}
		}
		if next == "" {
			return released, nil
		}
		after = next
	}
}
