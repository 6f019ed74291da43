package scheduler

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Model usage: agents report it with CompleteTask; it is summed into the assignment's execution and,
// after each iteration, into the feature build, whose token and cost budgets it is checked against.

// addUsage is sum plus u (a new message; either may be nil). Nil when both are.
func addUsage(sum, u *schedulerv1.Usage) *schedulerv1.Usage {
	if u == nil {
		return sum
	}
	out := &schedulerv1.Usage{}
	if sum != nil {
		out = proto.CloneOf(sum)
	}
	out.InputTokens += u.GetInputTokens()
	out.OutputTokens += u.GetOutputTokens()
	out.CostUsdMicros += u.GetCostUsdMicros()
	return out
}

// overBudget names the budget b's usage passed, with the figures (spent vs budget), or "".
func overBudget(b *schedulerv1.FeatureBuild) string {
	u := b.GetUsage()
	if tokens := u.GetInputTokens() + u.GetOutputTokens(); b.GetMaxTokens() > 0 && tokens > b.GetMaxTokens() {
		return fmt.Sprintf("%d tokens (%d input, %d output) of max_tokens %d", tokens, u.GetInputTokens(), u.GetOutputTokens(), b.GetMaxTokens())
	}
	if b.GetMaxCostUsdMicros() > 0 && u.GetCostUsdMicros() > b.GetMaxCostUsdMicros() {
		return fmt.Sprintf("cost $%s of max_cost $%s", dollars(u.GetCostUsdMicros()), dollars(b.GetMaxCostUsdMicros()))
	}
	return ""
}

// dollars formats micro-dollars as dollars with six decimals.
func dollars(micros int64) string { return fmt.Sprintf("%d.%06d", micros/1e6, micros%1e6) }
