package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// The driver's leadership on Postgres lasts as long as its session: when only that session is
// terminated (the rest of the pool going on working), the leader notices, steps down and takes
// the leadership again on a new session, rather than leading on while nobody holds the lock.
func TestLeaderWhoseSessionEndsStepsDownAndLeadsAgain(t *testing.T) {
	t.Parallel()
	st, err := postgres.New(t.Context(), dbtest.Postgres(t), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	s := New(st, WithWorkDir(t.TempDir()), WithDriverInterval(20*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s.Start(ctx)

	holder := func() int64 {
		pid, err := st.LeadHolder(t.Context(), leaderName)
		require.NoError(t, err)
		return pid
	}
	var first int64
	require.Eventually(t, func() bool { first = holder(); return first != 0 }, 20*time.Second, 10*time.Millisecond)
	_, err = st.Pool().Exec(t.Context(), `SELECT pg_terminate_backend($1)`, first)
	require.NoError(t, err)
	require.Eventually(t, func() bool { now := holder(); return now != 0 && now != first }, 20*time.Second, 10*time.Millisecond,
		"the leader took the leadership again on a new session")
}
