package backoff_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/backoff"
)

func TestNextWithoutJitterDoublesToCap(t *testing.T) {
	t.Parallel()

	b := &backoff.Backoff{Jitter: backoff.NoJitter}
	want := []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond,
		5 * time.Second, 5 * time.Second,
	}
	for i, w := range want {
		require.Equal(t, w, b.Next(), "attempt %d", i)
	}

	// Many more attempts neither overflow nor exceed the cap.
	for range 1000 {
		require.Equal(t, 5*time.Second, b.Next())
	}
}

func TestNextJitterStaysWithinBounds(t *testing.T) {
	t.Parallel()

	b := backoff.New() // 20% jitter
	bases := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i, base := range bases {
		base *= time.Millisecond
		d := b.Next()
		require.LessOrEqual(t, d, base, "attempt %d", i)
		require.GreaterOrEqual(t, d, base*8/10, "attempt %d", i)
	}
}

func TestReset(t *testing.T) {
	t.Parallel()

	b := &backoff.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 3, Jitter: backoff.NoJitter}
	require.Equal(t, time.Second, b.Next())
	require.Equal(t, 3*time.Second, b.Next())
	b.Reset()
	require.Equal(t, time.Second, b.Next())
}

func TestZeroValueUsesDefaults(t *testing.T) {
	t.Parallel()

	var b backoff.Backoff
	d := b.Next()
	require.LessOrEqual(t, d, backoff.DefaultInitial)
	require.Positive(t, d)
}

func TestWait(t *testing.T) {
	t.Parallel()

	t.Run("Elapses", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, backoff.Wait(t.Context(), time.Millisecond))
		require.NoError(t, backoff.Wait(t.Context(), 0))
	})

	t.Run("CancelledContextEndsWait", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		go cancel()
		// An hour-long wait only returns because the context is cancelled.
		require.ErrorIs(t, backoff.Wait(ctx, time.Hour), context.Canceled)
	})

	t.Run("AlreadyCancelled", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.ErrorIs(t, backoff.Wait(ctx, 0), context.Canceled)
	})
}
