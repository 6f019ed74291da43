package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// A store's own commits are not announced back to it: the Scheduler has woken its waiters once
// it committed, and a second wake sends every long-polling claim into a transaction that finds
// nothing. Another session's notifications still arrive, in order.
func TestListenSkipsTheStoresOwnCommits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, url := migratedStore(t)
	oneWaveRun(t, s, "list", "t0")

	calls := make(chan string, 64)
	listenCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Listen(listenCtx, func(ended string) { calls <- ended })
	}()
	t.Cleanup(func() { stop(); <-done })

	// Another session: another replica, as Postgres sees it.
	other, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer func() { _ = other.Close(context.Background()) }()
	notify := func(payload string) {
		_, err := other.Exec(ctx, `SELECT pg_notify($1, $2)`, postgres.ChangesChannel, payload)
		require.NoError(t, err)
	}

	// Until the listener is on, notifications are lost: announce until one is heard.
	heard := false
	for !heard {
		notify("probe")
		select {
		case <-calls:
			heard = true
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("the listener never heard another session")
		}
	}

	// This store ends "ex": its commit notifies the channel, from one of its own connections.
	require.NoError(t, s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		e := tx.Execution()
		e.Status, e.Outcome = schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, commonv1.Outcome_OUTCOME_CONVERGED
		return tx.PutExecution(e)
	}))
	// Then another session ends "elsewhere". Notifications are delivered in commit order, so
	// had the store's own been delivered, it would come first.
	// Probes sent before the one heard may still be arriving ("": they end nothing).
	notify("elsewhere ended")
	for got := ""; got == ""; {
		select {
		case got = <-calls:
		case <-ctx.Done():
			t.Fatal("another session's notification never arrived")
		}
		if got != "" {
			require.Equal(t, "elsewhere", got, "the store's own commit was announced back to it")
		}
	}

	// The store's own notifications were sent: a listener on another session hears them.
	_, err = other.Exec(ctx, "LISTEN "+postgres.ChangesChannel)
	require.NoError(t, err)
	require.NoError(t, s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		e := tx.Execution()
		e.CompletedTasks++
		return tx.PutExecution(e)
	}))
	n, err := other.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, "ex ended", n.Payload)
}
