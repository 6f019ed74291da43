package sqlite

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// rowsPerInsert is the most rows one multi-row INSERT of a run's start stores (a list's tasks and
// file impacts, an execution's waves and assignments). One statement per row cost each row a
// bind, a step and a reset through database/sql and the driver: about half of the start's CPU
// (CreateTaskList and StartExecution of a 1,000-task list, BenchmarkRunStart). 64 rows of the
// widest table (24 columns) are 1,536 parameters, far under SQLite's limit of 32,766.
const rowsPerInsert = 64

// chunkSizes splits n rows into the sizes of the INSERTs that store them: rowsPerInsert each,
// then the rest as powers of two. A table's inserts so use at most 7 statement texts, each
// prepared once per connection (the statement cache of platform/database).
func chunkSizes(n int) []int {
	var sizes []int
	for ; n >= rowsPerInsert; n -= rowsPerInsert {
		sizes = append(sizes, rowsPerInsert)
	}
	for k := rowsPerInsert / 2; k >= 1; k /= 2 {
		if n >= k {
			sizes = append(sizes, k)
			n -= k
		}
	}
	return sizes
}

// multiRowTexts holds the texts multiRowSQL built, so a start does not build them again.
var multiRowTexts sync.Map // multiRowKey → string

type multiRowKey struct {
	head, tuple, tail string
	rows              int
}

// multiRowSQL returns head, then rows copies of tuple separated by commas, then tail.
func multiRowSQL(head, tuple, tail string, rows int) string {
	k := multiRowKey{head, tuple, tail, rows}
	if q, ok := multiRowTexts.Load(k); ok {
		return q.(string)
	}
	var b strings.Builder
	b.Grow(len(head) + rows*(len(tuple)+2) + len(tail))
	b.WriteString(head)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tuple)
	}
	b.WriteString(tail)
	q, _ := multiRowTexts.LoadOrStore(k, b.String())
	return q.(string)
}

// insertRows stores rows with multi-row INSERTs (head, then one tuple per row: "(?, ?, …)";
// chunkSizes). An error names the chunk's first and last row (id) and maps a unique violation
// to store.ErrAlreadyExists.
func insertRows[R any](ctx context.Context, tx querier, what, head, tuple string, rows []R, id func(R) string, args func(R) []any) error {
	var a []any
	for _, k := range chunkSizes(len(rows)) {
		chunk := rows[:k]
		a = a[:0]
		for _, r := range chunk {
			a = append(a, args(r)...)
		}
		if _, err := tx.ExecContext(ctx, multiRowSQL(head, tuple, "", k), a...); err != nil {
			return uniqueExists(fmt.Errorf("insert %s %q to %q: %w", what, id(chunk[0]), id(chunk[k-1]), err))
		}
		rows = rows[k:]
	}
	return nil
}
