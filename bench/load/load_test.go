package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A scaled-down load run (300 streams: more than one principal's default quota of 256 open
// streams, which the run raises; 5 agents, 40 tasks) on the real binaries, Postgres and Redis:
// the execution converges and every stream sees exactly the log, in batched messages and one
// entry per message, read by the light client (seq and time) and decoded in full. No timed
// assertion: the figures are logged.
func TestLoadScaledDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binaries")
	}
	for _, tc := range []struct {
		batch  int
		decode string
	}{{1, decodeFull}, {100, decodeSeq}} {
		t.Run(fmt.Sprintf("batch=%d/decode=%s", tc.batch, tc.decode), func(t *testing.T) { loadScaledDown(t, tc.batch, tc.decode) })
	}
}

func loadScaledDown(t *testing.T, batch int, decode string) {
	cfg := config{Streams: 300, Batch: batch, Decode: decode, Conns: 2, Agents: 5, Tasks: 40, Width: 10, Timeout: 10 * time.Minute,
		PostgresURL: envOr("CONVERGE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		RedisURL:    envOr("CONVERGE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
		Logf:        t.Logf}
	res, err := run(t.Context(), cfg)
	var table strings.Builder
	printTable(&table, res)
	t.Log("\n" + table.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Outcome, "CONVERGED") {
		t.Fatalf("outcome %s", res.Outcome)
	}
	if res.StreamsExact != cfg.Streams {
		t.Fatalf("%d of %d streams saw exactly the log: %v", res.StreamsExact, cfg.Streams, res.StreamErrors)
	}
	if res.Events == 0 || res.Delivered != int64(res.Events*cfg.Streams) {
		t.Fatalf("%d entries delivered, want %d × %d", res.Delivered, res.Events, cfg.Streams)
	}
	if batch <= 1 && res.Messages != res.Delivered {
		t.Fatalf("%d messages for %d entries at one entry per message", res.Messages, res.Delivered)
	}
	if batch > 1 && res.Messages >= res.Delivered {
		// Every stream replays the log written before it opened (the paused run's first entries)
		// in full messages, so batching always shows.
		t.Fatalf("%d messages for %d entries at up to %d per message", res.Messages, res.Delivered, batch)
	}
	if res.SchedRSSPeakKB == 0 {
		t.Errorf("no VmHWM read for the scheduler (is /proc mounted?)")
	}
}
