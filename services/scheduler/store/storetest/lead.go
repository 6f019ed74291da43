package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

func testTryLead(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	held, release, err := s.TryLead(ctx, "reaper")
	require.NoError(t, err)
	require.True(t, held)
	again, _, err := s.TryLead(ctx, "reaper")
	require.NoError(t, err)
	require.False(t, again, "held already")
	other, releaseOther, err := s.TryLead(ctx, "driver")
	require.NoError(t, err)
	require.True(t, other, "another name is another leadership")
	releaseOther()

	// Another process: on Postgres a second store on the same database.
	var second store.Store
	if pg, ok := s.(*postgres.Store); ok {
		second, err = postgres.New(ctx, pg.Pool().Config().ConnString())
		require.NoError(t, err)
		t.Cleanup(func() { _ = second.Close() })
		held2, _, err := second.TryLead(ctx, "reaper")
		require.NoError(t, err)
		require.False(t, held2, "held by the first store")
	}

	release()
	release() // twice is fine
	held, release, err = s.TryLead(ctx, "reaper")
	require.NoError(t, err)
	require.True(t, held)
	release()
	if second != nil {
		held2, release2, err := second.TryLead(ctx, "reaper")
		require.NoError(t, err)
		require.True(t, held2)
		held, _, err = s.TryLead(ctx, "reaper")
		require.NoError(t, err)
		require.False(t, held, "held by the second store")
		release2()
	}
}
