package verifier_test

import (
	"fmt"
	"testing"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// BenchmarkVerifyParallelCommands runs 100 command checks of 100 ms each (`sleep 0.1`) with
// parallelism 8 through the real server (in-process gRPC, SQLite store, report stored). The ideal
// is 100 × 0.1 s / 8 = 1.25 s; the x-ideal metric is the measured time per verification over it
// (target: at most 1.5).
//
//	go test -run '^$' -bench BenchmarkVerifyParallelCommands -benchtime 5x .
func BenchmarkVerifyParallelCommands(b *testing.B) {
	const (
		checks      = 100
		sleep       = 100 * time.Millisecond
		parallelism = 8
	)
	ideal := time.Duration(checks) * sleep / parallelism
	bu := setup(b, backends[1])
	dir := bu.dir(b, nil)
	set := &verifierv1.CriteriaSet{}
	for i := range checks {
		set.Criteria = append(set.Criteria, &verifierv1.Criterion{
			Id: fmt.Sprintf("P%d", i+1), Name: "sleeps 100 ms", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{Argv: []string{"sleep", "0.1"}}},
		})
	}
	req := structured(set, dir, "bench")
	req.Parallelism = parallelism

	var total time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := bu.client.Verify(b.Context(), req)
		total += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if res.GetReport().GetVerdict() != commonv1.Verdict_VERDICT_CONVERGED {
			b.Fatalf("verdict %v: %v", res.GetReport().GetVerdict(), res.GetReport().GetBlockDetail())
		}
	}
	per := total / time.Duration(b.N)
	b.ReportMetric(per.Seconds(), "s/verify")
	b.ReportMetric(per.Seconds()/ideal.Seconds(), "x-ideal")
	b.ReportMetric(float64(checks)/per.Seconds(), "checks/s")
}
