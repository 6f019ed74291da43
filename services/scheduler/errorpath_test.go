package scheduler

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/grpcerr/grpcerrtest"
	"github.com/converge-dev/converge/platform/pagetoken/pagetokentest"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
	"github.com/converge-dev/converge/services/scheduler/store/sqlite"
)

// TestUnexpectedErrorIsInternal: a table dropped under the Scheduler is a bug: Internal with the
// request id and no SQL text (the Scheduler used to send the raw error text to the client).
func TestUnexpectedErrorIsInternal(t *testing.T) {
	t.Parallel()
	dbtest.ForEachDialect(t, postgres.New, sqlite.New, func(t *testing.T, dialect database.Dialect, st store.Store, db *sql.DB) {
		b := setup(t, st)
		drop := map[database.Dialect]string{database.DialectPostgres: "DROP TABLE task_lists CASCADE", database.DialectSQLite: "DROP TABLE task_lists"}
		_, err := db.ExecContext(t.Context(), drop[dialect])
		require.NoError(t, err)
		_, err = b.client.ListTaskLists(t.Context(), &schedulerv1.ListTaskListsRequest{})
		grpcerrtest.RequireInternal(t, err)
		_, err = b.client.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: smallList()})
		grpcerrtest.RequireInternal(t, err)
	})
}

// TestStoreOutageIsUnavailable: a closed store answers Unavailable, without the driver's text.
func TestStoreOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	dbtest.ForEachDialect(t, postgres.New, sqlite.New, func(t *testing.T, _ database.Dialect, st store.Store, _ *sql.DB) {
		b := setup(t, st)
		_, err := b.client.ListTaskLists(t.Context(), &schedulerv1.ListTaskListsRequest{}) // the service has been ready
		require.NoError(t, err)
		require.NoError(t, st.Close())
		_, err = b.client.ListTaskLists(t.Context(), &schedulerv1.ListTaskListsRequest{})
		grpcerrtest.RequireUnavailable(t, err)
		_, err = b.client.GetExecution(t.Context(), &schedulerv1.GetExecutionRequest{ExecutionId: "ex_01JH3V8Q2T5N3X7Y9Z1A2B3C4D"})
		grpcerrtest.RequireUnavailable(t, err)
	})
}

// TestPageTokensAreBoundToFilters: ListTaskLists, ListExecutions and ListAssignments walk every
// item exactly once with a page size of 1, and a token replayed with other filters is
// InvalidArgument on page_token.
func TestPageTokensAreBoundToFilters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := setup(t, st)
		ctx := t.Context()
		var lists, executions []string
		for i := range 3 {
			lists = append(lists, b.createList(t, diamond(fmt.Sprintf("alpha-%d", i))))
			executions = append(executions, b.start(t, lists[i], nil).GetId())
		}
		b.createList(t, diamond("beta"))

		got, token := pagetokentest.Walk(t, func(tok string) (ids []string, next string) {
			res, err := b.client.ListTaskLists(ctx, &schedulerv1.ListTaskListsRequest{NameContains: "alpha", PageSize: 1, PageToken: tok})
			require.NoError(t, err)
			for _, l := range res.GetTaskLists() {
				ids = append(ids, l.GetId())
			}
			return ids, res.GetNextPageToken()
		})
		require.ElementsMatch(t, lists, got)
		_, err := b.client.ListTaskLists(ctx, &schedulerv1.ListTaskListsRequest{NameContains: "beta", PageSize: 1, PageToken: token})
		pagetokentest.RequireOtherFilters(t, err)

		got, token = pagetokentest.Walk(t, func(tok string) (ids []string, next string) {
			res, err := b.client.ListExecutions(ctx, &schedulerv1.ListExecutionsRequest{PageSize: 1, PageToken: tok})
			require.NoError(t, err)
			for _, e := range res.GetExecutions() {
				ids = append(ids, e.GetId())
			}
			return ids, res.GetNextPageToken()
		})
		require.ElementsMatch(t, executions, got)
		_, err = b.client.ListExecutions(ctx, &schedulerv1.ListExecutionsRequest{PageSize: 1, PageToken: token,
			Statuses: []schedulerv1.ExecutionStatus{schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING}})
		pagetokentest.RequireOtherFilters(t, err)
		_, err = b.client.ListExecutions(ctx, &schedulerv1.ListExecutionsRequest{PageSize: 1, PageToken: token, TaskListId: lists[0]})
		pagetokentest.RequireOtherFilters(t, err)

		got, token = pagetokentest.Walk(t, func(tok string) (ids []string, next string) {
			res, err := b.client.ListAssignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: executions[0], PageSize: 1, PageToken: tok})
			require.NoError(t, err)
			for _, a := range res.GetAssignments() {
				ids = append(ids, a.GetTaskId())
			}
			return ids, res.GetNextPageToken()
		})
		require.ElementsMatch(t, []string{"A", "B", "C", "D"}, got)
		_, err = b.client.ListAssignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: executions[1], PageSize: 1, PageToken: token})
		pagetokentest.RequireOtherFilters(t, err)
		_, err = b.client.ListAssignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: executions[0], TaskId: "A", PageSize: 1, PageToken: token})
		pagetokentest.RequireOtherFilters(t, err)
		_, err = b.client.ListAssignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: executions[0], PageToken: "3"}) // the former bare offset
		pagetokentest.RequireMalformed(t, err)
	})
}
