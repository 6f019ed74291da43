package confidence_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/knowledge/confidence"
)

var t0 = time.Date(2026, 1, 16, 10, 0, 0, 0, time.UTC)

func TestConfirmAndRefute(t *testing.T) {
	t.Parallel()

	// Confirmations from the default: each closes a fifth of the gap to 1.
	c := confidence.Default
	for _, want := range []float64{0.76, 0.808, 0.8464, 0.87712, 0.901696} {
		c = confidence.Confirm(c)
		require.Equal(t, want, c)
	}
	require.Equal(t, 1.0, confidence.Confirm(1))
	require.Equal(t, 0.2, confidence.Confirm(0))

	// One refutation takes a fresh item below the agents' 0.6; three confirmations bring it back.
	c = confidence.Refute(confidence.Default)
	require.Equal(t, 0.35, c)
	c = confidence.Confirm(confidence.Confirm(c))
	require.Less(t, c, 0.6)
	require.Greater(t, confidence.Confirm(c), 0.6)
	require.Equal(t, 0.0, confidence.Refute(0))
}

func TestEffective(t *testing.T) {
	t.Parallel()

	require.Equal(t, 0.7, confidence.Effective(0.7, t0, t0))
	require.Equal(t, 0.35, confidence.Effective(0.7, t0, t0.Add(confidence.HalfLife)))
	require.Equal(t, 0.175, confidence.Effective(0.7, t0, t0.Add(2*confidence.HalfLife)))
	// Rounded to 4 places: a few minutes of age do not show.
	require.Equal(t, 0.7, confidence.Effective(0.7, t0, t0.Add(5*time.Minute)))
	require.Equal(t, 0.6998, confidence.Effective(0.7, t0, t0.Add(time.Hour)))
	// A confirmation time in the future counts as now.
	require.Equal(t, 0.7, confidence.Effective(0.7, t0.Add(time.Hour), t0))
	// About 20 days for a fresh 0.7 to fall under 0.6.
	require.GreaterOrEqual(t, confidence.Effective(0.7, t0, t0.Add(19*24*time.Hour)), 0.6)
	require.Less(t, confidence.Effective(0.7, t0, t0.Add(21*24*time.Hour)), 0.6)
}

// Rank orders items as their effective confidence does, at any time.
func TestRankOrdersByEffectiveConfidence(t *testing.T) {
	t.Parallel()

	rng := rand.New(rand.NewPCG(1, 2))
	type item struct {
		c float64
		t time.Time
	}
	items := make([]item, 500)
	for i := range items {
		items[i] = item{c: rng.Float64(), t: t0.Add(-time.Duration(rng.Int64N(int64(400 * 24 * time.Hour))))}
	}
	for _, now := range []time.Time{t0, t0.Add(30 * 24 * time.Hour), t0.Add(3 * 365 * 24 * time.Hour)} {
		for i := range items {
			a, b := items[i], items[(i+1)%len(items)]
			ea := a.c * math.Exp2(-now.Sub(a.t).Seconds()/confidence.HalfLife.Seconds())
			eb := b.c * math.Exp2(-now.Sub(b.t).Seconds()/confidence.HalfLife.Seconds())
			ra, rb := confidence.Rank(a.c, a.t), confidence.Rank(b.c, b.t)
			// Ranks are cells: a higher rank means a higher effective confidence, and a clearly
			// higher effective confidence (more than one cell) means a higher rank.
			if ra > rb {
				require.Greater(t, ea, eb*math.Exp2(-1.0/confidence.RankCellsPerHalving))
			}
			if ea > eb*math.Exp2(1.0/confidence.RankCellsPerHalving) {
				require.GreaterOrEqual(t, ra, rb)
			}
		}
	}
}

// MinRank never excludes an item whose effective confidence reaches the minimum.
func TestMinRank(t *testing.T) {
	t.Parallel()

	require.Equal(t, int64(math.MinInt64), confidence.MinRank(0, t0))
	require.Equal(t, int64(math.MinInt64), confidence.MinRank(0.00005, t0))

	rng := rand.New(rand.NewPCG(3, 4))
	now := t0.Add(200 * 24 * time.Hour)
	for range 10_000 {
		c := rng.Float64()
		at := t0.Add(time.Duration(rng.Int64N(int64(250 * 24 * time.Hour))))
		minimum := math.Round(rng.Float64()*100) / 100
		if confidence.Effective(c, at, now) >= minimum {
			require.GreaterOrEqual(t, confidence.Rank(c, at), confidence.MinRank(minimum, now),
				"c=%v at=%v min=%v", c, at, minimum)
		}
	}
}
