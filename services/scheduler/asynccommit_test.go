package scheduler

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// asyncCommits counts the transactions that commit without waiting for durability: the
// statements setting synchronous_commit off, wherever they are sent.
type asyncCommits struct{ n atomic.Int64 }

func (c *asyncCommits) see(sql string) {
	if strings.Contains(strings.ToLower(sql), "synchronous_commit") {
		c.n.Add(1)
	}
}

func (c *asyncCommits) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.see(d.SQL)
	return ctx
}
func (c *asyncCommits) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *asyncCommits) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *asyncCommits) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.see(d.SQL)
}
func (c *asyncCommits) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// A TASK_STARTED report is an event, not a grant: its transaction (and only it) commits
// asynchronously on Postgres. The claim that granted the lease, a report of anything else, a
// retried report and the completion commit durably.
func TestOnlyTheStartedReportCommitsAsynchronously(t *testing.T) {
	t.Parallel()
	async := &asyncCommits{}
	st, err := postgres.New(t.Context(), dbtest.Postgres(t), database.WithMigrate(), database.WithTracer(async))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	b := runBundle(t, st)
	e := b.start(t, b.createList(t, diamond("async")), nil)

	asyncIn := func(call func()) int64 {
		before := async.n.Load()
		call()
		return async.n.Load() - before
	}
	var c *schedulerv1.ClaimedAssignment
	require.Zero(t, asyncIn(func() { c = b.claim(t, "agent-1", time.Second) }), "a grant commits durably")
	require.NotNil(t, c)
	a := c.GetAssignment()
	report := func(seq int64, events ...commonv1.EventType) {
		req := &schedulerv1.ReportProgressRequest{AssignmentId: a.GetId(), InstanceId: a.GetInstanceId(),
			FencingToken: a.GetFencingToken(), ReportSeq: seq}
		for _, ev := range events {
			req.Events = append(req.Events, &schedulerv1.AgentEvent{EventType: ev, Message: ev.String()})
		}
		_, err := b.client.ReportProgress(t.Context(), req)
		require.NoError(t, err)
	}
	started, info := commonv1.EventType_EVENT_TYPE_TASK_STARTED, commonv1.EventType_EVENT_TYPE_INFO
	require.EqualValues(t, 1, asyncIn(func() { report(1, started) }), "the started report commits asynchronously")
	require.Zero(t, asyncIn(func() { report(1, started) }), "a retried report writes nothing")
	require.Zero(t, asyncIn(func() { report(2, info) }), "another event commits durably")
	require.Zero(t, asyncIn(func() { report(3, started, info) }), "a started event with another commits durably")
	require.Zero(t, asyncIn(func() { report(4) }), "a renewal without events commits durably")
	require.Zero(t, asyncIn(func() {
		_, err := b.complete(t.Context(), c, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.NoError(t, err)
	}), "a completion commits durably")

	// The asynchronous commit is a commit: what it wrote is there for every reader.
	entries, _, _, err := st.ReadLog(t.Context(), store.LogQuery{ExecutionID: e.GetId(), Limit: 1000})
	require.NoError(t, err)
	var seen int
	for _, le := range entries {
		if le.GetEventType() == started && le.GetTaskId() == a.GetTaskId() {
			seen++
		}
	}
	require.Equal(t, 2, seen, "the started events of reports 1 and 3")
}

// Only a report of TASK_STARTED events alone, without a checkpoint, while the lease it extends
// has at least half its length to run, may commit asynchronously: a renewal near expiry must be
// durable (losing it could let the lease run out under a working agent).
func TestStartedOnly(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	lease := 30 * time.Second
	held := func(left time.Duration) *store.Assignment {
		return &store.Assignment{Assignment: &schedulerv1.Assignment{LeaseExpireTime: timestamppb.New(now.Add(left))}}
	}
	ev := func(types ...commonv1.EventType) []*schedulerv1.AgentEvent {
		var out []*schedulerv1.AgentEvent
		for _, t := range types {
			out = append(out, &schedulerv1.AgentEvent{EventType: t})
		}
		return out
	}
	started, info := commonv1.EventType_EVENT_TYPE_TASK_STARTED, commonv1.EventType_EVENT_TYPE_INFO
	for _, tc := range []struct {
		name string
		req  *schedulerv1.ReportProgressRequest
		left time.Duration
		want bool
	}{
		{"started, lease fresh", &schedulerv1.ReportProgressRequest{Events: ev(started)}, lease, true},
		{"started, half the lease left", &schedulerv1.ReportProgressRequest{Events: ev(started)}, lease / 2, true},
		{"started, near expiry", &schedulerv1.ReportProgressRequest{Events: ev(started)}, lease/2 - time.Millisecond, false},
		{"started with a checkpoint", &schedulerv1.ReportProgressRequest{Events: ev(started), Checkpoint: &commonv1.Checkpoint{GitRef: "c"}}, lease, false},
		{"started and info", &schedulerv1.ReportProgressRequest{Events: ev(started, info)}, lease, false},
		{"info", &schedulerv1.ReportProgressRequest{Events: ev(info)}, lease, false},
		{"no events", &schedulerv1.ReportProgressRequest{}, lease, false},
	} {
		require.Equal(t, tc.want, startedOnly(tc.req, held(tc.left), now, lease), tc.name)
	}
}
