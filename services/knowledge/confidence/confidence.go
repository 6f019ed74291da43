// Package confidence is the Knowledge service's confidence rule, in one place (docs/knowledge.md
// explains it for operators):
//
//   - a new item starts at the confidence it is recorded with, [Default] (0.7) if none;
//   - a confirmation (ConfirmItem, or recording the same item again) closes a fifth of the gap
//     to 1: c ← c + (1 − c) × 0.2, and restarts the decay clock;
//   - a refutation halves it: c ← c × 0.5; the decay clock keeps running;
//   - confidence decays with the time since the last confirmation, halving every [HalfLife]
//     (90 days): effective = c × 0.5^(age / 90 days).
//
// Queries filter and rank by the effective confidence. Refuting weighs more than confirming on
// purpose: a wrong gotcha in an agent's prompt costs more than a missing one, so one refutation
// takes a fresh item (0.7 → 0.35) below the agents' default threshold of 0.6 at once, and it takes
// three confirmations to bring it back (0.48, 0.58, 0.67). Confirmations approach 1 but never
// reach it. The half-life lets lessons about code that has since changed fade out: unconfirmed, a
// fresh 0.7 item drops below 0.6 after about 20 days, a five-times confirmed one (0.9) after
// about 53.
//
// Stored confidences are rounded to 6 decimal places after each move (no float noise such as
// 0.7600000000000001), effective ones to 4, so answers read and compare stably.
//
// Every function takes the time it needs as an argument: the service's clock is injectable and
// tests are exact.
package confidence

import (
	"math"
	"time"
)

const (
	// Default is the confidence of an item recorded without one.
	Default = 0.7
	// UnconfirmedCap is the highest confidence of a provisional item (recorded by a principal
	// that is not an operator, not yet confirmed by another): below the 0.6 agents ask for, so
	// it reaches no prompt until a second principal confirms it.
	UnconfirmedCap = 0.5
	// ConfirmStep is the share of the gap to 1 a confirmation closes.
	ConfirmStep = 0.2
	// RefuteFactor multiplies the confidence on a refutation.
	RefuteFactor = 0.5
	// HalfLife is the time without confirmation over which the effective confidence halves.
	HalfLife = 90 * 24 * time.Hour
	// RankCellsPerHalving is the resolution of [Rank]: effective confidences within one cell
	// (a factor of 2^(1/100), about 0.7%) rank as equal and are ordered by specificity instead.
	RankCellsPerHalving = 100
)

// minRanked is the smallest confidence [Rank] tells apart; below it (0 included) all rank alike.
const minRanked = 1e-9

// Confirm returns the confidence after a confirmation.
func Confirm(c float64) float64 { return round(c+(1-c)*ConfirmStep, 1e6) }

// Refute returns the confidence after a refutation.
func Refute(c float64) float64 { return round(c*RefuteFactor, 1e6) }

// Effective returns confidence c, last confirmed (or recorded) at lastConfirmed, decayed to now,
// rounded to 4 decimal places. A lastConfirmed after now (a clock behind another replica's)
// counts as now.
func Effective(c float64, lastConfirmed, now time.Time) float64 {
	age := max(now.Sub(lastConfirmed), 0)
	return round(c*math.Exp2(-age.Seconds()/HalfLife.Seconds()), 1e4)
}

// Rank is the sort key that orders items by effective confidence at any time, without knowing
// the time: effective = c × 2^(−(now − t)/H), so log2(effective) = log2(c) + t/H − now/H, and
// the first two terms order items the same way at every "now". Rank is that score in cells of
// 1/[RankCellsPerHalving]; stores keep it in an indexed column, so "the k most confident items"
// is an index range scan, and a minimum effective confidence is a minimum rank ([MinRank]).
func Rank(c float64, lastConfirmed time.Time) int64 {
	score := math.Log2(max(c, minRanked)) + float64(lastConfirmed.UnixMilli())/float64(HalfLife.Milliseconds())
	return int64(math.Floor(score * RankCellsPerHalving))
}

// MinRank returns a rank below that of every item whose [Effective] confidence at now is at
// least minEffective: stores skip the items under it by index; the service then compares the
// effective confidence exactly. It is math.MinInt64 when nothing can be skipped.
func MinRank(minEffective float64, now time.Time) int64 {
	// Effective rounds to 4 places: anything from minEffective − 0.00005 up rounds to at least
	// minEffective.
	lowest := minEffective - 0.5e-4
	if lowest <= minRanked {
		return math.MinInt64
	}
	// Rank of a confidence of `lowest` confirmed just now, one cell lower for float slop.
	return Rank(lowest, now) - 1
}

func round(x, scale float64) float64 { return math.Round(x*scale) / scale }
