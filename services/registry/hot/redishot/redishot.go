// Package redishot is the Redis backend of the Registry's hot state (go-redis v9): locks are
// SET NX PX values changed only by Lua scripts that compare before they write, and heartbeats
// are TTL keys plus a sorted set for the staleness scan. See scripts.go for the key layout and
// package hot for the fencing design.
package redishot

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/registry/hot"
	"github.com/converge-dev/converge/services/registry/store"
)

// DefaultPrefix is the key prefix of New when none is given.
const DefaultPrefix = "converge:registry"

// listBudget bounds the index entries one ListLocks script looks at, so that a holder filter
// over many locks never blocks Redis for long; the page then ends early with a next token.
const listBudget = 2048

// Backend is the hot state in Redis. Create it with New.
type Backend struct {
	rdb    redis.UniversalClient
	epochs hot.Epochs
	// prefix is the epoch name in the durable store; tag ("{prefix}:") starts every key.
	prefix, tag string

	waiters waiters
}

var _ hot.Backend = (*Backend)(nil)

// New answers the hot state kept in rdb under keys starting with "{prefix}:" (DefaultPrefix
// when ""), with fencing epochs from epochs under the name prefix. Several Registry replicas
// share it by using the same Redis and prefix. Redis must be 7.0 or later and should run with
// a maxmemory policy that does not evict keys without a TTL (noeviction or volatile-*).
func New(rdb redis.UniversalClient, prefix string, epochs hot.Epochs) *Backend {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	b := &Backend{rdb: rdb, epochs: epochs, prefix: prefix, tag: "{" + prefix + "}:"}
	b.waiters = waiters{rdb: rdb, channel: b.tag + "released", byResource: map[string]map[chan struct{}]struct{}{}}
	return b
}

func (b *Backend) lockKey(resource string) string { return b.tag + "lock:" + resource }
func (b *Backend) epochKey() string               { return b.tag + "epoch" }
func (b *Backend) indexKey() string               { return b.tag + "locks" }
func (b *Backend) expiryKey() string              { return b.tag + "expiry" }
func (b *Backend) hbKey(id string) string         { return b.tag + "hb:" + id }
func (b *Backend) hbIndexKey() string             { return b.tag + "heartbeats" }
func (b *Backend) hbRunKey() string               { return b.tag + "heartbeats:run" }

// Ping reports whether Redis answers.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.rdb.Ping(ctx).Err(); err != nil {
		return wrap(err)
	}
	return nil
}

// Close stops listening for releases. The Redis client belongs to the caller, who closes it.
func (b *Backend) Close() error {
	b.waiters.close()
	return nil
}

// maxEpochInstalls bounds the epoch installations of one grant: more means the durable store
// and Redis disagree persistently.
const maxEpochInstalls = 4

// try runs the acquire script once, installing a new epoch when Redis has none valid.
func (b *Backend) try(ctx context.Context, resource, holder string, ttl time.Duration) (lock hot.Lock, granted bool, untilExpiry time.Duration, err error) {
	for range maxEpochInstalls {
		res, err := acquireScript.Run(ctx, b.rdb,
			[]string{b.lockKey(resource), b.epochKey(), b.indexKey(), b.expiryKey()},
			holder, ttl.Milliseconds(), resource, b.tag+"lock:").Slice()
		if err != nil {
			return hot.Lock{}, false, 0, wrap(err)
		}
		switch code := asInt(res[0]); code {
		case 1:
			return hot.Lock{
				Resource:   resource,
				Holder:     holder,
				Token:      hot.Token(asInt(res[1]), asInt(res[2])),
				AcquiredAt: ms(asInt(res[3])),
				ExpiresAt:  ms(asInt(res[4])),
			}, true, 0, nil
		case 0:
			expires, now := asInt(res[2]), asInt(res[3])
			return hot.Lock{Resource: resource, Holder: asString(res[1]), ExpiresAt: ms(expires)},
				false, time.Duration(expires-now) * time.Millisecond, nil
		case -1:
			if err := b.installEpoch(ctx, 1); err != nil {
				return hot.Lock{}, false, 0, err
			}
		default:
			return hot.Lock{}, false, 0, fmt.Errorf("redishot: acquire script answered %d", code)
		}
	}
	return hot.Lock{}, false, 0, &store.UnavailableError{Err: errors.New("redishot: no fencing epoch could be installed in Redis")}
}

// installEpoch takes a new epoch from the durable store and installs it in Redis, unless a
// valid one with room for need tokens is installed meanwhile (by another replica).
func (b *Backend) installEpoch(ctx context.Context, need int64) error {
	e, err := b.epochs.NextLockEpoch(ctx, b.prefix)
	if err != nil {
		return err
	}
	if e > hot.MaxEpoch {
		return fmt.Errorf("redishot: fencing epochs exhausted (%d)", e)
	}
	if err := installEpochScript.Run(ctx, b.rdb, []string{b.epochKey()}, e, need).Err(); err != nil {
		return wrap(err)
	}
	return nil
}

// Acquire implements hot.Locks. A waiter first tries; when the lock is held it subscribes to
// releases, tries again (a release between the first try and the subscription is not missed)
// and then sleeps until a release of its resource is published, the holder's lock expires or
// the wait ends, and tries again. Releases published while the subscription reconnects are
// lost; the expiry timer then bounds the delay.
func (b *Backend) Acquire(ctx context.Context, resource, holder string, ttl, wait time.Duration) (hot.Lock, bool, error) {
	deadline := time.Now().Add(wait)
	lock, granted, _, err := b.try(ctx, resource, holder, ttl)
	if err != nil || granted || wait <= 0 {
		return lock, granted, err
	}
	wake, err := b.waiters.add(ctx, resource)
	if err != nil {
		return hot.Lock{}, false, err
	}
	defer b.waiters.remove(wake, resource)
	for {
		var untilExpiry time.Duration
		lock, granted, untilExpiry, err = b.try(ctx, resource, holder, ttl)
		if err != nil || granted {
			return lock, granted, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return lock, false, nil
		}
		// A millisecond past the expiry: Redis expires the key at its PEXPIRETIME.
		timer := time.NewTimer(min(left, untilExpiry+time.Millisecond))
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return hot.Lock{}, false, ctx.Err()
		}
		timer.Stop()
	}
}

// refusal turns a refusal of the renew and release scripts into its error.
func refusal(resource string, token int64, res []any) error {
	switch code := asInt(res[0]); code {
	case -1:
		return &hot.NotHeldError{Resource: resource}
	case -2:
		return &hot.StaleTokenError{Resource: resource, Token: token, Holder: asString(res[1])}
	case -3:
		return &hot.WrongTokenError{Resource: resource, Token: token}
	case -4:
		return &hot.HeldByOtherError{Resource: resource, Holder: asString(res[1])}
	default:
		return fmt.Errorf("redishot: script answered %d", code)
	}
}

// Renew implements hot.Locks.
func (b *Backend) Renew(ctx context.Context, resource, holder string, token int64, ttl time.Duration) (hot.Lock, error) {
	epoch, counter := hot.SplitToken(token)
	res, err := renewScript.Run(ctx, b.rdb, []string{b.lockKey(resource), b.expiryKey()},
		holder, epoch, counter, ttl.Milliseconds(), resource).Slice()
	if err != nil {
		return hot.Lock{}, wrap(err)
	}
	if asInt(res[0]) != 1 {
		return hot.Lock{}, refusal(resource, token, res)
	}
	return hot.Lock{Resource: resource, Holder: holder, Token: token, AcquiredAt: ms(asInt(res[1])), ExpiresAt: ms(asInt(res[2]))}, nil
}

// Release implements hot.Locks.
func (b *Backend) Release(ctx context.Context, resource, holder string, token int64) error {
	epoch, counter := hot.SplitToken(token)
	res, err := releaseScript.Run(ctx, b.rdb, []string{b.lockKey(resource), b.indexKey(), b.expiryKey()},
		holder, epoch, counter, resource, b.waiters.channel).Slice()
	if err != nil {
		return wrap(err)
	}
	if asInt(res[0]) != 1 {
		return refusal(resource, token, res)
	}
	return nil
}

// Get implements hot.Locks.
func (b *Backend) Get(ctx context.Context, resource string) (hot.Lock, error) {
	res, err := getScript.Run(ctx, b.rdb, []string{b.lockKey(resource)}).Slice()
	if err != nil {
		return hot.Lock{}, wrap(err)
	}
	if asInt(res[0]) != 1 {
		return hot.Lock{}, &hot.FreeError{Resource: resource}
	}
	lock, err := parseLock(resource, asString(res[1]))
	lock.ExpiresAt = ms(asInt(res[2]))
	return lock, err
}

// parseLock reads a lock value "<epoch> <counter> <acquired ms> <holder>".
func parseLock(resource, v string) (hot.Lock, error) {
	f := strings.SplitN(v, " ", 4)
	if len(f) != 4 {
		return hot.Lock{}, fmt.Errorf("redishot: malformed lock value %q of %q", v, resource)
	}
	e, errE := strconv.ParseInt(f[0], 10, 64)
	c, errC := strconv.ParseInt(f[1], 10, 64)
	acq, errA := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(errE, errC, errA); err != nil {
		return hot.Lock{}, fmt.Errorf("redishot: malformed lock value %q of %q: %w", v, resource, err)
	}
	return hot.Lock{Resource: resource, Holder: f[3], Token: hot.Token(e, c), AcquiredAt: ms(acq)}, nil
}

// List implements hot.Locks from the lexicographic index: resources from the prefix (or after
// q.After) to the end of the prefix.
func (b *Backend) List(ctx context.Context, q hot.ListQuery) ([]hot.Lock, string, error) {
	lo, hi := "-", "+"
	if q.Prefix != "" {
		// No UTF-8 text has a 0xff byte: every name starting with the prefix sorts below
		// prefix + "\xff".
		lo, hi = "["+q.Prefix, "("+q.Prefix+"\xff"
	}
	if q.After != "" && q.After >= q.Prefix {
		lo = "(" + q.After
	}
	res, err := listScript.Run(ctx, b.rdb, []string{b.indexKey(), b.expiryKey()},
		lo, hi, q.Limit, q.Holder, b.tag+"lock:", listBudget+q.Limit).Slice()
	if err != nil {
		return nil, "", wrap(err)
	}
	flat, _ := res[1].([]any)
	locks := make([]hot.Lock, 0, len(flat)/6)
	for i := 0; i+5 < len(flat); i += 6 {
		e, errE := strconv.ParseInt(asString(flat[i+2]), 10, 64)
		c, errC := strconv.ParseInt(asString(flat[i+3]), 10, 64)
		acq, errA := strconv.ParseInt(asString(flat[i+4]), 10, 64)
		exp, errX := strconv.ParseInt(asString(flat[i+5]), 10, 64)
		if err := errors.Join(errE, errC, errA, errX); err != nil {
			return nil, "", fmt.Errorf("redishot: list script answered %v: %w", flat[i:i+6], err)
		}
		locks = append(locks, hot.Lock{
			Resource: asString(flat[i]), Holder: asString(flat[i+1]), Token: hot.Token(e, c),
			AcquiredAt: ms(acq), ExpiresAt: ms(exp),
		})
	}
	return locks, asString(res[0]), nil
}

// Beat implements hot.Liveness.
func (b *Backend) Beat(ctx context.Context, instanceID string, at time.Time, ttl time.Duration) error {
	err := beatScript.Run(ctx, b.rdb, []string{b.hbKey(instanceID), b.hbIndexKey()},
		at.UnixMilli(), max(1, ttl.Milliseconds()), instanceID).Err()
	return wrap(err)
}

// Forget implements hot.Liveness.
func (b *Backend) Forget(ctx context.Context, instanceID string) error {
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, b.hbKey(instanceID))
		p.ZRem(ctx, b.hbIndexKey(), instanceID)
		return nil
	})
	return wrap(err)
}

// Alive implements hot.Liveness.
func (b *Backend) Alive(ctx context.Context, instanceID string) (bool, error) {
	n, err := b.rdb.Exists(ctx, b.hbKey(instanceID)).Result()
	return n == 1, wrap(err)
}

// Stale implements hot.Liveness.
func (b *Backend) Stale(ctx context.Context, before time.Time, offset, limit int) ([]hot.Seen, error) {
	// Scores are milliseconds, truncated; rounding the bound up keeps every entry older than
	// before (the caller checks the exact times in the durable store).
	beforeMs := int64(math.Ceil(float64(before.UnixNano()) / 1e6))
	res, err := staleScript.Run(ctx, b.rdb, []string{b.hbIndexKey(), b.hbRunKey()}, beforeMs, offset, limit).Result()
	if err != nil {
		return nil, wrap(err)
	}
	flat, ok := res.([]any)
	if !ok {
		return nil, hot.ErrIndexLost
	}
	out := make([]hot.Seen, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		score, err := strconv.ParseFloat(asString(flat[i+1]), 64)
		if err != nil {
			return nil, fmt.Errorf("redishot: staleness score %v: %w", flat[i+1], err)
		}
		out = append(out, hot.Seen{InstanceID: asString(flat[i]), At: ms(int64(score))})
	}
	return out, nil
}

// Reindex implements hot.Liveness.
func (b *Backend) Reindex(ctx context.Context, seen []hot.Seen) error {
	for len(seen) > 0 {
		n := min(len(seen), 512)
		members := make([]redis.Z, n)
		for i, s := range seen[:n] {
			members[i] = redis.Z{Score: float64(s.At.UnixMilli()), Member: s.InstanceID}
		}
		if err := b.rdb.ZAddGT(ctx, b.hbIndexKey(), members...).Err(); err != nil {
			return wrap(err)
		}
		seen = seen[n:]
	}
	return nil
}

// MarkIndexed implements hot.Liveness.
func (b *Backend) MarkIndexed(ctx context.Context) error {
	return wrap(markIndexedScript.Run(ctx, b.rdb, []string{b.hbRunKey()}).Err())
}

// ms answers the time of a millisecond Unix timestamp, in UTC.
func ms(v int64) time.Time { return time.UnixMilli(v).UTC() }

func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// wrap marks the errors that mean Redis could not serve the request as
// *store.UnavailableError. Context errors pass unchanged; so do other error replies, which mean
// a bug (a script that does not run).
func wrap(err error) error {
	var unavailable *store.UnavailableError
	switch {
	case err == nil, errors.As(err, &unavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		// The replies of a Redis that cannot serve now (LOADING, BUSY, READONLY, OOM...) are
		// database.IsUnavailable's; the others mean a bug (a script that does not run).
		return database.MarkUnavailable(err)
	}
	// Not a reply: connection refused or reset, a timeout, a closed client or pool. All mean
	// that Redis could not be reached.
	return &store.UnavailableError{Err: fmt.Errorf("redis: %w", err)}
}

// waiters wakes the Acquire calls waiting for a resource when its release is published.
type waiters struct {
	rdb     redis.UniversalClient
	channel string

	mu         sync.Mutex
	sub        *redis.PubSub
	closed     bool
	byResource map[string]map[chan struct{}]struct{}
}

// add registers a waiter for resources, subscribing to releases first if nobody has yet. The
// returned channel receives (without blocking the sender) when one of resources is released.
func (w *waiters) add(ctx context.Context, resources ...string) (chan struct{}, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, &store.UnavailableError{Err: errors.New("redishot: closed")}
	}
	if w.sub == nil {
		sub := w.rdb.Subscribe(ctx, w.channel)
		// Wait for the subscription to be confirmed: from then on no release is missed.
		if _, err := sub.Receive(ctx); err != nil {
			_ = sub.Close()
			return nil, wrap(err)
		}
		w.sub = sub
		go w.dispatch(sub.Channel())
	}
	ch := make(chan struct{}, 1)
	for _, resource := range resources {
		set := w.byResource[resource]
		if set == nil {
			set = map[chan struct{}]struct{}{}
			w.byResource[resource] = set
		}
		set[ch] = struct{}{}
	}
	return ch, nil
}

// remove unregisters a waiter.
func (w *waiters) remove(ch chan struct{}, resources ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, resource := range resources {
		delete(w.byResource[resource], ch)
		if len(w.byResource[resource]) == 0 {
			delete(w.byResource, resource)
		}
	}
}

// dispatch wakes the waiters of every released resource until the subscription closes. A
// message names one resource, or several separated by newlines (a batch release).
func (w *waiters) dispatch(messages <-chan *redis.Message) {
	for m := range messages {
		w.mu.Lock()
		for resource := range strings.SplitSeq(m.Payload, "\n") {
			for ch := range w.byResource[resource] {
				select {
				case ch <- struct{}{}:
				default: // already woken
				}
			}
		}
		w.mu.Unlock()
	}
}

// close ends the subscription.
func (w *waiters) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.sub != nil {
		_ = w.sub.Close()
		w.sub = nil
	}
}
