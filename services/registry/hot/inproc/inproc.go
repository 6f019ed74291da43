// Package inproc is the in-process hot-state backend of the Registry, for `converge dev` and
// anyone running a single Registry process: the semantics of the Redis backend (package
// redishot) with maps, a mutex and channels. Its state lives as long as the process; the next
// process takes a new fencing epoch from the durable store, so tokens keep increasing across
// restarts, and rebuilds the liveness index from it.
package inproc

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/converge-dev/converge/services/registry/hot"
	"github.com/converge-dev/converge/services/registry/store"
)

// Backend is the in-process hot state. Create it with New.
type Backend struct {
	epochs hot.Epochs
	name   string

	// epochMu serialises taking a new epoch from the durable store, outside mu.
	epochMu sync.Mutex

	mu      sync.Mutex
	closed  bool
	epoch   int64 // 0 until the first grant takes one
	counter int64
	locks   map[string]*entry
	// sweepAt is the size of locks at which expired entries are swept next.
	sweepAt int
	beats   map[string]beat
	indexed bool
}

var _ hot.Backend = (*Backend)(nil)

// entry is a lock, held until expires.
type entry struct {
	holder   string
	token    int64
	acquired time.Time
	expires  time.Time // with the monotonic reading: expiry ignores wall-clock jumps
	// freed is closed when the lock is released: waiters select on it.
	freed chan struct{}
}

// beat is an agent's TTL key (alive until) and index entry (at).
type beat struct {
	at         time.Time
	aliveUntil time.Time
}

// New answers an empty in-process backend whose fencing epochs come from epochs under name
// (e.g. "inproc").
func New(epochs hot.Epochs, name string) *Backend {
	return &Backend{
		epochs:  epochs,
		name:    name,
		locks:   map[string]*entry{},
		sweepAt: 1024,
		beats:   map[string]beat{},
	}
}

// now answers the clock: the process clock with its monotonic reading.
func now() time.Time { return time.Now() }

// wall answers t as reported: UTC, in milliseconds like Redis.
func wall(t time.Time) time.Time { return t.Round(0).UTC().Truncate(time.Millisecond) }

// errClosed is answered after Close.
var errClosed = &store.UnavailableError{Err: errors.New("in-process hot state is closed")}

func (e *entry) lock(resource string) hot.Lock {
	return hot.Lock{Resource: resource, Holder: e.holder, Token: e.token, AcquiredAt: wall(e.acquired), ExpiresAt: wall(e.expires)}
}

// held answers the live entry of resource, dropping an expired one. Called with mu held.
func (b *Backend) held(resource string, t time.Time) *entry {
	e, ok := b.locks[resource]
	if !ok {
		return nil
	}
	if !t.Before(e.expires) {
		delete(b.locks, resource)
		return nil
	}
	return e
}

// attempt is the outcome of one try at a lock.
type attempt struct {
	// lock is the grant of one lock, or the conflicting lock when not granted.
	lock hot.Lock
	// locks are the grants of tryAll.
	locks   []hot.Lock
	granted bool
	// freed and untilExpiry say when to try again, when not granted.
	freed       <-chan struct{}
	untilExpiry time.Duration
	// needEpoch says that a new epoch must be taken first.
	needEpoch bool
}

// try tries once to take resource.
func (b *Backend) try(resource, holder string, ttl time.Duration) (attempt, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return attempt{}, errClosed
	}
	t := now()
	if e := b.held(resource, t); e != nil {
		if e.holder != holder {
			// Others learn the holder and the expiry; the token (and grant time) are withheld.
			out := hot.Lock{Resource: resource, Holder: e.holder, ExpiresAt: wall(e.expires)}
			return attempt{lock: out, freed: e.freed, untilExpiry: e.expires.Sub(t)}, nil
		}
		if epoch, _ := hot.SplitToken(e.token); epoch == b.epoch {
			// The same holder: re-granted with the same token.
			e.acquired, e.expires = t, t.Add(ttl)
			return attempt{lock: e.lock(resource), granted: true}, nil
		}
		// Granted under an older epoch: a new token below.
	}
	if b.epoch == 0 || b.counter >= hot.MaxCounter {
		return attempt{needEpoch: true}, nil
	}
	b.counter++
	e := &entry{holder: holder, token: hot.Token(b.epoch, b.counter), acquired: t, expires: t.Add(ttl), freed: make(chan struct{})}
	if old, ok := b.locks[resource]; ok {
		close(old.freed) // re-granted under a new epoch
	}
	b.locks[resource] = e
	b.maybeSweep(t)
	return attempt{lock: e.lock(resource), granted: true}, nil
}

// maybeSweep drops expired locks when the map has doubled since the last sweep, so that locks
// left to expire do not accumulate: amortised O(1) per grant. Called with mu held.
func (b *Backend) maybeSweep(t time.Time) {
	if len(b.locks) < b.sweepAt {
		return
	}
	for r, e := range b.locks {
		if !t.Before(e.expires) {
			delete(b.locks, r)
		}
	}
	b.sweepAt = max(1024, 2*len(b.locks))
}

// maxEpochTakes bounds the epochs one Acquire takes.
const maxEpochTakes = 4

// takeEpoch takes a new epoch from the durable store, unless another caller just did.
func (b *Backend) takeEpoch(ctx context.Context, seen int64) error {
	b.epochMu.Lock()
	defer b.epochMu.Unlock()
	b.mu.Lock()
	current, counter := b.epoch, b.counter
	b.mu.Unlock()
	if current != seen && current != 0 && counter < hot.MaxCounter {
		return nil // taken meanwhile
	}
	e, err := b.epochs.NextLockEpoch(ctx, b.name)
	if err != nil {
		return err
	}
	if e > hot.MaxEpoch {
		return errors.New("inproc: fencing epochs exhausted")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if e > b.epoch {
		b.epoch, b.counter = e, 0
	}
	return nil
}

// Acquire implements hot.Locks.
func (b *Backend) Acquire(ctx context.Context, resource, holder string, ttl, wait time.Duration) (hot.Lock, bool, error) {
	a, err := b.acquire(ctx, wait, func() (attempt, error) { return b.try(resource, holder, ttl) })
	return a.lock, a.granted, err
}

// AcquireAll implements hot.Locks.
func (b *Backend) AcquireAll(ctx context.Context, resources []string, holder string, ttl, wait time.Duration) ([]hot.Lock, hot.Lock, bool, error) {
	a, err := b.acquire(ctx, wait, func() (attempt, error) { return b.tryAll(resources, holder, ttl) })
	if err != nil || !a.granted {
		return nil, a.lock, false, err
	}
	return a.locks, hot.Lock{}, true, nil
}

// acquire runs try until it grants, taking new epochs when it asks for them, and waits between
// tries up to wait for the conflicting lock to be released or to expire.
func (b *Backend) acquire(ctx context.Context, wait time.Duration, try func() (attempt, error)) (attempt, error) {
	deadline := now().Add(wait)
	epochs := 0
	for {
		b.mu.Lock()
		seen := b.epoch
		b.mu.Unlock()
		a, err := try()
		if err != nil {
			return attempt{}, err
		}
		if a.needEpoch {
			// Bounded: more means the durable store does not hand out greater epochs.
			if epochs++; epochs > maxEpochTakes {
				return attempt{}, errors.New("inproc: no new fencing epoch could be taken")
			}
			if err := b.takeEpoch(ctx, seen); err != nil {
				return attempt{}, err
			}
			continue
		}
		if a.granted {
			return a, nil
		}
		left := deadline.Sub(now())
		if left <= 0 {
			return a, nil
		}
		// Wait for a release, the holder's expiry or the end of the wait, whichever is first.
		timer := time.NewTimer(min(left, a.untilExpiry))
		select {
		case <-a.freed:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return attempt{}, ctx.Err()
		}
		timer.Stop()
	}
}

// tryAll tries once to take every resource, all or nothing.
func (b *Backend) tryAll(resources []string, holder string, ttl time.Duration) (attempt, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return attempt{}, errClosed
	}
	t := now()
	fresh := int64(0) // grants that need a new token
	for _, r := range resources {
		if e := b.held(r, t); e != nil {
			if e.holder != holder {
				out := hot.Lock{Resource: r, Holder: e.holder, ExpiresAt: wall(e.expires)}
				return attempt{lock: out, freed: e.freed, untilExpiry: e.expires.Sub(t)}, nil
			}
			if epoch, _ := hot.SplitToken(e.token); epoch == b.epoch {
				continue
			}
		}
		fresh++
	}
	if fresh > 0 && (b.epoch == 0 || b.counter+fresh > hot.MaxCounter) {
		return attempt{needEpoch: true}, nil
	}
	locks := make([]hot.Lock, len(resources))
	for i, r := range resources {
		old, ok := b.locks[r] // live: held dropped the expired ones above
		if ok {
			if epoch, _ := hot.SplitToken(old.token); epoch == b.epoch {
				// The same holder: re-granted with the same token.
				old.acquired, old.expires = t, t.Add(ttl)
				locks[i] = old.lock(r)
				continue
			}
			close(old.freed) // re-granted under a new epoch
		}
		b.counter++
		e := &entry{holder: holder, token: hot.Token(b.epoch, b.counter), acquired: t, expires: t.Add(ttl), freed: make(chan struct{})}
		b.locks[r] = e
		locks[i] = e.lock(r)
	}
	b.maybeSweep(t)
	return attempt{locks: locks, granted: true}, nil
}

// current answers the live entry for a Renew or Release, or its error. Called with mu held.
func (b *Backend) current(resource, holder string, token int64) (*entry, error) {
	if b.closed {
		return nil, errClosed
	}
	e := b.held(resource, now())
	if e == nil {
		return nil, &hot.NotHeldError{Resource: resource}
	}
	return e, hot.CheckGrant(resource, holder, token, e.lock(resource))
}

// Renew implements hot.Locks.
func (b *Backend) Renew(_ context.Context, resource, holder string, token int64, ttl time.Duration) (hot.Lock, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.current(resource, holder, token)
	if err != nil {
		return hot.Lock{}, err
	}
	e.expires = now().Add(ttl)
	return e.lock(resource), nil
}

// Release implements hot.Locks.
func (b *Backend) Release(_ context.Context, resource, holder string, token int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.current(resource, holder, token)
	if err != nil {
		return err
	}
	delete(b.locks, resource)
	close(e.freed)
	return nil
}

// ReleaseAll implements hot.Locks.
func (b *Backend) ReleaseAll(_ context.Context, holder string, grants []hot.Grant) ([]error, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	refused := make([]error, len(grants))
	for i, g := range grants {
		e, err := b.current(g.Resource, holder, g.Token)
		if err != nil {
			refused[i] = err
			continue
		}
		delete(b.locks, g.Resource)
		close(e.freed)
	}
	return refused, nil
}

// Get implements hot.Locks.
func (b *Backend) Get(_ context.Context, resource string) (hot.Lock, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return hot.Lock{}, errClosed
	}
	e := b.held(resource, now())
	if e == nil {
		return hot.Lock{}, &hot.FreeError{Resource: resource}
	}
	return e.lock(resource), nil
}

// List implements hot.Locks. It sorts the held locks on every call: fine for the few thousand
// locks of one dev process.
func (b *Backend) List(_ context.Context, q hot.ListQuery) ([]hot.Lock, string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, "", errClosed
	}
	t := now()
	var out []hot.Lock
	for r := range b.locks {
		e := b.held(r, t)
		if e == nil || !strings.HasPrefix(r, q.Prefix) || r <= q.After || (q.Holder != "" && e.holder != q.Holder) {
			continue
		}
		out = append(out, e.lock(r))
	}
	slices.SortFunc(out, func(a, b hot.Lock) int { return cmp.Compare(a.Resource, b.Resource) })
	if len(out) > q.Limit {
		return out[:q.Limit], out[q.Limit-1].Resource, nil
	}
	return out, "", nil
}

// Beat implements hot.Liveness.
func (b *Backend) Beat(_ context.Context, instanceID string, at time.Time, ttl time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	prev := b.beats[instanceID]
	if at.Before(prev.at) {
		at = prev.at // the index keeps the later time, like ZADD GT
	}
	b.beats[instanceID] = beat{at: at, aliveUntil: now().Add(ttl)}
	return nil
}

// Forget implements hot.Liveness.
func (b *Backend) Forget(_ context.Context, instanceID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	delete(b.beats, instanceID)
	return nil
}

// Alive implements hot.Liveness.
func (b *Backend) Alive(_ context.Context, instanceID string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false, errClosed
	}
	bt, ok := b.beats[instanceID]
	return ok && now().Before(bt.aliveUntil), nil
}

// Stale implements hot.Liveness. The index of a new process is empty: it answers
// hot.ErrIndexLost until rebuilt from the durable store.
func (b *Backend) Stale(_ context.Context, before time.Time, offset, limit int) ([]hot.Seen, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	if !b.indexed {
		return nil, hot.ErrIndexLost
	}
	var out []hot.Seen
	for id, bt := range b.beats {
		if bt.at.Before(before) {
			out = append(out, hot.Seen{InstanceID: id, At: bt.at})
		}
	}
	slices.SortFunc(out, func(a, b hot.Seen) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.InstanceID, b.InstanceID))
	})
	if offset >= len(out) {
		return nil, nil
	}
	out = out[offset:]
	return out[:min(limit, len(out))], nil
}

// Reindex implements hot.Liveness.
func (b *Backend) Reindex(_ context.Context, seen []hot.Seen) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	for _, s := range seen {
		if prev, ok := b.beats[s.InstanceID]; !ok || prev.at.Before(s.At) {
			b.beats[s.InstanceID] = beat{at: s.At, aliveUntil: prev.aliveUntil}
		}
	}
	return nil
}

// MarkIndexed implements hot.Liveness.
func (b *Backend) MarkIndexed(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	b.indexed = true
	return nil
}

// Ping reports whether the backend is open.
func (b *Backend) Ping(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	return nil
}

// Close closes the backend; later calls answer Unavailable.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}
