package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// Two replicas on one Postgres: a change committed by one wakes the other's long polls at once
// (LISTEN/NOTIFY), not at its next poll. Replica A's wake signal is watched directly: nothing on
// A changes anything, so only a notification can fire it.
func TestAnotherReplicasChangeWakesThisReplica(t *testing.T) {
	t.Parallel()
	stA, stB := twoReplicaStores(t)

	a := New(stA, WithWorkDir(t.TempDir()), WithDriverInterval(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a.Start(ctx)
	b := New(stB, WithWorkDir(t.TempDir()))
	conn := servertest.Serve(t, server.Config{Name: "replica-b",
		Services: []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: b, Ready: stB.Ping}}})
	cb := &testBundle{client: schedulerv1.NewSchedulerServiceClient(conn), store: stB}
	list := cb.createList(t, diamond("notified"))

	// The listener is up once a change made before watching has been seen.
	waitListening(t, a, stB)

	woken := a.wake.wait()
	cb.start(t, list, nil) // replica B opens the first wave
	select {
	case <-woken:
	case <-time.After(20 * time.Second):
		t.Fatal("replica A was not woken by replica B's change")
	}
}

// waitListening waits until s's change listener is up: a notification sent through another
// replica's store (from) wakes s's long polls.
func waitListening(t *testing.T, s *Server, from *postgres.Store) {
	t.Helper()
	require.Eventually(t, func() bool {
		woken := s.wake.wait()
		_, err := from.Pool().Exec(t.Context(), `SELECT pg_notify('`+postgres.ChangesChannel+`', 'probe')`)
		require.NoError(t, err)
		select {
		case <-woken:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}, 20*time.Second, time.Millisecond)
}

// twoReplicaStores opens two stores on one fresh Postgres database, as two replicas of the
// Scheduler have (the first migrates it).
func twoReplicaStores(t *testing.T) (*postgres.Store, *postgres.Store) {
	t.Helper()
	dsn := dbtest.Postgres(t)
	a, err := postgres.New(t.Context(), dsn, database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	b, err := postgres.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return a, b
}
