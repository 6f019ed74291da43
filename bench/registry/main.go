// Command registry-bench measures file-lock acquire+release cycles per second through the
// Registry's gRPC server (platform/server on loopback TCP, Redis backend) next to the peer
// baseline, `redis-benchmark -t set` against the same Redis at the same concurrency, in one run,
// in alternating rounds so that both see the same machine. It reports the cycles per second, the
// SET operations per second, their ratio, and the p50/p99 latency of AcquireLock (and of SET).
//
// Each of the --clients clients has its own gRPC connection (as each redis-benchmark client has
// its own Redis connection) and loops AcquireLock then ReleaseLock on a resource of its own, so
// that the cycle measures the lock path, not waiting for another holder. By default the run
// starts a private redis-server on a free port (nothing is saved) so that it neither disturbs
// nor is disturbed by another user of a shared Redis; --redis-url uses an existing one.
//
//	cd bench/registry && GOWORK=off go run . [--clients 50] [--duration 10s] [--rounds 3]
package main

import (
	"context"
	"crypto/rand"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/converge-dev/converge/gen"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/clustertest"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/services/registry"
	"github.com/converge-dev/converge/services/registry/hot/redishot"
	"github.com/converge-dev/converge/services/registry/store/sqlite"
)

type options struct {
	redisURL    string
	clients     int
	duration    time.Duration
	rounds      int
	setRequests int
	jsonOut     bool
	cpuProfile  string
	batchCPU    string
	batchMem    string
}

func main() {
	var o options
	flag.StringVar(&o.redisURL, "redis-url", "", "Redis to use (default: start a private redis-server on a free port)")
	flag.IntVar(&o.clients, "clients", 50, "concurrent clients, for both sides (redis-benchmark -c)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of one round of lock cycles")
	flag.IntVar(&o.rounds, "rounds", 3, "alternating rounds of each side; the median round is reported")
	flag.IntVar(&o.setRequests, "set-requests", 1_000_000, "SET requests of one redis-benchmark round (redis-benchmark -n)")
	flag.BoolVar(&o.jsonOut, "json", false, "print the result as one JSON object")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the lock rounds to this file")
	flag.StringVar(&o.batchCPU, "batch-cpuprofile", "", "write a CPU profile of the batch rounds to this file")
	flag.StringVar(&o.batchMem, "batch-memprofile", "", "write an allocation profile of the batch rounds to this file")
	flag.Parse()
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "registry-bench:", err)
		os.Exit(1)
	}
}

// result is one side's median round.
type result struct {
	OpsPerSec float64 `json:"ops_per_sec"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	// CPUUsPerOp is this process's CPU time (user + system: load generator and server or
	// backend together) per op, in microseconds; 0 for redis-benchmark (another process).
	CPUUsPerOp float64 `json:"cpu_us_per_op,omitempty"`
	// AllocsPerOp is this process's heap allocations (runtime.MemStats.Mallocs: load generator
	// and server together) per op; 0 for redis-benchmark.
	AllocsPerOp float64 `json:"allocs_per_op,omitempty"`
}

// report is what the run answers.
type report struct {
	Clients int `json:"clients"`
	Rounds  int `json:"rounds"`
	// Locks is acquire+release cycles per second through gRPC, with the latency of AcquireLock.
	Locks result `json:"lock_cycles"`
	// Direct is the same cycles on the Redis backend called in process (no gRPC): what the
	// lock scripts cost, apart from the server.
	Direct result `json:"lock_cycles_direct"`
	// Batch is AcquireLocks of a task's batchFiles files then ReleaseLocks through gRPC, per
	// second, with the latency of AcquireLocks.
	Batch result `json:"batch_cycles"`
	// Floor is pairs of no-op unary calls on a plain grpc.Server (floor.go), per second, with
	// the latency of the first call: what a lock cycle costs at least while a lock is a gRPC call.
	Floor result `json:"grpc_floor"`
	// Set is redis-benchmark -t set, with the latency of SET.
	Set result `json:"redis_set"`
	// Ratio is Locks.OpsPerSec / Set.OpsPerSec: the P3.
	Ratio float64 `json:"ratio"`
	// BatchRatio is Batch.OpsPerSec / (Set.OpsPerSec / batchFiles): a task's files locked and
	// released in two calls against batchFiles SETs.
	BatchRatio float64 `json:"batch_ratio"`
	// FloorRatio is Floor.OpsPerSec / Set.OpsPerSec: the ceiling of Ratio in this design.
	FloorRatio float64 `json:"floor_ratio"`
	// OfFloor is Locks.OpsPerSec / Floor.OpsPerSec: how close the lock cycles come to it.
	OfFloor float64 `json:"locks_of_floor"`
}

func run(ctx context.Context, o options, out io.Writer) error {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		return errors.New("redis-benchmark not found on PATH (Debian: apt-get install redis-tools)")
	}
	return clustertest.Run(nil, func(tb clustertest.TB) error { return measure(ctx, tb, o, out) })
}

// measure runs the rounds on o's Redis or a private one (platform/clustertest).
func measure(ctx context.Context, tb clustertest.TB, o options, out io.Writer) error {
	addr := redisAddr(tb, o.redisURL)

	// The Registry: Redis for locks, a throwaway SQLite file for its durable part (a lock
	// cycle touches the durable store only to take the first fencing epoch).
	dir, err := os.MkdirTemp("", "registry-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.New(ctx, filepath.Join(dir, "registry.db"), database.WithMigrate())
	if err != nil {
		return err
	}
	defer st.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4 * o.clients})
	defer rdb.Close()
	prefix := "registry-bench-" + randomHex(4)
	hb := redishot.New(rdb, prefix, st)
	defer hb.Close()
	defer deletePrefix(rdb, prefix)

	srvCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := registry.New(st, hb, registry.WithLogger(logger))
	svc.Start(srvCtx)
	files, err := gen.Files()
	if err != nil {
		return err
	}
	srv, err := server.Config{
		Name: "registry-bench", Logger: logger, DrainDelay: -1, DescriptorResolver: files,
		Services: []server.Service{{Desc: &registryv1.RegistryService_ServiceDesc, Impl: svc, Ready: svc.Ready}},
	}.Complete()
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(srvCtx, lis) }()
	defer func() {
		stopServer()
		if err := <-served; err != nil {
			fmt.Fprintln(os.Stderr, "registry server:", err)
		}
	}()

	clients := make([]registryv1.RegistryServiceClient, o.clients)
	for i := range clients {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		clients[i] = registryv1.NewRegistryServiceClient(conn)
	}
	floorConns, stopFloor, err := floorServer(o.clients)
	if err != nil {
		return err
	}
	defer stopFloor()
	fmt.Fprintf(out, "registry-bench: %d clients, %d rounds of %s, Redis at %s, gRPC server at %s\n",
		o.clients, o.rounds, o.duration, addr, lis.Addr())
	// Warm up: connections, the fencing epoch, script caches.
	if _, err := lockRound(ctx, clients, time.Second); err != nil {
		return err
	}

	if _, err := floorRound(ctx, floorConns, time.Second/4); err != nil {
		return err
	}

	var locks, directs, batches, floors, sets []result
	for r := range o.rounds {
		if o.cpuProfile != "" {
			f, err := os.Create(o.cpuProfile)
			if err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
		}
		l, err := lockRound(ctx, clients, o.duration)
		if o.cpuProfile != "" {
			pprof.StopCPUProfile()
		}
		if err != nil {
			return err
		}
		locks = append(locks, l)
		d, err := directRound(ctx, hb, o.clients, o.duration)
		if err != nil {
			return err
		}
		directs = append(directs, d)
		bt, err := profiled(o.batchCPU, o.batchMem, func() (result, error) { return batchRound(ctx, clients, o.duration) })
		if err != nil {
			return err
		}
		batches = append(batches, bt)
		fl, err := floorRound(ctx, floorConns, o.duration)
		if err != nil {
			return err
		}
		floors = append(floors, fl)
		s, err := setRound(ctx, addr, o.clients, o.setRequests)
		if err != nil {
			return err
		}
		sets = append(sets, s)
		fmt.Fprintf(out, "round %d: gRPC lock cycles %7.0f/s (acquire p50 %.3f ms, p99 %.3f ms, %.0f µs CPU) | direct %7.0f/s (p50 %.3f ms, p99 %.3f ms, %.0f µs CPU) | batch of %d %7.0f/s (p50 %.3f ms, p99 %.3f ms, %.0f µs CPU, %.0f allocs) | gRPC no-op pairs %7.0f/s (p50 %.3f ms, p99 %.3f ms, %.0f µs CPU) | redis SET %7.0f/s (p50 %.3f ms, p99 %.3f ms)\n",
			r+1, l.OpsPerSec, l.P50Ms, l.P99Ms, l.CPUUsPerOp, d.OpsPerSec, d.P50Ms, d.P99Ms, d.CPUUsPerOp,
			batchFiles, bt.OpsPerSec, bt.P50Ms, bt.P99Ms, bt.CPUUsPerOp, bt.AllocsPerOp, fl.OpsPerSec, fl.P50Ms, fl.P99Ms, fl.CPUUsPerOp, s.OpsPerSec, s.P50Ms, s.P99Ms)
	}
	rep := report{Clients: o.clients, Rounds: o.rounds, Locks: median(locks), Direct: median(directs), Batch: median(batches), Floor: median(floors), Set: median(sets)}
	rep.Ratio = rep.Locks.OpsPerSec / rep.Set.OpsPerSec
	rep.BatchRatio = rep.Batch.OpsPerSec / (rep.Set.OpsPerSec / batchFiles)
	rep.FloorRatio = rep.Floor.OpsPerSec / rep.Set.OpsPerSec
	rep.OfFloor = rep.Locks.OpsPerSec / rep.Floor.OpsPerSec
	if o.jsonOut {
		return json.NewEncoder(out).Encode(rep)
	}
	fmt.Fprintf(out, "\nmedian of %d rounds, %d clients each:\n", o.rounds, o.clients)
	fmt.Fprintf(out, "  lock acquire+release cycles through gRPC: %9.0f/s   AcquireLock p50 %.3f ms, p99 %.3f ms   %6.0f µs CPU/cycle\n", rep.Locks.OpsPerSec, rep.Locks.P50Ms, rep.Locks.P99Ms, rep.Locks.CPUUsPerOp)
	fmt.Fprintf(out, "  the same cycles on the backend, no gRPC:  %9.0f/s   Acquire p50 %.3f ms, p99 %.3f ms   %6.0f µs CPU/cycle\n", rep.Direct.OpsPerSec, rep.Direct.P50Ms, rep.Direct.P99Ms, rep.Direct.CPUUsPerOp)
	fmt.Fprintf(out, "  AcquireLocks+ReleaseLocks of %d files:     %9.0f/s   AcquireLocks p50 %.3f ms, p99 %.3f ms   %6.0f µs CPU/cycle, %.0f allocs (%.0f files/s)\n", batchFiles, rep.Batch.OpsPerSec, rep.Batch.P50Ms, rep.Batch.P99Ms, rep.Batch.CPUUsPerOp, rep.Batch.AllocsPerOp, batchFiles*rep.Batch.OpsPerSec)
	fmt.Fprintf(out, "  no-op unary pairs, plain grpc.Server:     %9.0f/s   first call p50 %.3f ms, p99 %.3f ms   %6.0f µs CPU/pair (the floor)\n", rep.Floor.OpsPerSec, rep.Floor.P50Ms, rep.Floor.P99Ms, rep.Floor.CPUUsPerOp)
	fmt.Fprintf(out, "  redis-benchmark -t set:                   %9.0f/s   SET p50 %.3f ms, p99 %.3f ms\n", rep.Set.OpsPerSec, rep.Set.P50Ms, rep.Set.P99Ms)
	fmt.Fprintf(out, "  P3 ratio (lock cycles / SETs):            %9.3f   (goal >= 0.35: %s; AcquireLock p99 %.3f ms, goal <= 2 ms: %s)\n",
		rep.Ratio, met(rep.Ratio >= 0.35), rep.Locks.P99Ms, met(rep.Locks.P99Ms <= 2))
	fmt.Fprintf(out, "  ceiling (no-op pairs / SETs):             %9.3f   lock cycles reach %.2f of it\n", rep.FloorRatio, rep.OfFloor)
	fmt.Fprintf(out, "  batch ratio (tasks of %d / (SETs / %d)):    %9.3f\n", batchFiles, batchFiles, rep.BatchRatio)
	return nil
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// lockRound runs acquire+release cycles on every client for d and answers the cycles per
// second and the AcquireLock latencies.
func lockRound(ctx context.Context, clients []registryv1.RegistryServiceClient, d time.Duration) (result, error) {
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
			resource := fmt.Sprintf("bench/client-%03d.go", i)
			holder := fmt.Sprintf("bench-%03d", i)
			mine := make([]time.Duration, 0, 1<<14)
			n := 0
			var err error
			for time.Now().Before(deadline) {
				t0 := time.Now()
				var res *registryv1.AcquireLockResponse
				res, err = c.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: resource, Holder: holder, Ttl: ttl})
				if err != nil {
					break
				}
				mine = append(mine, time.Since(t0))
				if !res.GetGranted() {
					err = fmt.Errorf("%s: not granted: %v", resource, res)
					break
				}
				_, err = c.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: resource, Holder: holder, Token: res.GetLock().GetToken()})
				if err != nil {
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

// directRound runs the cycles of lockRound on the backend itself, without gRPC.
func directRound(ctx context.Context, hb *redishot.Backend, clients int, d time.Duration) (result, error) {
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		latencies []time.Duration
		cycles    int
		firstErr  error
	)
	cpu0 := usageNow()
	start := time.Now()
	deadline := start.Add(d)
	for i := range clients {
		wg.Go(func() {
			resource := fmt.Sprintf("bench/direct-%03d.go", i)
			holder := fmt.Sprintf("bench-%03d", i)
			mine := make([]time.Duration, 0, 1<<14)
			n := 0
			var err error
			for time.Now().Before(deadline) {
				t0 := time.Now()
				lock, granted, e := hb.Acquire(ctx, resource, holder, 30*time.Second, 0)
				if e != nil || !granted {
					err = cmpErr(e, fmt.Errorf("%s: not granted", resource))
					break
				}
				mine = append(mine, time.Since(t0))
				if err = hb.Release(ctx, resource, holder, lock.Token); err != nil {
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

// cmpErr answers err, or otherwise when err is nil.
func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// setRound runs redis-benchmark -t set and answers its requests per second and latencies.
func setRound(ctx context.Context, addr string, clients, requests int) (result, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return result{}, err
	}
	cmd := exec.CommandContext(ctx, "redis-benchmark", "-h", host, "-p", port,
		"-t", "set", "-c", strconv.Itoa(clients), "-n", strconv.Itoa(requests), "--csv")
	outb, err := cmd.Output()
	if err != nil {
		return result{}, fmt.Errorf("redis-benchmark: %w", err)
	}
	// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	rows, err := csv.NewReader(strings.NewReader(string(outb))).ReadAll()
	if err != nil {
		return result{}, fmt.Errorf("redis-benchmark output %q: %w", outb, err)
	}
	for _, row := range rows {
		if len(row) >= 7 && row[0] == "SET" {
			rps, e1 := strconv.ParseFloat(row[1], 64)
			p50, e2 := strconv.ParseFloat(row[4], 64)
			p99, e3 := strconv.ParseFloat(row[6], 64)
			if err := errors.Join(e1, e2, e3); err != nil {
				return result{}, fmt.Errorf("redis-benchmark row %v: %w", row, err)
			}
			return result{OpsPerSec: rps, P50Ms: p50, P99Ms: p99}, nil
		}
	}
	return result{}, fmt.Errorf("redis-benchmark printed no SET row: %q", outb)
}

// redisAddr answers the Redis to use: url's, or a private redis-server's (stopped when the run
// ends).
func redisAddr(tb clustertest.TB, url string) string {
	if url != "" {
		return clustertest.UseRedis(tb, url).Addr()
	}
	return clustertest.StartRedis(tb).Addr()
}

// deletePrefix removes the run's keys from a Redis it does not own.
func deletePrefix(rdb *redis.Client, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, "{"+prefix+"}:*", 1000).Iterator()
	for iter.Next(ctx) {
		_ = rdb.Del(ctx, iter.Val()).Err()
	}
}

func median(rs []result) result {
	byOps := slices.Clone(rs)
	slices.SortFunc(byOps, func(a, b result) int {
		switch {
		case a.OpsPerSec < b.OpsPerSec:
			return -1
		case a.OpsPerSec > b.OpsPerSec:
			return 1
		}
		return 0
	})
	return byOps[len(byOps)/2]
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
