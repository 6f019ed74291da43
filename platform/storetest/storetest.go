// Package storetest runs a service's store conformance suite against every backend of the
// store, and gives suites the pieces they share for checking a SQL schema.
//
// Each service has one store interface and one suite for it (services/<svc>/store/storetest).
// The suite is written once, against the interface; [Run] runs it as a subtest per backend, so
// Postgres, SQLite and, later, Redis and in-process backends are held to the same behaviour:
//
//	func TestConformance(t *testing.T) {
//		t.Parallel()
//		storetest.Run(t, []storetest.Backend[store.Store]{
//			storetest.PostgresBackend(func(ctx context.Context, url string) (store.Store, error) {
//				return postgres.New(ctx, url, database.WithMigrate())
//			}),
//			storetest.SQLiteBackend(func(ctx context.Context, path string) (store.Store, error) {
//				return sqlite.New(ctx, path, database.WithMigrate())
//			}),
//		}, suite.Run)
//	}
//
// A case that does not apply to a backend skips with the reason (e.g. [RequireSQL] skips schema
// checks for backends without SQL).
package storetest

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database/dbtest"
)

// Backend is one implementation of the store interface S under test.
type Backend[S any] struct {
	// Name names the backend's subtest: "postgres", "sqlite", ...
	Name string
	// New returns a new store of its own, empty and ready (migrated), for one test. It fails t
	// if it cannot, and closes the store when t ends.
	New func(t *testing.T) S
}

// Run runs suite once per backend, as parallel subtests named after the backends. newStore
// gives the suite as many fresh stores of the backend as it asks for.
func Run[S any](t *testing.T, backends []Backend[S], suite func(t *testing.T, newStore func(t *testing.T) S)) {
	t.Helper()
	require.NotEmpty(t, backends, "no backends to run the suite against")
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			suite(t, b.New)
		})
	}
}

// PostgresBackend is the "postgres" backend whose stores open opens on a database of their own,
// created by [dbtest.Postgres] and dropped when the test ends.
func PostgresBackend[S io.Closer](open func(ctx context.Context, url string) (S, error)) Backend[S] {
	return Backend[S]{
		Name: "postgres",
		New: func(t *testing.T) S {
			t.Helper()
			return openStore(t, open, dbtest.Postgres(t))
		},
	}
}

// SQLiteBackend is the "sqlite" backend whose stores open opens on a file of their own in the
// test's temporary directory ([dbtest.SQLite]).
func SQLiteBackend[S io.Closer](open func(ctx context.Context, path string) (S, error)) Backend[S] {
	return Backend[S]{
		Name: "sqlite",
		New: func(t *testing.T) S {
			t.Helper()
			return openStore(t, open, dbtest.SQLite(t))
		},
	}
}

func openStore[S io.Closer](t *testing.T, open func(ctx context.Context, target string) (S, error), target string) S {
	t.Helper()
	s, err := open(t.Context(), target)
	require.NoError(t, err, "open store")
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Pinger is what [RequirePingAndClose] needs of a store; every store interface has it.
type Pinger interface {
	// Ping reports whether the store can serve requests.
	Ping(ctx context.Context) error
	// Close releases the store.
	Close() error
}

// RequirePingAndClose checks that a new store answers Ping, and that once closed it does not
// (a closed store must never look healthy) and Close may be called again.
func RequirePingAndClose[S Pinger](t *testing.T, newStore func(t *testing.T) S) {
	t.Helper()
	s := newStore(t)
	require.NoError(t, s.Ping(t.Context()), "ping of an open store")
	require.NoError(t, s.Close(), "close")
	require.Error(t, s.Ping(t.Context()), "ping of a closed store must fail")
	_ = s.Close() // a second Close must not panic (the backend's t.Cleanup closes it again too)
}
