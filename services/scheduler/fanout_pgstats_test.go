package scheduler

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgSide is what Postgres did for one BenchmarkFanout run, measured on its side (P1b: the
// Scheduler's CPU per task stays flat as the run grows while its wall on Postgres does not, so
// the benchmark reports where the wall goes on the server): the run's database's backends' CPU
// (/proc, the backends pg_stat_activity lists for the database), the WAL it wrote, its pages
// read from outside shared buffers, and the checkpoints the server made meanwhile.
type pgSide struct {
	conn *pgx.Conn
	at   pgSample
}

type pgSample struct {
	backends    map[int]time.Duration // CPU so far, by backend pid
	wal         int64                 // pg_current_wal_lsn() as bytes
	blksRead    int64                 // pg_stat_database.blks_read of the run's database
	blksHit     int64
	checkpoints int64 // pg_stat_bgwriter's timed + requested
}

// watchPostgres connects to the run's database (url) for the samples.
func watchPostgres(b *testing.B, url string) *pgSide {
	conn, err := pgx.Connect(b.Context(), url)
	if err != nil {
		b.Fatalf("a monitor connection to the benchmark's database: %v", err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	return &pgSide{conn: conn}
}

func (p *pgSide) sample(ctx context.Context) (pgSample, error) {
	s := pgSample{backends: map[int]time.Duration{}}
	rows, err := p.conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return s, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return s, err
	}
	for _, pid := range pids {
		if cpu, err := procCPU(int(pid)); err == nil {
			s.backends[int(pid)] = cpu
		}
	}
	// Statistics are read as of the transaction's first read: none is open here, so each
	// statement sees the counters as they are (pg_stat_clear_snapshot for good measure).
	if _, err := p.conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return s, err
	}
	err = p.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn,
		(SELECT blks_read FROM pg_stat_database WHERE datname = current_database()),
		(SELECT blks_hit FROM pg_stat_database WHERE datname = current_database())`).Scan(&s.wal, &s.blksRead, &s.blksHit)
	if err != nil {
		return s, err
	}
	// Postgres 17 moved the checkpoint counters to pg_stat_checkpointer.
	err = p.conn.QueryRow(ctx, `SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`).Scan(&s.checkpoints)
	if err != nil {
		err = p.conn.QueryRow(ctx, `SELECT num_timed + num_requested FROM pg_stat_checkpointer`).Scan(&s.checkpoints)
	}
	return s, err
}

// start takes the sample the run's figures are counted from.
func (p *pgSide) start(b *testing.B) {
	s, err := p.sample(b.Context())
	if err != nil {
		b.Fatalf("Postgres's counters before the run: %v", err)
	}
	p.at = s
}

// report reports the run's Postgres figures per task (n tasks).
func (p *pgSide) report(b *testing.B, n int) {
	s, err := p.sample(b.Context())
	if err != nil {
		b.Fatalf("Postgres's counters after the run: %v", err)
	}
	var cpu time.Duration
	for pid, t := range s.backends {
		cpu += t - p.at.backends[pid] // a backend not in the first sample connected since: from 0
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "pg-cpu-µs/task")
	b.ReportMetric(float64(s.wal-p.at.wal)/float64(n), "wal-B/task")
	b.ReportMetric(float64(s.blksRead-p.at.blksRead)/float64(n), "pg-blks-read/task")
	b.ReportMetric(float64(s.blksHit-p.at.blksHit)/float64(n), "pg-blks-hit/task")
	b.ReportMetric(float64(s.checkpoints-p.at.checkpoints), "checkpoints")
	if os.Getenv("CONVERGE_FANOUT_SQL") != "" {
		p.printRelations(b, n)
	}
}

// printRelations prints, for CONVERGE_FANOUT_SQL, each table's and index's buffer pages hit and
// rows or index entries read per task over the run (the database is the run's own, so its
// counters from zero are the run's, the setup's few statements aside).
func (p *pgSide) printRelations(b *testing.B, n int) {
	ctx := b.Context()
	if _, err := p.conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		b.Fatal(err)
	}
	rows, err := p.conn.Query(ctx, `SELECT s.relname, s.indexrelname, s.idx_blks_hit + s.idx_blks_read, i.idx_scan, i.idx_tup_read
		FROM pg_statio_user_indexes s JOIN pg_stat_user_indexes i USING (indexrelid)
		UNION ALL
		SELECT t.relname, '(heap)', t.heap_blks_hit + t.heap_blks_read, u.seq_scan, u.seq_tup_read + coalesce(u.idx_tup_fetch, 0)
		FROM pg_statio_user_tables t JOIN pg_stat_user_tables u USING (relid)
		ORDER BY 3 DESC LIMIT 20`)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	fmt.Fprintf(os.Stderr, "%-32s %-44s %10s %10s %10s\n", "table", "index", "blks/task", "scans/task", "read/task")
	for rows.Next() {
		var table, index string
		var blks, scans, read int64
		if err := rows.Scan(&table, &index, &blks, &scans, &read); err != nil {
			b.Fatal(err)
		}
		per := func(v int64) float64 { return float64(v) / float64(n) }
		fmt.Fprintf(os.Stderr, "%-32s %-44s %10.2f %10.2f %10.2f\n", table, index, per(blks), per(scans), per(read))
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
}

// procCPU reads a process's utime + stime from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: fields after the last ')'.
	i := strings.LastIndexByte(string(raw), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 { // f[0] is field 3 (state); utime and stime are fields 14 and 15
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, field := range f[11:13] {
		v, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * (time.Second / 100), nil // USER_HZ is 100 on every Linux Go supports
}
