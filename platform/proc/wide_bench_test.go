package proc_test

import (
	"context"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/converge-dev/converge/platform/proc"
)

// BenchmarkSleepWide is the floor of the verifier's parallel checks (issue 17, P6): 100 ×
// `sleep 0.1` at 8 wide, a slot taken by the next command the moment one frees, started by bare
// os/exec, by Run, and by Run in the sandbox this host allows (namespaces, another uid, a cgroup
// per run), its init the test binary re-executed (proc-sandbox) or converge-sandbox-init
// (proc-sandbox-init). The ideal is 100 × 0.1 s / 8 = 1.25 s (13 rounds of 8 make 1.3 s the least any
// scheduler reaches); it reports the time per 100 runs over the ideal, the mean time one run
// takes beyond its 100 ms, and the calling process's own CPU per run (getrusage RUSAGE_SELF).
//
//	go test -run '^$' -bench BenchmarkSleepWide -benchtime 3x .
func BenchmarkSleepWide(b *testing.B) {
	sb, rep := proc.DetectSandbox(context.Background(), nobody, nobody, "converge-proc-bench")
	b.Logf("sandbox: %s", rep)
	initBin := builtInit(b)
	runs := map[string]func() error{
		"exec": func() error { return exec.Command("sleep", "0.1").Run() },
		"proc": func() error {
			return proc.Run(context.Background(), proc.Spec{Argv: []string{"sleep", "0.1"}, Env: proc.Env(nil, nil), Timeout: time.Minute}).Err
		},
		"proc-sandbox": func() error {
			return proc.Run(context.Background(), proc.Spec{Argv: []string{"sleep", "0.1"}, Env: proc.Env(nil, nil), Dir: "/", Timeout: time.Minute, Sandbox: sb}).Err
		},
		"proc-sandbox-init": func() error {
			s := *sb
			s.Init = initBin
			return proc.Run(context.Background(), proc.Spec{Argv: []string{"sleep", "0.1"}, Env: proc.Env(nil, nil), Dir: "/", Timeout: time.Minute, Sandbox: &s}).Err
		},
		"ns-only": func() error {
			s := *sb
			s.CgroupParent = ""
			return proc.Run(context.Background(), proc.Spec{Argv: []string{"sleep", "0.1"}, Env: proc.Env(nil, nil), Dir: "/", Timeout: time.Minute, Sandbox: &s}).Err
		},
		"cgroup-only": func() error {
			s := *sb
			s.Namespaces = false
			return proc.Run(context.Background(), proc.Spec{Argv: []string{"sleep", "0.1"}, Env: proc.Env(nil, nil), Dir: "/", Timeout: time.Minute, Sandbox: &s}).Err
		},
	}
	for _, name := range []string{"exec", "proc", "proc-sandbox", "proc-sandbox-init", "ns-only", "cgroup-only"} {
		b.Run(name, func(b *testing.B) {
			const n, wide = 100, 8
			ideal := time.Duration(n) * 100 * time.Millisecond / wide
			var total, over time.Duration
			var self0 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
			for b.Loop() {
				start := time.Now()
				sem := make(chan struct{}, wide)
				var wg sync.WaitGroup
				var mu sync.Mutex
				for range n {
					sem <- struct{}{}
					wg.Go(func() {
						defer func() { <-sem }()
						t0 := time.Now()
						if err := runs[name](); err != nil {
							b.Error(err)
						}
						mu.Lock()
						over += time.Since(t0) - 100*time.Millisecond
						mu.Unlock()
					})
				}
				wg.Wait()
				total += time.Since(start)
			}
			per := total / time.Duration(b.N)
			b.ReportMetric(per.Seconds(), "s/100")
			b.ReportMetric(per.Seconds()/ideal.Seconds(), "x-ideal")
			b.ReportMetric(float64(over.Microseconds())/float64(b.N*n)/1000, "ms-over/run")
			// The caller's own CPU per run (the children's is theirs): what Run costs the verifier.
			var self1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
			us := func(t syscall.Timeval) float64 { return float64(t.Sec)*1e6 + float64(t.Usec) }
			self := us(self1.Utime) - us(self0.Utime) + us(self1.Stime) - us(self0.Stime)
			b.ReportMetric(self/float64(b.N*n), "self-µs/run")
		})
	}
}
