package plan

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// globHeavy is the list of the report: n tasks of g globs each. shared: every glob starts with
// "src/" and a wildcard, so every two globs are compared segment by segment (the costly case);
// otherwise each task's globs live under a directory of their own and part at their prefixes.
func globHeavy(n, g int, shared bool) []Task {
	tasks := make([]Task, n)
	for i := range tasks {
		tasks[i].ID = fmt.Sprintf("t%d", i)
		for j := range g {
			p := fmt.Sprintf("pkg%d/sub%d/**/*.go", i, j)
			if shared {
				p = fmt.Sprintf("src/*%d_%d/**", i, j)
			}
			tasks[i].Impacts = append(tasks[i].Impacts, w(p))
		}
	}
	return tasks
}

// A plan whose globs overlap stops at its operations budget with the figure, instead of running
// for a minute (2,000 tasks × 100 globs took 62 s).
func TestPlanStopsAtItsBudget(t *testing.T) {
	t.Parallel()
	_, err := PlanContext(t.Context(), globHeavy(2000, 100, true), 4, 200_000)
	var budget *BudgetError
	require.ErrorAs(t, err, &budget)
	require.EqualValues(t, 200_000, budget.Budget)
	require.Greater(t, budget.Operations, budget.Budget)
	require.Less(t, budget.Placed, budget.Tasks)
	require.Equal(t, 2000, budget.Tasks)
	require.Contains(t, err.Error(), "operations")
}

// Globs under directories of their own part at their literal prefixes: no budget needed.
func TestPlanOfDisjointGlobsFitsItsBudget(t *testing.T) {
	t.Parallel()
	res, err := PlanContext(t.Context(), globHeavy(300, 20, false), 4, DefaultBudget)
	require.NoError(t, err)
	require.Len(t, res.Waves, 75)
}

// cancelAfter is a context whose Err turns Canceled after n looks: planning checks its context
// as it goes, not only at the start.
type cancelAfter struct {
	context.Context
	n int
}

func (c *cancelAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

func TestPlanStopsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	ctx := &cancelAfter{Context: t.Context(), n: 3}
	_, err := PlanContext(ctx, globHeavy(2000, 100, true), 4, 0)
	require.ErrorIs(t, err, context.Canceled)
	require.Negative(t, ctx.n, "the context was looked at while planning")

	done, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = PlanContext(done, []Task{{ID: "a", Impacts: []tasklist.Impact{w("a.go")}}}, 4, 0)
	require.True(t, errors.Is(err, context.Canceled))
}
