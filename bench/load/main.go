// Command load holds many WatchExecution streams and many agents on one execution of a
// production-shaped deployment (one process per service on a private Postgres database and Redis,
// --agents converge-agent processes) and reports what the Scheduler needed.
//
// One execution of --tasks `true` tasks (layers of --width, each task after the one --width
// before it) is started and paused; --streams WatchExecution streams open from cursor 0 over
// --conns client connections, each asking for up to --batch entries per message; the execution
// resumes and runs to its end. Reported: the Scheduler's peak RSS (VmHWM) and Go heap in use
// (its /metrics), whether every stream saw exactly the log's entries (GetExecutionLog: same
// seqs, no gap, no duplicate, in order), the run's wall time and the delivery latency (an entry's store time → a stream received it) p50/p99/max.
//
//	cd bench/load && go run . --streams 1000 --agents 50 --tasks 300 --results RESULTS.md
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

func main() {
	var cfg config
	flag.IntVar(&cfg.Streams, "streams", 1000, "WatchExecution streams, from cursor 0, held for the whole run")
	flag.IntVar(&cfg.Batch, "batch", 100, "entries per message a stream asks for (WatchExecution's max_entries_per_message; 0 or 1: one per message)")
	flag.IntVar(&cfg.Conns, "conns", 4, "client connections the streams are spread over")
	flag.StringVar(&cfg.Decode, "decode", decodeSeq, "what the streams' client decodes of each entry: seq (its seq and time, as a watcher that counts entries) or full (every field, into the generated types)")
	flag.IntVar(&cfg.Agents, "agents", 50, "converge-agent processes")
	flag.IntVar(&cfg.Tasks, "tasks", 300, "tasks of the execution, each `true`")
	flag.IntVar(&cfg.Width, "width", 50, "tasks per layer (task i depends on task i-width)")
	flag.StringVar(&cfg.PostgresURL, "postgres-url", envOr("CONVERGE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "Postgres server (a private database is made and dropped)")
	flag.StringVar(&cfg.RedisURL, "redis-url", envOr("CONVERGE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis")
	flag.StringVar(&cfg.BinDir, "bin", "", "directory of prebuilt converge-{scheduler,registry,knowledge,verifier,agent}; empty builds them")
	flag.DurationVar(&cfg.Timeout, "timeout", 30*time.Minute, "give up after this long")
	results := flag.String("results", "", "also write the table to this markdown file")
	jsonOut := flag.Bool("json", false, "print the figures as one JSON object instead of the table (bench/run.sh feeds it to bench/report)")
	flag.Parse()
	if cfg.Decode != decodeSeq && cfg.Decode != decodeFull {
		fmt.Fprintf(os.Stderr, "load: --decode %q: want %s or %s\n", cfg.Decode, decodeSeq, decodeFull)
		os.Exit(2)
	}
	cfg.Logf = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s load: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	res, err := run(context.Background(), cfg)
	if *jsonOut {
		writeJSON(os.Stdout, res, err)
	} else {
		printTable(os.Stdout, res)
	}
	if *results != "" && res.Events > 0 {
		f, ferr := os.Create(*results)
		if ferr == nil {
			writeResults(f, res, err)
			ferr = f.Close()
		}
		if ferr != nil {
			fmt.Fprintln(os.Stderr, "load:", ferr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	if res.StreamsExact != res.Config.Streams {
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// decodeWhat says in words what the streams' client decoded.
func decodeWhat(decode string) string {
	if decode == decodeFull {
		return "every entry in full"
	}
	return "each entry's seq and time"
}

func mib(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// printTable prints the figures as a markdown table.
func printTable(w io.Writer, r result) {
	c := r.Config
	rows := [][2]string{
		{"deployment", fmt.Sprintf("scheduler, registry, knowledge, verifier, %d agent processes; Postgres + Redis", c.Agents)},
		{"machine", fmt.Sprintf("%d CPUs (%s/%s), shared", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)},
		{"execution", fmt.Sprintf("%d `true` tasks in %d waves of %d; outcome %s", c.Tasks, (c.Tasks+max(c.Width, 1)-1)/max(c.Width, 1), c.Width, r.Outcome)},
		{"log entries", fmt.Sprint(r.Events)},
		{"WatchExecution streams", fmt.Sprintf("%d from cursor 0 over %d connections (opened in %s)", c.Streams, c.Conns, r.StreamsOpen.Round(time.Millisecond))},
		{"streams that saw every entry", fmt.Sprintf("%d / %d (same seqs as GetExecutionLog, no gap, no duplicate, in order)", r.StreamsExact, c.Streams)},
		{"entries delivered", fmt.Sprintf("%d in %d messages (max_entries_per_message %d); the client decoded %s", r.Delivered, r.Messages, c.Batch, decodeWhat(c.Decode))},
		{"run wall time", fmt.Sprintf("%.1f s (resume → execution ended)", r.Wall.Seconds())},
		{"CPU, resume → every stream closed", fmt.Sprintf("Scheduler %.2f s; the streams' client (this process) %.2f s", r.SchedCPU.Seconds(), r.ClientCPU.Seconds())},
		{"delivery latency p50 / p99 / max", fmt.Sprintf("%s / %s / %s (store time → received, %d samples)", ms(r.LatP50), ms(r.LatP99), ms(r.LatMax), r.LatSamples)},
		{"scheduler RSS idle → peak (VmHWM)", fmt.Sprintf("%s → %s", mib(r.SchedRSSIdleKB), mib(r.SchedRSSPeakKB))},
		{"scheduler Go heap in use idle → peak", fmt.Sprintf("%s → %s", mib(r.SchedHeapIdle/1024), mib(r.SchedHeapPeak/1024))},
		{"agents' peak RSS, summed", mib(r.AgentRSSTotalKB)},
	}
	fmt.Fprintln(w, "| | |")
	fmt.Fprintln(w, "|---|---|")
	for _, row := range rows {
		fmt.Fprintf(w, "| %s | %s |\n", row[0], row[1])
	}
	for _, e := range r.StreamErrors {
		fmt.Fprintf(w, "\n- %s", e)
	}
	if len(r.StreamErrors) > 0 {
		fmt.Fprintln(w)
	}
}

// writeJSON prints the figures bench/report reads (R8: the run's wall time with and without
// streams, side by side).
func writeJSON(w io.Writer, r result, runErr error) {
	out := struct {
		Streams        int      `json:"streams"`
		Batch          int      `json:"batch"`     // max_entries_per_message
		Decode         string   `json:"decode"`    // what the client decoded: seq or full
		Delivered      int64    `json:"delivered"` // entries received over every stream
		Messages       int64    `json:"messages"`  // in this many messages
		Agents         int      `json:"agents"`
		Tasks          int      `json:"tasks"`
		Width          int      `json:"width"`
		Outcome        string   `json:"outcome"`
		Events         int      `json:"events"`
		WallS          float64  `json:"wall_s"`
		SchedCPUS      float64  `json:"scheduler_cpu_s"` // resume → every stream closed
		ClientCPUS     float64  `json:"client_cpu_s"`    // the streams' receiving side, same span
		StreamsExact   int      `json:"streams_exact"`
		StreamsOpenS   float64  `json:"streams_open_s"`
		LatP50Ms       float64  `json:"latency_p50_ms"`
		LatP99Ms       float64  `json:"latency_p99_ms"`
		SchedRSSIdleKB int64    `json:"scheduler_rss_idle_kb"`
		SchedRSSPeakKB int64    `json:"scheduler_rss_peak_kb"`
		SchedHeapIdle  int64    `json:"scheduler_heap_idle_bytes"`
		SchedHeapPeak  int64    `json:"scheduler_heap_peak_bytes"`
		StreamErrors   []string `json:"stream_errors,omitempty"` // the streams that were not exact, the first few
		Error          string   `json:"error,omitempty"`
	}{Streams: r.Config.Streams, Batch: r.Config.Batch, Decode: r.Config.Decode, Delivered: r.Delivered, Messages: r.Messages, Agents: r.Config.Agents, Tasks: r.Config.Tasks, Width: r.Config.Width, Outcome: r.Outcome,
		Events: r.Events, WallS: r.Wall.Seconds(), SchedCPUS: r.SchedCPU.Seconds(), ClientCPUS: r.ClientCPU.Seconds(), StreamsExact: r.StreamsExact, StreamsOpenS: r.StreamsOpen.Seconds(),
		LatP50Ms: float64(r.LatP50.Microseconds()) / 1000, LatP99Ms: float64(r.LatP99.Microseconds()) / 1000,
		SchedRSSIdleKB: r.SchedRSSIdleKB, SchedRSSPeakKB: r.SchedRSSPeakKB, SchedHeapIdle: r.SchedHeapIdle, SchedHeapPeak: r.SchedHeapPeak,
		StreamErrors: r.StreamErrors}
	if runErr != nil {
		out.Error = strings.TrimSpace(runErr.Error())
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

func writeResults(w io.Writer, r result, runErr error) {
	fmt.Fprintf(w, "# Load: %d WatchExecution streams and %d agents on one run\n\n", r.Config.Streams, r.Config.Agents)
	fmt.Fprintf(w, "`make load` (`sh bench/load/run.sh`), %s. Re-run it to refresh this file.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	printTable(w, r)
	fmt.Fprint(w, `
How to read it: the run starts paused, the streams open from cursor 0 (each replays what is
already in the log), then it resumes; the wall time is from the resume to the execution's end. The
latency is an entry's store time (Postgres now() in the appending transaction) to its receipt by a
stream, for the entries written after the resume, over every stream; it includes the commit, the
Scheduler's wake-up of its watchers and each watcher's own read of the log (every WatchExecution
stream reads the store itself), so it grows with streams × entries on a small machine. The
streams check is exact: a stream passes only when its seqs equal GetExecutionLog's, in order.
`)
	if runErr != nil {
		fmt.Fprintf(w, "\nThe run failed: %s\n", strings.TrimSpace(runErr.Error()))
	}
}
