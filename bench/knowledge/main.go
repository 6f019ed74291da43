// Command knowledge-bench measures QueryItems by file path on a 1,000,000-item knowledge base in
// Postgres, through the real gRPC server, next to the peer baseline: a plain primary-key SELECT
// of one item on the same database, measured in the same run, in alternating rounds.
//
// It creates a fresh database on the Postgres server (dropped at the end unless --keep), applies
// the Knowledge migrations, bulk-loads the items with COPY (the secondary indexes are dropped and
// rebuilt from their own definitions around the load, as pg_restore does), then serves the
// Knowledge service with platform/server on loopback TCP and times the calls one at a time.
//
//	cd bench/knowledge && GOWORK=off go run . [--items 1000000] [--queries 20000]
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/services/knowledge"
	"github.com/converge-dev/converge/services/knowledge/confidence"
	"github.com/converge-dev/converge/services/knowledge/store"
	"github.com/converge-dev/converge/services/knowledge/store/postgres"
)

type options struct {
	postgresURL string
	databaseURL string
	items       int
	dirs        int
	queries     int
	warmup      int
	rounds      int
	seed        uint64
	keep        bool
	cpuProfile  string
	memProfile  string
	jsonOut     bool
}

func main() {
	var o options
	flag.StringVar(&o.postgresURL, "postgres-url", envOr("CONVERGE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"Postgres server (its user must be allowed to create databases) [CONVERGE_TEST_POSTGRES_URL]")
	flag.StringVar(&o.databaseURL, "database-url", "", "measure this database, loaded by an earlier run with --keep, instead of creating and loading one")
	flag.IntVar(&o.items, "items", 1_000_000, "items in the knowledge base")
	flag.IntVar(&o.dirs, "dirs", 5_000, "directories of the synthetic repository")
	flag.IntVar(&o.queries, "queries", 20_000, "timed calls of each kind")
	flag.IntVar(&o.warmup, "warmup", 2_000, "untimed calls of each kind first")
	flag.IntVar(&o.rounds, "rounds", 20, "alternating rounds the timed calls are split into")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic data and the queried paths")
	flag.BoolVar(&o.keep, "keep", false, "keep the database (its URL is printed)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the timed calls to this file")
	flag.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile of the whole run (pprof's allocs) to this file at the end")
	flag.BoolVar(&o.jsonOut, "json", false, "print the result as one JSON object (progress goes to stderr)")
	flag.Parse()
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "knowledge-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	progress := out
	if o.jsonOut {
		progress = os.Stderr
	}
	dbURL := o.databaseURL
	if dbURL == "" {
		var (
			drop func()
			err  error
		)
		if dbURL, drop, err = createDatabase(ctx, o.postgresURL); err != nil {
			return err
		}
		if o.keep {
			fmt.Fprintf(progress, "database kept: %s\n", database.RedactURL(dbURL))
		} else {
			defer drop()
		}
	}

	st, err := postgres.New(ctx, dbURL, database.WithMigrate())
	if err != nil {
		return err
	}
	defer st.Close()

	rng := mrand.New(mrand.NewPCG(o.seed, 2))
	r := newRepo(rng, o.dirs)
	if o.databaseURL == "" {
		start := time.Now()
		if err := load(ctx, st.Pool(), r, o, time.Now()); err != nil {
			return err
		}
		fmt.Fprintf(progress, "loaded %d items in %s (COPY, indexes rebuilt, VACUUM ANALYZE)\n", o.items, time.Since(start).Round(time.Second))
	} else if err := st.Pool().QueryRow(ctx, "SELECT count(*) FROM knowledge_items").Scan(&o.items); err != nil {
		return err
	}

	client, stop, err := serve(ctx, st)
	if err != nil {
		return err
	}
	defer stop()

	return measure(ctx, out, o, r, st, client)
}

// createDatabase creates converge_bench_<random> on the server at serverURL and returns its URL
// and a function dropping it.
func createDatabase(ctx context.Context, serverURL string) (string, func(), error) {
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", database.RedactURL(serverURL), err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "converge_bench_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		_ = admin.Close(ctx)
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		_ = admin.Close(ctx)
	}
	return u.String(), drop, nil
}

// copyColumns are the columns the load writes; the rest keep their defaults.
var copyColumns = []string{"type", "content", "content_normalized", "content_hash", "file_pattern",
	"pattern_extension", "pattern_literal_prefix", "pattern_specificity", "tags", "confidence", "decay_rank",
	"source_execution_id", "source_task_id", "source_agent_id", "evidence", "confirm_count",
	"created_at", "updated_at", "last_confirmed_at"}

// load bulk-loads o.items items: secondary indexes dropped, COPY on two connections, indexes
// rebuilt from their saved definitions, ANALYZE.
func load(ctx context.Context, pool *pgxpool.Pool, r *repo, o options, now time.Time) error {
	rows, err := pool.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes
		WHERE tablename = 'knowledge_items' AND indexname NOT IN (SELECT conname FROM pg_constraint)`)
	if err != nil {
		return err
	}
	type index struct{ name, def string }
	indexes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (index, error) {
		var ix index
		return ix, row.Scan(&ix.name, &ix.def)
	})
	if err != nil {
		return err
	}
	for _, ix := range indexes {
		if _, err := pool.Exec(ctx, "DROP INDEX "+pgx.Identifier{ix.name}.Sanitize()); err != nil {
			return err
		}
	}

	// Each worker generates its own share of the items from its own seed.
	const workers = 2
	g, gctx := errgroup.WithContext(ctx)
	for w := range workers {
		g.Go(func() error {
			rng := mrand.New(mrand.NewPCG(o.seed, uint64(100+w)))
			n := w
			src := pgx.CopyFromFunc(func() ([]any, error) {
				if n >= o.items {
					return nil, nil
				}
				row := r.item(rng, n, now)
				n += workers
				tags, _ := json.Marshal(row.Tags)
				return []any{string(row.Type), row.Content, row.ContentNormalized, row.ContentHash, row.FilePattern,
					row.Bucket.Extension, row.Bucket.Prefix, row.Specificity, string(tags), row.Confidence, row.Rank,
					row.Source.ExecutionID, row.Source.TaskID, row.Source.AgentID, row.Evidence, int32(rng.IntN(5)),
					row.Now, row.Now, row.Now}, nil
			})
			_, err := pool.CopyFrom(gctx, pgx.Identifier{"knowledge_items"}, copyColumns, src)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("copy: %w", err)
	}

	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, ix := range indexes {
		g.Go(func() error {
			conn, err := pool.Acquire(gctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(gctx, "SET maintenance_work_mem = '512MB'"); err != nil {
				return err
			}
			_, err = conn.Exec(gctx, ix.def)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("rebuild indexes: %w", err)
	}
	if err := loadHits(ctx, pool); err != nil {
		return fmt.Errorf("hits: %w", err)
	}
	_, err = pool.Exec(ctx, "VACUUM ANALYZE knowledge_items, knowledge_item_hits")
	return err
}

// loadHits gives most items 1 to 49 hits, as a knowledge base in use has, in knowledge_item_hits
// where the store counts them (migration 0005). The foreign key is not checked row by row (the
// items are all there): its check would lock every item's row.
func loadHits(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The session's setting must not outlive the load.
	defer func() { _ = conn.Hijack().Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "SET session_replication_role = replica"); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `INSERT INTO knowledge_item_hits (item_id, hit_count)
		SELECT id, id * 7919 % 50 FROM knowledge_items WHERE id * 7919 % 50 > 0`)
	return err
}

// serve serves the Knowledge service on loopback TCP with the platform server, as a deployment
// does (request logging at info, metrics, validation, recovery), and returns a client.
func serve(ctx context.Context, st store.Store) (knowledgev1.KnowledgeServiceClient, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	svc := knowledge.New(st)
	svc.Start(ctx) // hits are written in the background, as converge-knowledge does
	srv, err := server.Config{
		Name:       "knowledge-bench",
		Logger:     slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
		DrainDelay: -1,
		Services: []server.Service{{
			Desc: &knowledgev1.KnowledgeService_ServiceDesc, Impl: svc, Ready: st.Ping,
		}},
	}.Complete()
	if err != nil {
		cancel()
		return nil, nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return knowledgev1.NewKnowledgeServiceClient(conn), func() {
		_ = conn.Close()
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "knowledge server:", err)
		}
	}, nil
}

// kind is one kind of timed call.
type kind struct {
	name string
	call func(ctx context.Context, rng *mrand.Rand) (matches int, err error)
	// durations of the timed calls, and matches answered in all.
	durations []time.Duration
	matches   int
	// split: the calls are QueryItems hits, also timed apart by whether the store answered every
	// item from memory (held) or read some from the table (unheld).
	split          bool
	held, unheld   []time.Duration
	heldN, unheldN int
	// mallocs is the heap allocations of the process during this kind's timed calls (client,
	// server and the store's background work alike).
	mallocs uint64
	// cpu is the process's CPU time during this kind's timed calls.
	cpu time.Duration
}

// measure times QueryItems by path (the agents' query: gotchas, min_confidence 0.6, limit 20),
// the same with every type, GetItem through gRPC, and the peer baseline, a primary-key SELECT
// with pgx, in alternating rounds so that drift affects all alike.
func measure(ctx context.Context, out io.Writer, o options, r *repo, st *postgres.Store, client knowledgev1.KnowledgeServiceClient) error {
	pool := st.Pool()
	var maxID int64
	if err := pool.QueryRow(ctx, "SELECT max(id) FROM knowledge_items").Scan(&maxID); err != nil {
		return err
	}
	pk := `SELECT id, type, content, file_pattern, pattern_specificity, tags, confidence, decay_rank,
		source_execution_id, source_task_id, source_agent_id, evidence, hit_count, confirm_count, refute_count,
		created_at, updated_at, last_confirmed_at FROM knowledge_items WHERE id = $1`
	kinds := []*kind{
		{name: "QueryItems by path (gotchas, min 0.6)", split: true, call: func(ctx context.Context, rng *mrand.Rand) (int, error) {
			res, err := client.QueryItems(ctx, &knowledgev1.QueryItemsRequest{
				Target:        &knowledgev1.QueryItemsRequest_FilePath{FilePath: r.file(rng)},
				Types:         []knowledgev1.ItemType{knowledgev1.ItemType_ITEM_TYPE_GOTCHA},
				MinConfidence: 0.6,
			})
			return len(res.GetMatches()), err
		}},
		// A miss: a path in a directory and with an extension no item names, which no pattern of
		// the repository's matches: it must cost no more than a hit.
		{name: "QueryItems by path, a miss (gotchas, min 0.6)", call: func(ctx context.Context, rng *mrand.Rand) (int, error) {
			res, err := client.QueryItems(ctx, &knowledgev1.QueryItemsRequest{
				Target:        &knowledgev1.QueryItemsRequest_FilePath{FilePath: missPath(rng)},
				Types:         []knowledgev1.ItemType{knowledgev1.ItemType_ITEM_TYPE_GOTCHA},
				MinConfidence: 0.6,
			})
			return len(res.GetMatches()), err
		}},
		{name: "QueryItems by path (all types, min 0)", split: true, call: func(ctx context.Context, rng *mrand.Rand) (int, error) {
			res, err := client.QueryItems(ctx, &knowledgev1.QueryItemsRequest{
				Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: r.file(rng)},
			})
			return len(res.GetMatches()), err
		}},
		// Where a query's time goes: its two statements, called on the store directly.
		{name: "  of which: store.Candidates, 1 round", call: func(ctx context.Context, rng *mrand.Rand) (int, error) {
			path := r.file(rng)
			cands, err := st.Candidates(ctx, store.CandidateQuery{
				Path: path, Types: []store.Type{store.TypeGotcha},
				MinRank: confidence.MinRank(0.6, time.Now()), Limit: 28, // as QueryItems asks for 20 items
			})
			return len(cands), err
		}},
		// 20 random items, read: a revision no item has, so that none is answered from memory.
		{name: "  of which: store.Answer, 20 items", call: func(ctx context.Context, rng *mrand.Rand) (int, error) {
			cands := make([]store.Candidate, 20)
			for i := range cands {
				cands[i] = store.Candidate{ID: 1 + rng.Int64N(maxID), Revision: -1}
			}
			items, err := st.Answer(ctx, cands)
			return len(items), err
		}},
		{name: "GetItem (gRPC, primary key)", call: func(ctx context.Context, rng *mrand.Rand) (int, error) {
			_, err := client.GetItem(ctx, &knowledgev1.GetItemRequest{Id: fmt.Sprintf("kn_%d", 1+rng.Int64N(maxID))})
			return 1, err
		}},
		{name: "baseline: SELECT by primary key (pgx)", call: func(ctx context.Context, rng *mrand.Rand) (int, error) {
			rows, err := pool.Query(ctx, pk, 1+rng.Int64N(maxID))
			if err != nil {
				return 0, err
			}
			n := 0
			for rows.Next() {
				n++
			}
			rows.Close()
			return n, rows.Err()
		}},
	}

	rng := mrand.New(mrand.NewPCG(o.seed, 3))
	for _, k := range kinds {
		for range o.warmup {
			if _, err := k.call(ctx, rng); err != nil {
				return fmt.Errorf("%s: %w", k.name, err)
			}
		}
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	per := max(o.queries/o.rounds, 1)
	var mem runtime.MemStats
	cpu0 := processCPU()
	for range o.rounds {
		for _, k := range kinds {
			runtime.ReadMemStats(&mem)
			mallocs, kcpu := mem.Mallocs, processCPU()
			for range per {
				reads := st.AnswerReads()
				start := time.Now()
				n, err := k.call(ctx, rng)
				d := time.Since(start)
				k.durations = append(k.durations, d)
				if err != nil {
					return fmt.Errorf("%s: %w", k.name, err)
				}
				k.matches += n
				if k.split && n > 0 {
					if st.AnswerReads() == reads {
						k.held, k.heldN = append(k.held, d), k.heldN+n
					} else {
						k.unheld, k.unheldN = append(k.unheld, d), k.unheldN+n
					}
				}
			}
			runtime.ReadMemStats(&mem)
			k.mallocs += mem.Mallocs - mallocs
			k.cpu += processCPU() - kcpu
		}
	}
	cpu := processCPU() - cpu0
	if o.memProfile != "" {
		if err := writeMemProfile(o.memProfile); err != nil {
			return err
		}
	}

	base := kinds[len(kinds)-1]
	kinds = splitKinds(kinds)
	if o.jsonOut {
		return writeJSON(out, o, per*o.rounds, kinds, base)
	}
	fmt.Fprintf(out, "\n%d items, %d calls of each kind in %d alternating rounds, one at a time, loopback TCP\n\n", o.items, per*o.rounds, o.rounds)
	fmt.Fprintf(out, "%-40s %9s %9s %9s %9s %9s %8s %8s %8s %8s %8s\n", "call", "p50", "p90", "p99", "p99.9", "max", "items", "×PK p50", "×PK p99", "allocs", "CPU µs")
	for _, k := range kinds {
		allocs, cpu := "-", "-"
		if k.mallocs > 0 {
			allocs = fmt.Sprintf("%.0f", float64(k.mallocs)/float64(len(k.durations)))
			cpu = fmt.Sprintf("%.0f", float64(k.cpu.Microseconds())/float64(len(k.durations)))
		}
		fmt.Fprintf(out, "%-40s %9s %9s %9s %9s %9s %8.1f %8.1f %8.1f %8s %8s\n", k.name,
			ms(pct(k.durations, 50)), ms(pct(k.durations, 90)), ms(pct(k.durations, 99)), ms(pct(k.durations, 99.9)),
			ms(slices.Max(k.durations)), float64(k.matches)/float64(len(k.durations)),
			ratio(pct(k.durations, 50), pct(base.durations, 50)), ratio(pct(k.durations, 99), pct(base.durations, 99)), allocs, cpu)
	}
	fmt.Fprintf(out, "allocs, CPU µs: the process's heap allocations and CPU time (user + system) per call, client and server\n"+
		"and the store's background work alike, Postgres not counted; all the timed calls: %s of CPU\n", cpu.Round(time.Millisecond))
	q := kinds[0]
	for _, k := range kinds {
		if k.split {
			fmt.Fprintf(out, "%s: %d of %d hits answered wholly from memory\n", k.name, len(k.held), len(k.held)+len(k.unheld))
		}
	}
	verdict := "meets"
	if pct(q.durations, 99) > targetP99 {
		verdict = "MISSES"
	}
	fmt.Fprintf(out, "\nQueryItems by path p99 %s %s the target of %s\n", ms(pct(q.durations, 99)), verdict, targetP99)
	return nil
}

// splitKinds returns kinds with, after each split kind, its held and unheld hits as kinds of
// their own (those with at least one call).
func splitKinds(kinds []*kind) []*kind {
	var all []*kind
	for _, k := range kinds {
		all = append(all, k)
		if !k.split {
			continue
		}
		for _, sub := range []struct {
			name string
			ds   []time.Duration
			n    int
		}{{"  hit, every item held", k.held, k.heldN}, {"  hit, items read", k.unheld, k.unheldN}} {
			if len(sub.ds) > 0 {
				all = append(all, &kind{name: sub.name, durations: sub.ds, matches: sub.n})
			}
		}
	}
	return all
}

// targetP99 is issue 17's goal for QueryItems by path (P4).
const targetP99 = 2 * time.Millisecond

// callResult is one kind of call's figures in the JSON report.
type callResult struct {
	Call       string  `json:"call"`
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	P999Ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	Items      float64 `json:"items_per_call"`
	RatioPKP50 float64 `json:"ratio_to_pk_p50"`
	RatioPKP99 float64 `json:"ratio_to_pk_p99"`
}

// writeJSON prints the figures as one JSON object; the last call is the peer baseline.
func writeJSON(out io.Writer, o options, calls int, kinds []*kind, base *kind) error {
	msf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	rep := struct {
		Items    int          `json:"items"`
		Calls    int          `json:"calls_per_kind"`
		Rounds   int          `json:"rounds"`
		TargetMs float64      `json:"target_p99_ms"`
		Results  []callResult `json:"results"`
	}{Items: o.items, Calls: calls, Rounds: o.rounds, TargetMs: float64(targetP99) / float64(time.Millisecond)}
	for _, k := range kinds {
		rep.Results = append(rep.Results, callResult{Call: k.name,
			P50Ms: msf(pct(k.durations, 50)), P90Ms: msf(pct(k.durations, 90)), P99Ms: msf(pct(k.durations, 99)),
			P999Ms: msf(pct(k.durations, 99.9)), MaxMs: msf(slices.Max(k.durations)), Items: float64(k.matches) / float64(len(k.durations)),
			RatioPKP50: ratio(pct(k.durations, 50), pct(base.durations, 50)), RatioPKP99: ratio(pct(k.durations, 99), pct(base.durations, 99))})
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// processCPU returns the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeMemProfile writes the allocations of the whole run so far (pprof's allocs profile).
func writeMemProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// pct returns the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000) }

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// missPath is a path that no item of the synthetic repository names: a directory outside it and
// an extension none of its files has.
func missPath(rng *mrand.Rand) string {
	return fmt.Sprintf("zz-outside-%d/sub%d/none%d.nomatch", rng.IntN(1000), rng.IntN(10), rng.IntN(100))
}
