package database

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrUnavailable matches (errors.Is) every error that means a store could not answer now: it
// could not be reached, was shutting down or starting, was out of connections, or too busy. The
// request may be retried; it is not a bug. Services answer it Unavailable (platform/grpcerr).
var ErrUnavailable = errors.New("store unavailable")

// UnavailableError marks Err as a store that could not answer (see [ErrUnavailable]). Stores
// wrap the errors they recognise in it; [IsUnavailable] also recognises the drivers' errors
// directly.
type UnavailableError struct {
	Err error
}

func (e *UnavailableError) Error() string {
	if e.Err == nil {
		return ErrUnavailable.Error()
	}
	return "store unavailable: " + e.Err.Error()
}

// Unwrap answers the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// MarkUnavailable returns err wrapped in *UnavailableError when [IsUnavailable] recognises it,
// else err unchanged (nil stays nil).
func MarkUnavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !IsUnavailable(err) {
		return err
	}
	return &UnavailableError{Err: err}
}

// IsUnavailable reports whether err means the store could not answer now, for Postgres (pgx,
// directly or through database/sql), SQLite (modernc.org/sqlite) and Redis (go-redis):
//
//   - any error marked [ErrUnavailable];
//   - Postgres: a failed connect (*pgconn.ConnectError, which covers a refused connection and a
//     context deadline while connecting), a timeout, a connection cut mid-request, a closed pool
//     or connection, SQLSTATE classes 08 (connection exception), 53 (insufficient resources),
//     57P (admin shutdown, crash shutdown, cannot connect now) and 40 (serialisation failure,
//     deadlock: retry);
//   - SQLite: SQLITE_BUSY or SQLITE_LOCKED past the busy timeout, SQLITE_CANTOPEN, a closed
//     database;
//   - Redis: the replies of a server that cannot serve now (LOADING, BUSY, MASTERDOWN, READONLY,
//     CLUSTERDOWN, TRYAGAIN, OOM, NOREPLICAS), a closed client, a pool timeout;
//   - any network error: connection refused or reset, a dial or read that timed out, EOF in the
//     middle of a reply.
//
// The caller's own context being cancelled or past its deadline is not an outage: errors that
// are only context.Canceled or context.DeadlineExceeded answer false.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	var (
		connectErr *pgconn.ConnectError
		pgErr      *pgconn.PgError
		sqliteErr  *sqlite.Error
		netErr     net.Error
		redisErr   redisReply
	)
	switch {
	case errors.As(err, &connectErr):
		return true
	case errors.As(err, &pgErr):
		c := pgErr.Code
		return strings.HasPrefix(c, "08") || strings.HasPrefix(c, "53") || strings.HasPrefix(c, "57P") || strings.HasPrefix(c, "40")
	case errors.As(err, &sqliteErr):
		switch sqliteErr.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN:
			return true
		}
		return false
	case errors.As(err, &redisErr):
		msg := redisErr.Error()
		for _, p := range redisUnavailableReplies {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.As(err, &netErr), pgconn.Timeout(err), errors.Is(err, pgx.ErrTxClosed), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	msg := err.Error()
	for _, m := range closedMessages {
		if strings.HasSuffix(msg, m) {
			return true
		}
	}
	return false
}

// redisReply is go-redis's redis.Error: an error reply of the server (this package does not
// import go-redis).
type redisReply interface {
	error
	RedisError()
}

// redisUnavailableReplies start the error replies of a Redis that cannot serve now: loading its
// data, busy with a script, a replica or a cluster in flux, out of memory.
var redisUnavailableReplies = []string{"LOADING", "BUSY", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "OOM", "NOREPLICAS"}

// closedMessages end the messages of drivers' errors that have no type: a closed pgx pool or
// connection, a closed database/sql database, a closed go-redis client or pool, a go-redis pool
// with no free connection in time.
var closedMessages = []string{
	"closed pool",
	"conn closed",
	"sql: database is closed",
	"redis: client is closed",
	"redis: connection pool timeout",
}
