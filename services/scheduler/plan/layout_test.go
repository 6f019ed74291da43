package plan

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/services/scheduler/plan/internal/planref"
)

// The layout holds, at each position of the order, exactly the impacts and flags of the task
// there: the packer reads nothing else of them. Prepare's is that of its list's order.
func TestLayoutHoldsEachTasksImpactsInPlacementOrder(t *testing.T) {
	t.Parallel()
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 21))
		tasks := equivalenceTasks(rng, 1+rng.IntN(200))
		pr := Prepare(tasks)
		var s scratch
		n, err := levelsOf(tasks, &s)
		if err != nil {
			continue
		}
		levelOrder(tasks, n, pr.byPriority, pr.fewPriorities, &s)
		var l layout
		l.lay(pr, s.order)
		what := fmt.Sprintf("seed %d", seed)
		require.Len(t, l.off, len(tasks)+1, what)
		for pos, task := range s.order {
			ims := pr.impactsOf(task)
			laid := l.ims[l.off[pos]:l.off[pos+1]]
			require.Len(t, laid, len(ims), what)
			wantFlags := uint8(0)
			if tasks[task].Exclusive {
				wantFlags |= flagExclusive
			}
			for i := range ims {
				im := &ims[i]
				glob := im.kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB
				require.Equal(t, slim{head: im.head, node: im.node, src: pr.off[task] + int32(i), glob: glob,
					dir: im.kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY, write: im.write}, laid[i], what)
				if glob {
					wantFlags |= flagGlob
				}
			}
			require.Equal(t, wantFlags, l.flag[pos], what)
		}
		require.Equal(t, s.order, pr.order, what)
		require.Equal(t, l, pr.lay, what)
	}
}

// A plan's scratch comes from the pool, left by plans of other lists (larger, smaller, stopped by
// their budget) and taken by plans running at once: every plan of a list is still the
// reference planner's.
func TestPlansFromReusedScratchEqualTheReferencePlanner(t *testing.T) {
	t.Parallel()
	lists := []*Prepared{Prepare(benchGraph(2_000, 20_000))}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 22))
		lists = append(lists, Prepare(equivalenceTasks(rng, 1+rng.IntN(300))))
	}
	for _, pr := range lists[:5] { // without Prepare's layout: the plan lays the impacts out itself
		own := *pr
		own.order, own.lay = nil, layout{}
		lists = append(lists, &own)
	}
	want := make([]shownPlan, len(lists))
	for i, pr := range lists {
		ref, err := planref.Plan(toRef(pr.Tasks()), 4)
		require.NoError(t, err, "list %d", i)
		want[i] = fromRef(ref)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 23))
			for range 60 {
				i := rng.IntN(len(lists))
				if rng.IntN(5) == 0 { // a plan stopped by its budget leaves its scratch mid-level
					_, err := lists[i].Plan(t.Context(), 4, 3)
					var be *BudgetError
					if err != nil && !errors.As(err, &be) {
						errs <- err
						return
					}
					continue
				}
				got, err := lists[i].Plan(t.Context(), 4, DefaultBudget)
				if err != nil {
					errs <- fmt.Errorf("list %d: %w", i, err)
					return
				}
				if !reflect.DeepEqual(show(got), want[i]) {
					errs <- fmt.Errorf("list %d: the plan differs from the reference planner's", i)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
