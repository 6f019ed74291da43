package scheduler

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// sqlCounter is a pgx tracer that counts the statements and the round trips of a benchmark (a
// statement outside a batch is one round trip, a batch is one), and per statement text its count
// and the time from send to result.
type sqlCounter struct {
	mu      sync.Mutex
	queries int64
	batches int64
	inBatch int64
	byText  map[string]*sqlStat
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

func newSQLCounter() *sqlCounter { return &sqlCounter{byText: map[string]*sqlStat{}} }

func sqlKey(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	if len(s) > 90 {
		s = s[:90]
	}
	return s
}

func (c *sqlCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlStartKey{}, sqlStart{text: sqlKey(d.SQL), at: time.Now()})
}

func (c *sqlCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	s, ok := ctx.Value(sqlStartKey{}).(sqlStart)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries++
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
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inBatch++
	k := sqlKey(d.SQL)
	st := c.byText[k]
	if st == nil {
		st = &sqlStat{batch: true}
		c.byText[k] = st
	}
	st.n++
}

func (c *sqlCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches++
}

func (c *sqlCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries, c.batches, c.inBatch, c.byText = 0, 0, 0, map[string]*sqlStat{}
}

// totals returns the round trips and the statements so far.
func (c *sqlCounter) totals() (roundTrips, statements int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queries + c.batches, c.queries + c.inBatch
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
