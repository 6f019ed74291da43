package scheduler

import (
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/pagetoken"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
	"github.com/converge-dev/converge/services/scheduler/store/sqlite"
)

// rawBackends open a store on a database the test can also reach with plain SQL, and name the
// statement that drops the task_lists table under it.
var rawBackends = []struct {
	name, drop string
	open       func(t *testing.T) (store.Store, *sql.DB)
}{
	{"postgres", "DROP TABLE task_lists CASCADE", func(t *testing.T) (store.Store, *sql.DB) {
		url := dbtest.Postgres(t)
		st, err := postgres.New(t.Context(), url, database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		db, err := sql.Open("pgx", url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return st, db
	}},
	{"sqlite", "DROP TABLE task_lists", func(t *testing.T) (store.Store, *sql.DB) {
		path := dbtest.SQLite(t)
		st, err := sqlite.New(t.Context(), path, database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		db, err := database.OpenSQLite(path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return st, db
	}},
}

func requireInternalNoLeak(t *testing.T, err error) {
	t.Helper()
	requireCode(t, err, codes.Internal)
	msg := status.Convert(err).Message()
	require.Regexp(t, regexp.MustCompile(`^internal error \(request id [0-9a-zA-Z_-]+\)$`), msg)
	for _, leak := range []string{"relation", "table", "column", "SELECT", "SQLSTATE", "/", ".go", "task_lists"} {
		require.False(t, strings.Contains(msg, leak), "message %q leaks %q", msg, leak)
	}
}

// TestUnexpectedErrorIsInternal: a table dropped under the Scheduler is a bug: Internal with the
// request id and no SQL text (the Scheduler used to send the raw error text to the client).
func TestUnexpectedErrorIsInternal(t *testing.T) {
	t.Parallel()
	for _, rb := range rawBackends {
		t.Run(rb.name, func(t *testing.T) {
			t.Parallel()
			st, db := rb.open(t)
			b := setup(t, st)
			_, err := b.client.ListTaskLists(t.Context(), &schedulerv1.ListTaskListsRequest{})
			require.NoError(t, err)
			_, err = db.ExecContext(t.Context(), rb.drop)
			require.NoError(t, err)
			_, err = b.client.ListTaskLists(t.Context(), &schedulerv1.ListTaskListsRequest{})
			requireInternalNoLeak(t, err)
			_, err = b.client.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: smallList()})
			requireInternalNoLeak(t, err)
		})
	}
}

// TestStoreOutageIsUnavailable: a closed store answers Unavailable, without the driver's text.
func TestStoreOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, rb := range rawBackends {
		t.Run(rb.name, func(t *testing.T) {
			t.Parallel()
			st, _ := rb.open(t)
			b := setup(t, st)
			_, err := b.client.ListTaskLists(t.Context(), &schedulerv1.ListTaskListsRequest{})
			require.NoError(t, err)
			require.NoError(t, st.Close())
			_, err = b.client.ListTaskLists(t.Context(), &schedulerv1.ListTaskListsRequest{})
			requireCode(t, err, codes.Unavailable)
			require.NotContains(t, status.Convert(err).Message(), "closed")
			_, err = b.client.GetExecution(t.Context(), &schedulerv1.GetExecutionRequest{ExecutionId: "ex_01JH3V8Q2T5N3X7Y9Z1A2B3C4D"})
			requireCode(t, err, codes.Unavailable)
		})
	}
}

// TestPageTokensAreBoundToFilters: ListTaskLists, ListExecutions and ListAssignments walk every
// item exactly once with a page size of 1, and a token replayed with other filters is
// InvalidArgument on page_token.
func TestPageTokensAreBoundToFilters(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *testBundle) {
		ctx := t.Context()
		var lists, executions []string
		for i := range 3 {
			lists = append(lists, b.createList(t, diamond(fmt.Sprintf("alpha-%d", i))))
			executions = append(executions, b.start(t, lists[i], nil).GetId())
		}
		b.createList(t, diamond("beta"))
		otherFilters := func(err error) {
			t.Helper()
			requireViolations(t, err, map[string]string{"page_token": pagetoken.ReasonOtherFilters})
		}

		var got []string
		var first string
		tl := &schedulerv1.ListTaskListsRequest{NameContains: "alpha", PageSize: 1}
		for {
			res, err := b.client.ListTaskLists(ctx, tl)
			require.NoError(t, err)
			for _, l := range res.GetTaskLists() {
				got = append(got, l.GetId())
			}
			if res.GetNextPageToken() == "" {
				break
			}
			if first == "" {
				first = res.GetNextPageToken()
			}
			tl.PageToken = res.GetNextPageToken()
		}
		require.ElementsMatch(t, lists, got)
		require.Len(t, got, 3)
		_, err := b.client.ListTaskLists(ctx, &schedulerv1.ListTaskListsRequest{NameContains: "beta", PageSize: 1, PageToken: first})
		otherFilters(err)

		got, first = nil, ""
		ex := &schedulerv1.ListExecutionsRequest{PageSize: 1}
		for {
			res, err := b.client.ListExecutions(ctx, ex)
			require.NoError(t, err)
			for _, e := range res.GetExecutions() {
				got = append(got, e.GetId())
			}
			if res.GetNextPageToken() == "" {
				break
			}
			if first == "" {
				first = res.GetNextPageToken()
			}
			ex.PageToken = res.GetNextPageToken()
		}
		require.ElementsMatch(t, executions, got)
		require.Len(t, got, 3)
		_, err = b.client.ListExecutions(ctx, &schedulerv1.ListExecutionsRequest{PageSize: 1, PageToken: first,
			Statuses: []schedulerv1.ExecutionStatus{schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING}})
		otherFilters(err)
		_, err = b.client.ListExecutions(ctx, &schedulerv1.ListExecutionsRequest{PageSize: 1, PageToken: first, TaskListId: lists[0]})
		otherFilters(err)

		got, first = nil, ""
		as := &schedulerv1.ListAssignmentsRequest{ExecutionId: executions[0], PageSize: 1}
		for {
			res, err := b.client.ListAssignments(ctx, as)
			require.NoError(t, err)
			for _, a := range res.GetAssignments() {
				got = append(got, a.GetTaskId())
			}
			if res.GetNextPageToken() == "" {
				break
			}
			if first == "" {
				first = res.GetNextPageToken()
			}
			as.PageToken = res.GetNextPageToken()
		}
		require.ElementsMatch(t, []string{"A", "B", "C", "D"}, got)
		_, err = b.client.ListAssignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: executions[1], PageSize: 1, PageToken: first})
		otherFilters(err)
		_, err = b.client.ListAssignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: executions[0], TaskId: "A", PageSize: 1, PageToken: first})
		otherFilters(err)
		_, err = b.client.ListAssignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: executions[0], PageToken: "3"})
		requireViolations(t, err, map[string]string{"page_token": pagetoken.ReasonMalformed})
	})
}
