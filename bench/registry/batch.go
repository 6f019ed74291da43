package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
)

// batchFiles is the files of one task in the batch round: AcquireLocks of batchFiles resources
// against batchFiles SETs.
const batchFiles = 8

// batchRound runs AcquireLocks of batchFiles files then ReleaseLocks on every client for d, and
// answers the batch cycles per second and the AcquireLocks latencies.
func batchRound(ctx context.Context, clients []registryv1.RegistryServiceClient, d time.Duration) (result, error) {
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		latencies []time.Duration
		cycles    int
		firstErr  error
	)
	ttl := durationpb.New(30 * time.Second)
	cpu0 := usageNow()
	start := time.Now()
	deadline := start.Add(d)
	for i, c := range clients {
		wg.Go(func() {
			files := make([]string, batchFiles)
			for j := range files {
				files[j] = fmt.Sprintf("bench/task-%03d/file-%d.go", i, j)
			}
			holder := fmt.Sprintf("bench-%03d", i)
			mine := make([]time.Duration, 0, 1<<12)
			n := 0
			var err error
			for time.Now().Before(deadline) {
				t0 := time.Now()
				var res *registryv1.AcquireLocksResponse
				res, err = c.AcquireLocks(ctx, &registryv1.AcquireLocksRequest{Resources: files, Holder: holder, Ttl: ttl})
				if err != nil {
					break
				}
				mine = append(mine, time.Since(t0))
				if !res.GetGranted() {
					err = fmt.Errorf("%s: batch not granted: %v", holder, res)
					break
				}
				grants := make([]*registryv1.LockGrant, len(res.GetLocks()))
				for j, l := range res.GetLocks() {
					grants[j] = &registryv1.LockGrant{Resource: l.GetResource(), Token: l.GetToken()}
				}
				var rel *registryv1.ReleaseLocksResponse
				rel, err = c.ReleaseLocks(ctx, &registryv1.ReleaseLocksRequest{Holder: holder, Locks: grants})
				if err != nil {
					break
				}
				if len(rel.GetNotReleased()) > 0 {
					err = fmt.Errorf("%s: not released: %v", holder, rel.GetNotReleased())
					break
				}
				n++
			}
			mu.Lock()
			defer mu.Unlock()
			latencies = append(latencies, mine...)
			cycles += n
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return result{}, firstErr
	}
	return summarize(latencies, cycles, elapsed, cpu0), nil
}

// cpuTime answers the process's CPU time so far (user + system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// usage is the process's CPU time and heap allocations at one instant.
type usage struct {
	cpu     time.Duration
	mallocs uint64
}

// usageNow answers the process's usage so far (runtime.ReadMemStats stops the world once: at a
// round's start and end only).
func usageNow() usage {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return usage{cpu: cpuTime(), mallocs: m.Mallocs}
}

// summarize is a round's result: ops in elapsed, the latencies' p50 and p99, the CPU and the
// allocations per op since u0.
func summarize(latencies []time.Duration, ops int, elapsed time.Duration, u0 usage) result {
	slices.Sort(latencies)
	r := result{
		OpsPerSec:  float64(ops) / elapsed.Seconds(),
		P50Ms:      ms(quantile(latencies, 0.50)),
		P99Ms:      ms(quantile(latencies, 0.99)),
		CPUUsPerOp: cpuPerOp(u0.cpu, ops),
	}
	if ops > 0 {
		u := usageNow()
		r.AllocsPerOp = float64(u.mallocs-u0.mallocs) / float64(ops)
	}
	return r
}

// cpuPerOp answers the process CPU time since since per op, in microseconds: the load generator
// and the server (or backend) together, which the machine's load moves much less than the wall
// time.
func cpuPerOp(since time.Duration, ops int) float64 {
	if ops == 0 {
		return 0
	}
	return float64(cpuTime()-since) / float64(time.Microsecond) / float64(ops)
}

// profiled runs round with a CPU profile of it written to cpuFile and the allocation profile
// written to memFile after it, each when not empty. The allocation profile is the process's
// since it started (the warm-up and the earlier rounds and sides included), not the round's alone.
func profiled(cpuFile, memFile string, round func() (result, error)) (result, error) {
	if cpuFile != "" {
		f, err := os.Create(cpuFile)
		if err != nil {
			return result{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return result{}, err
		}
		defer pprof.StopCPUProfile()
	}
	r, err := round()
	if err != nil || memFile == "" {
		return r, err
	}
	f, err := os.Create(memFile)
	if err != nil {
		return r, err
	}
	defer f.Close()
	return r, pprof.Lookup("allocs").WriteTo(f, 0)
}
