package scheduler

import (
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteCounting is the counter every SQLite connection of this test binary reports the
// statements it starts to (SQLite's sqlite3_trace_v2 with SQLITE_TRACE_STMT, installed on each
// connection as it opens), or nil: BenchmarkFanout's statements per task on SQLite. Test code
// only: the hook reads the modernc connection's handle by reflection.
var sqliteCounting atomic.Pointer[sqlCounter]

var sqliteTraceOnce sync.Once

// traceSQLite installs the connection hook once per process; connections opened before it are
// not traced.
func traceSQLite() {
	sqliteTraceOnce.Do(func() {
		sqlite.RegisterConnectionHook(func(c sqlite.ExecQuerierContext, _ string) error {
			v := reflect.ValueOf(c)
			if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
				return nil
			}
			db, tls := v.Elem().FieldByName("db"), v.Elem().FieldByName("tls")
			if !db.IsValid() || !tls.IsValid() {
				return nil
			}
			sqlite3.Xsqlite3_trace_v2((*libc.TLS)(unsafe.Pointer(tls.Pointer())), uintptr(db.Uint()),
				sqlite3.SQLITE_TRACE_STMT, cFunc(sqliteTraceStmt), 0)
			return nil
		})
	})
}

// sqliteTraceStmt is the trace callback: x is the statement's text (a trigger's is a comment).
func sqliteTraceStmt(_ *libc.TLS, _ uint32, _, _, x uintptr) int32 {
	c := sqliteCounting.Load()
	if c == nil {
		return 0
	}
	text := sqlKey(libc.GoString(x))
	c.queries.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.byText[text]
	if st == nil {
		st = &sqlStat{}
		c.byText[text] = st
	}
	st.n++
	return 0
}

// cFunc is the C function pointer of a Go function as modernc's transpiled C calls it (what
// the driver's own cFuncPointer does: https://golang.org/s/go11func).
func cFunc[T any](f T) uintptr { return *(*uintptr)(unsafe.Pointer(&struct{ f T }{f})) }
