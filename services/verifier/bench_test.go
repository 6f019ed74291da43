package verifier_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/proc"
	"github.com/converge-dev/converge/services/verifier"
)

// BenchmarkVerifyParallelCommands runs 100 command checks of 100 ms each (`sleep 0.1`) with
// parallelism 8 through the real server (in-process gRPC, SQLite store, report stored). The ideal
// is 100 × 0.1 s / 8 = 1.25 s; the x-ideal metric is the measured time per verification over it
// (target: at most 1.5).
//
//	go test -run '^$' -bench BenchmarkVerifyParallelCommands -benchtime 5x .
func BenchmarkVerifyParallelCommands(b *testing.B) { verifyParallel(b, nil) }

// BenchmarkVerifyParallelCommandsSandboxed is the same run with the checks in the sandbox this
// host allows (proc.DetectSandbox, as the verifier binary does by default): user, PID and mount
// namespaces, another uid, a cgroup per check. Each check starts an init inside the namespaces:
// small-init is the converge-sandbox-init binary shipped beside the servers (built here),
// server-binary the running binary re-executed as the init (what a server without it does). It
// also reports the CPU (user + system, the server and its children) per check.
//
//	go test -run '^$' -bench BenchmarkVerifyParallelCommandsSandboxed -benchtime 3x .
func BenchmarkVerifyParallelCommandsSandboxed(b *testing.B) {
	sb, rep := proc.DetectSandbox(b.Context(), 65534, 65534, "converge-verifier-bench")
	b.Logf("sandbox: %s", rep)
	initBin := filepath.Join(b.TempDir(), proc.InitName)
	if out, err := exec.Command("go", "build", "-o", initBin, "github.com/converge-dev/converge/platform/proc/cmd/converge-sandbox-init").CombinedOutput(); err != nil {
		b.Fatalf("go build %s: %v\n%s", proc.InitName, err, out)
	}
	small := *sb
	small.Init = initBin
	b.Run("small-init", func(b *testing.B) { verifyParallel(b, &small) })
	b.Run("server-binary", func(b *testing.B) { verifyParallel(b, sb) })
}

func verifyParallel(b *testing.B, sb *proc.Sandbox) {
	const (
		checks      = 100
		sleep       = 100 * time.Millisecond
		parallelism = 8
	)
	ideal := time.Duration(checks) * sleep / parallelism
	var opts []verifier.Option
	if sb != nil {
		opts = append(opts, verifier.WithSandbox(sb))
	}
	bu := setup(b, backends[1], opts...)
	dir := bu.dir(b, nil)
	if sb != nil {
		// The sandbox's uid reaches the target and the scratch directory (the test's temporary
		// directories are 0700).
		base := filepath.Dir(bu.root)
		entries, err := os.ReadDir(base)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range []string{base, bu.root, dir} {
			if err := os.Chmod(p, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		for _, e := range entries {
			if err := os.Chmod(filepath.Join(base, e.Name()), 0o755); err != nil {
				b.Fatal(err)
			}
		}
	}
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
	cpu0 := cpuTime()
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
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*checks)/1000, "cpu-ms/check")
}

// cpuTime is the user and system time of this process and of its children waited for.
func cpuTime() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return total
}

// BenchmarkSpawnFloor is P6's floor: the same 100 `sleep 0.1` run by 8 goroutines with os/exec,
// each taking the next as soon as its last ended — no Verifier, no RPC, no sandbox, no report.
// No runner that starts a process per check can do better on this host: with 8 slots the
// checks need 13 rounds of 0.1 s (1.3 s), and each round also pays a process's exec and exit.
// s/verify is the wall of the 100, x-ideal its ratio to 1.25 s as BenchmarkVerifyParallelCommands
// reports its own.
//
//	go test -run '^$' -bench BenchmarkSpawnFloor -benchtime 5x .
func BenchmarkSpawnFloor(b *testing.B) {
	const (
		checks      = 100
		parallelism = 8
	)
	ideal := time.Duration(checks) * 100 * time.Millisecond / parallelism
	var total time.Duration
	for b.Loop() {
		start := time.Now()
		var next atomic.Int64
		errs := make(chan error, parallelism)
		var wg sync.WaitGroup
		for range parallelism {
			wg.Go(func() {
				for next.Add(1) <= checks {
					if err := exec.Command("sleep", "0.1").Run(); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		total += time.Since(start)
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	per := total / time.Duration(b.N)
	b.ReportMetric(per.Seconds(), "s/verify")
	b.ReportMetric(per.Seconds()/ideal.Seconds(), "x-ideal")
}
