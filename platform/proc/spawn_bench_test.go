package proc_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/converge-dev/converge/platform/proc"
)

// BenchmarkRunCgroup is the agent's per-task spawn (issue 17, P1): `sh -c true` through Run with
// a record of its group and a cgroup of its own under a parent, as the agent runs a no-op task's
// command. Besides the wall time it reports the CPU of the calling process alone per run
// (self-µs/op: getrusage RUSAGE_SELF, what the agent pays beyond the child's own) and of the
// children (child-µs/op).
//
//	go test -run '^$' -bench RunCgroup -benchtime 1000x .
func BenchmarkRunCgroup(b *testing.B) {
	parent, err := proc.CgroupDir("converge-proc-bench-spawn")
	if err != nil {
		b.Skipf("no cgroup here: %v", err)
	}
	b.Cleanup(func() { _ = proc.KillCgroups(parent) })
	groups, err := proc.NewGroupDir(filepath.Join(b.TempDir(), "groups"))
	if err != nil {
		b.Fatal(err)
	}
	sb := &proc.Sandbox{UID: -1, GID: -1, CgroupParent: parent}
	env := proc.Env(nil, nil)
	var self0, child0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &child0)
	n := 0
	for b.Loop() {
		res := proc.Run(context.Background(), proc.Spec{Shell: "true", Env: env, Timeout: time.Minute, Groups: groups, Sandbox: sb})
		if res.Err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v", res)
		}
		n++
	}
	var self1, child1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &child1)
	cpu := func(a, b syscall.Rusage) float64 {
		us := func(t syscall.Timeval) float64 { return float64(t.Sec)*1e6 + float64(t.Usec) }
		return us(b.Utime) - us(a.Utime) + us(b.Stime) - us(a.Stime)
	}
	b.ReportMetric(cpu(self0, self1)/float64(n), "self-µs/op")
	b.ReportMetric(cpu(child0, child1)/float64(n), "child-µs/op")
}
