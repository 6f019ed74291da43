package redishot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/converge-dev/converge/services/registry/hot"
	"github.com/converge-dev/converge/services/registry/store"
)

// AcquireAll implements hot.Locks with one script per try (acquireAllScript): the check of
// every lock and every grant happen in one atomic step of Redis. A waiter waits as Acquire's,
// woken by the release of any resource of the batch or the conflicting lock's expiry.
func (b *Backend) AcquireAll(ctx context.Context, resources []string, holder string, ttl, wait time.Duration) ([]hot.Lock, hot.Lock, bool, error) {
	deadline := time.Now().Add(wait)
	locks, conflict, _, err := b.tryAll(ctx, resources, holder, ttl)
	if err != nil || locks != nil || wait <= 0 {
		return locks, conflict, locks != nil, err
	}
	wake, err := b.waiters.add(ctx, resources...)
	if err != nil {
		return nil, hot.Lock{}, false, err
	}
	defer b.waiters.remove(wake, resources...)
	for {
		var untilExpiry time.Duration
		locks, conflict, untilExpiry, err = b.tryAll(ctx, resources, holder, ttl)
		if err != nil || locks != nil {
			return locks, conflict, locks != nil, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, conflict, false, nil
		}
		timer := time.NewTimer(min(left, untilExpiry+time.Millisecond))
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, hot.Lock{}, false, ctx.Err()
		}
		timer.Stop()
	}
}

// tryAll runs the batch script once, installing a new epoch when Redis has none valid with
// room for the batch's new tokens. locks is nil when not granted.
func (b *Backend) tryAll(ctx context.Context, resources []string, holder string, ttl time.Duration) (locks []hot.Lock, conflict hot.Lock, untilExpiry time.Duration, err error) {
	keys := make([]string, 3, 3+len(resources))
	keys[0], keys[1], keys[2] = b.epochKey(), b.indexKey(), b.expiryKey()
	args := make([]any, 3, 3+len(resources))
	args[0], args[1], args[2] = holder, ttl.Milliseconds(), b.tag+"lock:"
	for _, r := range resources {
		keys = append(keys, b.lockKey(r))
		args = append(args, r)
	}
	for range maxEpochInstalls {
		res, err := acquireAllScript.Run(ctx, b.rdb, keys, args...).Slice()
		if err != nil {
			return nil, hot.Lock{}, 0, wrap(err)
		}
		switch code := asInt(res[0]); code {
		case 1:
			if len(res) != 3+len(resources) {
				return nil, hot.Lock{}, 0, fmt.Errorf("redishot: acquire-all script answered %d values for %d resources", len(res), len(resources))
			}
			epoch, now := asInt(res[1]), asInt(res[2])
			locks := make([]hot.Lock, len(resources))
			for i, r := range resources {
				locks[i] = hot.Lock{Resource: r, Holder: holder, Token: hot.Token(epoch, asInt(res[3+i])),
					AcquiredAt: ms(now), ExpiresAt: ms(now + ttl.Milliseconds())}
			}
			return locks, hot.Lock{}, 0, nil
		case 0:
			i := asInt(res[1]) - 1
			if i < 0 || int(i) >= len(resources) {
				return nil, hot.Lock{}, 0, fmt.Errorf("redishot: acquire-all script answered resource %d of %d", i+1, len(resources))
			}
			expires, now := asInt(res[3]), asInt(res[4])
			return nil, hot.Lock{Resource: resources[i], Holder: asString(res[2]), ExpiresAt: ms(expires)},
				time.Duration(expires-now) * time.Millisecond, nil
		case -1:
			if err := b.installEpoch(ctx, max(1, asInt(res[1]))); err != nil {
				return nil, hot.Lock{}, 0, err
			}
		default:
			return nil, hot.Lock{}, 0, fmt.Errorf("redishot: acquire-all script answered %d", code)
		}
	}
	return nil, hot.Lock{}, 0, &store.UnavailableError{Err: errors.New("redishot: no fencing epoch could be installed in Redis")}
}

// ReleaseAll implements hot.Locks with one script (releaseAllScript).
func (b *Backend) ReleaseAll(ctx context.Context, holder string, grants []hot.Grant) ([]error, error) {
	keys := make([]string, 2, 2+len(grants))
	keys[0], keys[1] = b.indexKey(), b.expiryKey()
	args := make([]any, 2, 2+3*len(grants))
	args[0], args[1] = holder, b.waiters.channel
	for _, g := range grants {
		epoch, counter := hot.SplitToken(g.Token)
		keys = append(keys, b.lockKey(g.Resource))
		args = append(args, g.Resource, epoch, counter)
	}
	res, err := releaseAllScript.Run(ctx, b.rdb, keys, args...).Slice()
	if err != nil {
		return nil, wrap(err)
	}
	if len(res) != 2*len(grants) {
		return nil, fmt.Errorf("redishot: release-all script answered %d values for %d grants", len(res), len(grants))
	}
	refused := make([]error, len(grants))
	for i, g := range grants {
		if asInt(res[2*i]) != 1 {
			refused[i] = refusal(g.Resource, g.Token, res[2*i:2*i+2])
		}
	}
	return refused, nil
}
