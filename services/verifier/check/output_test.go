package check_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/verifier/check"
)

// Checks that do not fit the output budget keep their output in files and still judge its tail:
// eight checks of 3 MiB each, a 1 MiB cap and a 1 MiB budget all see their last line, count every
// byte and pass their assertion on the end of the output.
func TestOutputBeyondTheBudgetSpillsAndKeepsItsTail(t *testing.T) {
	t.Parallel()
	o := &check.Options{DefaultTimeout: time.Minute, OutputCap: 1 << 20, ExcerptBytes: 64, MaxAttempts: 1,
		ScratchDir: t.TempDir(), OutputBudget: check.NewOutputBudget(1 << 20)}
	var wg sync.WaitGroup
	results := make([]check.Result, 8)
	for i := range results {
		wg.Go(func() {
			c := command(&verifierv1.CommandCheck{
				// 3 MiB of 'x' lines, then the check's own last line.
				Shell: fmt.Sprintf(`head -c 3145728 /dev/zero | tr '\0' x; echo; echo "end of %d"`, i),
				Expect: &verifierv1.CommandExpectation{Stdout: &verifierv1.TextExpectation{
					Contains: []string{fmt.Sprintf("end of %d", i)}}},
			})
			c.Id, c.Name, c.Tag = "F1", "big", verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY
			results[i] = check.Run(t.Context(), &check.Target{}, o, c)
		})
	}
	wg.Wait()
	for i, r := range results {
		requireStatus(t, verifierv1.CriterionStatus_CRITERION_STATUS_PASS, r)
		ev := r.GetEvidence().GetCommand()
		require.Equal(t, int64(3<<20+1+len(fmt.Sprintf("end of %d\n", i))), ev.GetStdoutBytes())
		require.True(t, ev.GetOutputTruncated())
		require.Contains(t, ev.GetStdoutTail(), fmt.Sprintf("end of %d", i))
	}
}
