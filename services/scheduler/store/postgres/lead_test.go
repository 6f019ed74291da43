package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// LeadHolder names the session holding a leadership; when that session is terminated the
// leadership is free (LeadHolder 0) although the store's pool goes on working, and another
// session can take it.
func TestLeadHolderSeesTheLeadersSessionEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := postgres.New(ctx, dbtest.Postgres(t), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })

	pid, err := s.LeadHolder(ctx, "driver")
	require.NoError(t, err)
	require.Zero(t, pid, "nobody leads yet")
	held, release, err := s.TryLead(ctx, "driver")
	require.NoError(t, err)
	require.True(t, held)
	defer release()
	pid, err = s.LeadHolder(ctx, "driver")
	require.NoError(t, err)
	require.NotZero(t, pid)
	other, err := s.LeadHolder(ctx, "another")
	require.NoError(t, err)
	require.Zero(t, other, "another name is not held")

	// The leader's session ends (as when Postgres cuts it): the leadership is free.
	_, err = s.Pool().Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		now, err := s.LeadHolder(ctx, "driver")
		return err == nil && now == 0
	}, 10e9, 50e6)
	again, release2, err := s.TryLead(ctx, "driver")
	require.NoError(t, err)
	require.True(t, again, "a free leadership can be taken again")
	defer release2()
	pid2, err := s.LeadHolder(ctx, "driver")
	require.NoError(t, err)
	require.NotZero(t, pid2)
	require.NotEqual(t, pid, pid2)
}
