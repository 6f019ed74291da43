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

// LeadAlive answers nil while the session that took the leadership holds it, and an error once
// that session was terminated (the pool going on working) or the leadership was released.
func TestLeadAliveSeesTheLeadersSessionEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := postgres.New(ctx, dbtest.Postgres(t), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })

	require.Error(t, s.LeadAlive(ctx, "driver"), "not taken yet")
	held, release, err := s.TryLead(ctx, "driver")
	require.NoError(t, err)
	require.True(t, held)
	require.NoError(t, s.LeadAlive(ctx, "driver"))
	require.Error(t, s.LeadAlive(ctx, "another"), "another name is not held")
	release()
	require.Error(t, s.LeadAlive(ctx, "driver"), "released")
	release() // at most once

	held, release, err = s.TryLead(ctx, "driver")
	require.NoError(t, err)
	require.True(t, held)
	defer release()
	require.NoError(t, s.LeadAlive(ctx, "driver"))
	pid, err := s.LeadHolder(ctx, "driver")
	require.NoError(t, err)
	require.NotZero(t, pid)
	_, err = s.Pool().Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.LeadAlive(ctx, "driver") != nil }, 10e9, 50e6)
	require.NoError(t, s.Ping(ctx), "the pool goes on working")
	// The client sees its connection closed before the ended backend has let go of its locks:
	// the leadership is free soon after, not at once (the driver tries again every round).
	release2 := func() {}
	defer func() { release2() }()
	require.Eventually(t, func() bool {
		again, rel, err := s.TryLead(ctx, "driver")
		require.NoError(t, err)
		release2 = rel
		return again
	}, 10e9, 50e6, "the ended session's leadership can be taken again")
	require.NoError(t, s.LeadAlive(ctx, "driver"))
}
