package scheduler

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// cursorInfo answers the ErrorInfo of an OutOfRange cursor error.
func cursorInfo(t *testing.T, err error) map[string]string {
	t.Helper()
	require.Equal(t, codes.OutOfRange, status.Code(err), "%v", err)
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			require.Equal(t, CursorOutOfRange, info.GetReason())
			return info.GetMetadata()
		}
	}
	t.Fatalf("no ErrorInfo in %v", err)
	return nil
}

// firstWatch opens a WatchExecution stream and answers its first message's error (nil when the
// stream serves).
func firstWatch(ctx context.Context, c schedulerv1.SchedulerServiceClient, id string, after int64) error {
	st, err := c.WatchExecution(ctx, &schedulerv1.WatchExecutionRequest{ExecutionId: id, AfterSeq: after, IncludeSnapshots: true})
	if err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

// A cursor beyond the log, or older than the oldest entry the log retains, is OutOfRange with
// the cursor to resume from; a cursor inside it streams.
func TestWatchExecutionCursorOutOfRange(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := setup(t, st)
		e := b.start(t, b.createList(t, diamond("cursor")), nil)
		got, _ := b.execution(t, e.GetId())
		last := got.GetLastSeq()
		require.Positive(t, last)

		err := firstWatch(t.Context(), b.client, e.GetId(), last+5)
		md := cursorInfo(t, err)
		require.Equal(t, fmt.Sprint(last), md["last_seq"])
		require.Contains(t, status.Convert(err).Message(), "beyond the last seq")

		// Retention removed the first entries (no RPC removes log entries today: the test
		// does it in SQL, as a retention job would).
		db := st.(interface{ DB() *sql.DB }).DB()
		_, err = db.ExecContext(t.Context(), fmt.Sprintf(`DELETE FROM task_execution_log WHERE execution_id = '%s' AND seq <= 1`, e.GetId()))
		require.NoError(t, err)
		err = firstWatch(t.Context(), b.client, e.GetId(), 0)
		md = cursorInfo(t, err)
		require.Equal(t, "1", md["oldest_cursor"])
		require.Contains(t, status.Convert(err).Message(), "resume with after_seq 1, the oldest cursor")

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		require.NoError(t, firstWatch(ctx, b.client, e.GetId(), 1), "the oldest cursor streams")
	})
}

// The Scheduler serves at most its watcher limit of WatchExecution streams: one more is
// ResourceExhausted, and a stream that ends frees its slot.
func TestWatchExecutionWatcherLimit(t *testing.T) {
	t.Parallel()
	st := backends["sqlite"](t)
	conn := servertest.Serve(t, server.Config{Name: "scheduler-test", Services: []server.Service{{
		Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: New(st, WithMaxWatchers(2)), Ready: st.Ping}}})
	b := &testBundle{client: schedulerv1.NewSchedulerServiceClient(conn), store: st}
	e := b.start(t, b.createList(t, diamond("watchers")), nil)

	first, cancelFirst := context.WithCancel(t.Context())
	require.NoError(t, firstWatch(first, b.client, e.GetId(), 0))
	second, cancelSecond := context.WithCancel(t.Context())
	defer cancelSecond()
	require.NoError(t, firstWatch(second, b.client, e.GetId(), 0))

	err := firstWatch(t.Context(), b.client, e.GetId(), 0)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "watcher limit")

	cancelFirst()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		return firstWatch(ctx, b.client, e.GetId(), 0) == nil
	}, 10*time.Second, 20*time.Millisecond, "the ended stream's slot is free again")
}
