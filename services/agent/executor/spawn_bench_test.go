package executor

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/platform/proc"
)

// BenchmarkSpawnTrue is the floor of a no-op task's execute phase (issue 17, bench/dag): one
// `true` as a bare fork+exec, as `sh -c true`, and through the command executor as the agent runs
// it with bench/dag's sandbox (none): its own process group, recorded, in a cgroup of its own
// under the session's when the host allows one.
//
//	go test -run '^$' -bench SpawnTrue -benchtime 200x ./executor
func BenchmarkSpawnTrue(b *testing.B) {
	b.Run("exec-true", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("exec-sh-c-true", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("sh", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	groups, err := proc.NewGroupDir(filepath.Join(b.TempDir(), "groups"))
	if err != nil {
		b.Fatal(err)
	}
	cgroup, cgErr := proc.CgroupDir("converge-bench-spawn")
	if cgErr == nil {
		b.Cleanup(func() { _ = proc.KillCgroups(cgroup) })
	}
	task := &commonv1.Task{Id: "t", Title: "true", Command: "true"}
	run := func(b *testing.B, opts ...Option) {
		ex, err := New(&commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Command{Command: &commonv1.CommandExecutor{}}}, append(opts, WithProcessGroups(groups))...)
		if err != nil {
			b.Fatal(err)
		}
		dir := b.TempDir()
		for b.Loop() {
			if _, err := ex.Run(context.Background(), Request{Dir: dir, Task: task, Timeout: time.Minute, Attempt: 1}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("executor", func(b *testing.B) { run(b) })
	b.Run("executor-cgroup", func(b *testing.B) {
		if cgErr != nil {
			b.Skipf("no cgroup here: %v", cgErr)
		}
		run(b, WithCgroupParent(cgroup))
	})
}
