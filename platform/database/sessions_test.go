package database_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
)

// Sessions holds the backend ids of exactly the pool's open connections: each one once it has
// connected (as Postgres itself reports it), none once the pool has closed it or a caller has
// taken it out of the pool and forgotten it.
func TestSessionsAreThePoolsOpenConnections(t *testing.T) {
	t.Parallel()
	s := database.NewSessions()
	pool, err := database.OpenPostgres(t.Context(), dbtest.Postgres(t), database.WithSessions(s))
	require.NoError(t, err)
	defer pool.Close()

	conns := make([]*pgxpool.Conn, 3)
	for i := range conns {
		conns[i], err = pool.Acquire(t.Context())
		require.NoError(t, err)
		var pid uint32
		require.NoError(t, conns[i].QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid))
		require.True(t, s.Has(pid), "connection %d's backend %d", i, pid)
	}
	require.Equal(t, 3, s.Len())
	require.False(t, s.Has(0))

	// Taken out of the pool: the caller forgets it.
	hijacked := conns[0].Hijack()
	s.Forget(hijacked.PgConn().PID())
	require.NoError(t, hijacked.Close(t.Context()))
	require.False(t, s.Has(hijacked.PgConn().PID()))
	require.Equal(t, 2, s.Len())

	// Closed by the pool.
	gone := conns[1].Conn().PgConn().PID()
	for _, c := range conns[1:] {
		c.Release()
	}
	pool.Reset()
	require.Eventually(t, func() bool { return s.Len() == 0 }, 10*time.Second, 10*time.Millisecond)
	require.False(t, s.Has(gone))
}
