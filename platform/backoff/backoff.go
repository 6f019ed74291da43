// Package backoff computes exponential retry delays with jitter and waits for
// them without outliving a context.
//
// The default policy starts at 100ms, doubles on every attempt and is capped
// at 5s. Jitter shortens each delay by a random fraction (up to 20% by
// default) so that many processes retrying the same dependency do not hit it
// in lockstep; a delay never exceeds Max.
//
//	b := backoff.New()
//	for {
//		if err := probe(ctx); err == nil {
//			break
//		}
//		if err := backoff.Wait(ctx, b.Next()); err != nil {
//			return err // context cancelled
//		}
//	}
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Defaults used by New and for zero fields of a Backoff.
const (
	DefaultInitial    = 100 * time.Millisecond
	DefaultMax        = 5 * time.Second
	DefaultMultiplier = 2.0
	DefaultJitter     = 0.2
)

// Backoff produces a growing sequence of delays. The zero value is usable and
// behaves like New(). A Backoff is not safe for concurrent use; give each retry
// loop its own.
type Backoff struct {
	// Initial is the base delay before the first retry (default 100ms).
	Initial time.Duration
	// Max caps every delay (default 5s).
	Max time.Duration
	// Multiplier grows the base delay after each attempt (default 2).
	// Values below 1 are treated as the default.
	Multiplier float64
	// Jitter is the largest fraction, in [0, 1], by which a delay is randomly
	// shortened (default 0.2). Use NoJitter for exact delays.
	Jitter float64

	attempt int
}

// NoJitter is a Jitter value that disables jitter. Jitter is a fraction, so 0
// would mean "use the default"; a negative value means "none".
const NoJitter = -1.0

// New returns a Backoff with the default policy: 100ms doubling to 5s, 20% jitter.
func New() *Backoff {
	return &Backoff{}
}

// Next returns the delay to wait before the next attempt and advances the
// sequence.
func (b *Backoff) Next() time.Duration {
	initial, maxDelay, mult, jitter := b.policy()

	// Grow step by step rather than with math.Pow so that the cap is hit
	// without overflowing however many attempts have been made.
	base := float64(initial)
	for i := 0; i < b.attempt && base < float64(maxDelay); i++ {
		base *= mult
	}
	base = min(base, float64(maxDelay))
	b.attempt++

	if jitter > 0 {
		base -= base * jitter * rand.Float64()
	}
	return time.Duration(base)
}

// Reset starts the sequence over, e.g. after a successful attempt.
func (b *Backoff) Reset() {
	b.attempt = 0
}

// policy returns the effective parameters with defaults applied.
func (b *Backoff) policy() (initial, maxDelay time.Duration, mult, jitter float64) {
	initial, maxDelay, mult, jitter = b.Initial, b.Max, b.Multiplier, b.Jitter
	if initial <= 0 {
		initial = DefaultInitial
	}
	if maxDelay <= 0 {
		maxDelay = DefaultMax
	}
	if maxDelay < initial {
		maxDelay = initial
	}
	if mult < 1 {
		mult = DefaultMultiplier
	}
	switch {
	case jitter < 0:
		jitter = 0
	case jitter == 0:
		jitter = DefaultJitter
	case jitter > 1:
		jitter = 1
	}
	return initial, maxDelay, mult, jitter
}

// Wait blocks for d or until ctx is done, whichever comes first. It returns
// ctx.Err() if the context ended the wait and nil otherwise.
func Wait(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
