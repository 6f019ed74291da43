package scheduler

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// sqlCounter is a pgx tracer that counts the statements and the round trips of a benchmark (a
// statement outside a batch is one round trip, a batch is one). With detail (the benchmarks'
// CONVERGE_FANOUT_SQL) it also keeps, per statement text, its count and the time from send to
// result; without, it only adds to three atomic counters, so the tracer costs the measured run
// next to nothing (the detail's text key, context value and lock per statement were 5 % of the
// Postgres fan-out's CPU, inside the completion group's serialised transaction).
type sqlCounter struct {
	detail  bool
	queries atomic.Int64
	batches atomic.Int64
	inBatch atomic.Int64

	mu     sync.Mutex // guards byText
	byText map[string]*sqlStat
}

type sqlStat struct {
	n     int64
	batch bool
	total time.Duration
}

type sqlStartKey struct{}

type sqlStart struct {
	text string
	at   time.Time
}

// newSQLCounter returns a counter that keeps the per-statement detail when CONVERGE_FANOUT_SQL
// is set.
func newSQLCounter() *sqlCounter {
	return &sqlCounter{detail: os.Getenv("CONVERGE_FANOUT_SQL") != "", byText: map[string]*sqlStat{}}
}

// newSQLDetail returns a counter that always keeps the per-statement detail (tests that count
// one statement's text).
func newSQLDetail() *sqlCounter { return &sqlCounter{detail: true, byText: map[string]*sqlStat{}} }

// sqlKey is a statement's text as the detail lists it: its whitespace folded, at most 90 bytes.
func sqlKey(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	if len(s) > 90 {
		s = s[:90]
	}
	return s
}

func (c *sqlCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !c.detail {
		return ctx
	}
	return context.WithValue(ctx, sqlStartKey{}, sqlStart{text: sqlKey(d.SQL), at: time.Now()})
}

func (c *sqlCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	c.queries.Add(1)
	if !c.detail {
		return
	}
	s, ok := ctx.Value(sqlStartKey{}).(sqlStart)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.byText[s.text]
	if st == nil {
		st = &sqlStat{}
		c.byText[s.text] = st
	}
	st.n++
	st.total += time.Since(s.at)
}

func (c *sqlCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *sqlCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.inBatch.Add(1)
	if !c.detail {
		return
	}
	k := sqlKey(d.SQL)
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.byText[k]
	if st == nil {
		st = &sqlStat{batch: true}
		c.byText[k] = st
	}
	st.n++
}

func (c *sqlCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	c.batches.Add(1)
}

func (c *sqlCounter) reset() {
	c.queries.Store(0)
	c.batches.Store(0)
	c.inBatch.Store(0)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byText = map[string]*sqlStat{}
}

// totals returns the round trips and the statements so far.
func (c *sqlCounter) totals() (roundTrips, statements int64) {
	q := c.queries.Load()
	return q + c.batches.Load(), q + c.inBatch.Load()
}

// print writes the statements by count, per task.
func (c *sqlCounter) print(w io.Writer, tasks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.byText))
	for k := range c.byText {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return c.byText[keys[i]].n > c.byText[keys[j]].n })
	for _, k := range keys {
		st := c.byText[k]
		tag := "   "
		if st.batch {
			tag = "[b]"
		}
		var avg time.Duration
		if st.n > 0 {
			avg = st.total / time.Duration(st.n)
		}
		_, _ = fmt.Fprintf(w, "%6.2f/task %s %8v  %s\n", float64(st.n)/float64(tasks), tag, avg, k)
	}
}
