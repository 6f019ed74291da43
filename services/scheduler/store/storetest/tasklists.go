package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	harness "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// richSpec is a task list with every field the store keeps set, some of them to values that are
// easy to lose (an empty validation command, an action left unspecified, a trigger glob without a
// command).
func richSpec() *schedulerv1.TaskListSpec {
	return &schedulerv1.TaskListSpec{
		Name:        "Habit Tracker v1",
		Description: "a small app",
		Repository: &schedulerv1.Repository{
			Source:  &schedulerv1.Repository_Url{Url: "https://example.com/habits.git"},
			BaseRef: "main",
		},
		Context: &schedulerv1.ProjectContext{
			SpecFile:  "specs/design.md",
			TasksFile: "specs/tasks.md",
			Conventions: []*schedulerv1.ConventionsSource{
				{Path: "CLAUDE.md", Sections: []string{"API Conventions", "Testing"}},
				{Path: "AGENTS.md"},
			},
			ContextFiles: []string{"README.md", "docs/users.md"},
		},
		Validation: &schedulerv1.ValidationLevels{
			Codebase:        &commonv1.TaskValidation{Command: "go build ./...", Timeout: durationpb.New(90 * time.Second)},
			Api:             &commonv1.TaskValidation{Command: "go test ./api/...", Expected: "ok", ExpectedExitCode: 0},
			ApiTriggerGlobs: []string{"api/**"},
			UiTriggerGlobs:  []string{"web/**", "*.css"},
		},
		DoneCriteria: "# Done\n\n## F1: it works\n",
		Tasks: []*commonv1.Task{
			{
				Id: "1.1", Title: "schema", Action: commonv1.TaskAction_TASK_ACTION_CREATE, File: "db/schema.sql",
				Phase: "database", Priority: 5, Status: commonv1.TaskStatus_TASK_STATUS_COMPLETED,
				Requirements: []string{"one table per entity"}, Steps: []string{"red", "green"},
				Validation:  &commonv1.TaskValidation{Command: "sqlite3 < db/schema.sql", Expected: "exit 0", ExpectedExitCode: 0, Timeout: durationpb.New(2 * time.Minute)},
				Description: "context", CodeTemplate: "CREATE TABLE ...",
			},
			{
				Id: "1.2", Title: "store", File: "store/habits.go", DependsOn: []string{"1.1"},
				Files: []*commonv1.FileImpact{
					{Path: "db/schema.sql", Operation: commonv1.FileOperation_FILE_OPERATION_READ},
					{Path: "store/", Kind: commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY},
					{Path: "store/**/*_test.go", Operation: commonv1.FileOperation_FILE_OPERATION_CREATE},
				},
				Validation: &commonv1.TaskValidation{ExpectedExitCode: 3}, // empty command: still a validation
				Status:     commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR,
			},
			{
				Id: "1.3", Title: "run", Action: commonv1.TaskAction_TASK_ACTION_RUN, Command: "make gen",
				DependsOn: []string{"1.1", "1.2"}, Priority: -3, Status: commonv1.TaskStatus_TASK_STATUS_SKIPPED,
			},
		},
	}
}

// listOf is a small valid list named name.
func listOf(name string, tasks int) *schedulerv1.TaskListSpec {
	spec := &schedulerv1.TaskListSpec{Name: name}
	for i := range tasks {
		t := &commonv1.Task{Id: fmt.Sprintf("t%d", i), Title: "task", File: fmt.Sprintf("f%d.go", i)}
		if i > 0 {
			t.DependsOn = []string{fmt.Sprintf("t%d", i-1)}
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	return spec
}

// pending is spec with its unset task statuses as the store keeps them: PENDING.
func pending(spec *schedulerv1.TaskListSpec) *schedulerv1.TaskListSpec {
	out := proto.CloneOf(spec)
	for _, t := range out.GetTasks() {
		if t.GetStatus() == commonv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
			t.Status = commonv1.TaskStatus_TASK_STATUS_PENDING
		}
	}
	return out
}

// requireSameList checks that two reads of a task list agree.
func requireSameList(t *testing.T, want, got *store.TaskList) {
	t.Helper()
	require.True(t, proto.Equal(want.Spec, got.Spec), "spec:\n%v\nwant:\n%v", got.Spec, want.Spec)
	require.True(t, proto.Equal(want.Source, got.Source), "source: %v, want %v", got.Source, want.Source)
	w, g := *want, *got
	w.Spec, w.Source, g.Spec, g.Source = nil, nil, nil, nil
	require.Equal(t, w, g)
}

// taskListTests is the task-list part of the suite.
var taskListTests = []test{
	{"CreateAndGet", testTaskListCreateAndGet},
	{"ImportSource", testTaskListImportSource},
	{"FileImpacts", testTaskListFileImpacts},
	{"AlreadyExists", testTaskListAlreadyExists},
	{"CreateIsAtomic", testTaskListCreateIsAtomic},
	{"LargeList", testTaskListLargeList},
	{"NotFound", testTaskListNotFound},
	{"ListPages", testTaskListListPages},
	{"ListByName", testTaskListListByName},
	{"Delete", testTaskListDelete},
	{"DeleteRefusedWhileActive", testTaskListDeleteRefusedWhileActive},
}

func testTaskListCreateAndGet(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	spec := richSpec()
	created, err := s.CreateTaskList(t.Context(), "tl-rich", spec, nil)
	require.NoError(t, err)
	require.Equal(t, "tl-rich", created.ID)
	require.True(t, proto.Equal(spec, created.Spec), "stored:\n%v\nwant:\n%v", created.Spec, spec)
	require.Nil(t, created.Source)
	require.EqualValues(t, 3, created.TaskCount)
	require.EqualValues(t, 1, created.CompletedTaskCount)
	require.Empty(t, created.LatestExecutionID)
	require.Zero(t, created.RunCount)
	require.False(t, created.CreateTime.IsZero())
	require.Equal(t, created.CreateTime, created.UpdateTime)

	got, err := s.GetTaskList(t.Context(), "tl-rich", store.ViewFull)
	require.NoError(t, err)
	requireSameList(t, created, got)

	basic, err := s.GetTaskList(t.Context(), "tl-rich", store.ViewBasic)
	require.NoError(t, err)
	require.Empty(t, basic.Spec.GetTasks())
	require.Empty(t, basic.Spec.GetDoneCriteria())
	require.EqualValues(t, 3, basic.TaskCount)
	require.Equal(t, spec.GetRepository().GetUrl(), basic.Spec.GetRepository().GetUrl())
}

func testTaskListImportSource(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	source := &schedulerv1.ImportSource{
		Format:        schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD,
		Path:          "specs/tasks.md",
		WriteBack:     true,
		ContentSha256: strings.Repeat("ab", 32),
	}
	spec := listOf("imported", 2)
	spec.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: "/srv/repos/app"}}
	created, err := s.CreateTaskList(t.Context(), "tl-imported", spec, source)
	require.NoError(t, err)
	require.True(t, proto.Equal(source, created.Source), "%v", created.Source)
	require.True(t, proto.Equal(pending(spec), created.Spec), "%v", created.Spec)
}

func testTaskListFileImpacts(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	_, err := s.CreateTaskList(t.Context(), "tl", richSpec(), nil)
	require.NoError(t, err)
	sqlStore := harness.RequireSQL(t, s)
	rows, err := sqlStore.DB().QueryContext(t.Context(), harness.Rebind(sqlStore.Dialect(), `
		SELECT t.task_key, i.path, i.kind, i.operation, i.source
		FROM task_file_impacts i JOIN tasks t ON t.id = i.task_id
		ORDER BY t.position, i.id`))
	require.NoError(t, err)
	defer rows.Close()
	var got []string
	for rows.Next() {
		var key, path, kind, op, source string
		require.NoError(t, rows.Scan(&key, &path, &kind, &op, &source))
		got = append(got, strings.Join([]string{key, path, kind, op, source}, " "))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"1.1 db/schema.sql file create inferred",
		"1.2 db/schema.sql file read declared",
		"1.2 store/ directory update declared",
		"1.2 store/**/*_test.go glob create declared",
		"1.2 store/habits.go file update inferred",
	}, got)
}

func testTaskListAlreadyExists(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	_, err := s.CreateTaskList(t.Context(), "tl", listOf("first", 2), nil)
	require.NoError(t, err)
	_, err = s.CreateTaskList(t.Context(), "tl", listOf("second", 5), nil)
	require.ErrorIs(t, err, store.ErrAlreadyExists)
	got, err := s.GetTaskList(t.Context(), "tl", store.ViewFull)
	require.NoError(t, err)
	require.Equal(t, "first", got.Spec.GetName())
	require.EqualValues(t, 2, got.TaskCount)
}

func testTaskListCreateIsAtomic(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	// The store trusts tasklist.Validate; a duplicate task key it was not told about fails
	// the insert of the second task, and nothing of the list remains.
	spec := listOf("broken", 3)
	spec.Tasks[2].Id = "t0"
	_, err := s.CreateTaskList(t.Context(), "tl", spec, nil)
	require.Error(t, err)
	_, err = s.GetTaskList(t.Context(), "tl", store.ViewBasic)
	require.ErrorIs(t, err, store.ErrNotFound)
	lists, _, err := s.ListTaskLists(t.Context(), store.ListTaskListsQuery{PageSize: 10})
	require.NoError(t, err)
	require.Empty(t, lists)
}

func testTaskListLargeList(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	// 2,001 tasks: a store that inserts them in chunks has a last chunk of one row.
	spec := listOf("large", 2001)
	created, err := s.CreateTaskList(t.Context(), "tl", spec, nil)
	require.NoError(t, err)
	require.True(t, proto.Equal(pending(spec), created.Spec))
	got, err := s.GetTaskList(t.Context(), "tl", store.ViewFull)
	require.NoError(t, err)
	require.True(t, proto.Equal(pending(spec), got.Spec))
	// Each task's file impact (listOf: task tN writes fN.go) is stored with that task.
	sqlStore := harness.RequireSQL(t, s)
	var impacts, own int
	require.NoError(t, sqlStore.DB().QueryRowContext(t.Context(), harness.Rebind(sqlStore.Dialect(), `
		SELECT count(*), count(*) FILTER (WHERE i.path = 'f' || substr(t.task_key, 2) || '.go')
		FROM task_file_impacts i JOIN tasks t ON t.id = i.task_id WHERE t.task_list_id = 'tl'`)).Scan(&impacts, &own))
	require.Equal(t, 2001, impacts)
	require.Equal(t, 2001, own, "file impacts stored with another task")
}

func testTaskListNotFound(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	_, err := s.GetTaskList(t.Context(), "nope", store.ViewFull)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, s.DeleteTaskList(t.Context(), "nope"), store.ErrNotFound)
}

func testTaskListListPages(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	for i := range 7 {
		_, err := s.CreateTaskList(t.Context(), fmt.Sprintf("tl-%d", i), listOf(fmt.Sprintf("list %d", i), 1+i%3), nil)
		require.NoError(t, err)
	}
	var seen []*store.TaskList
	var after *store.Cursor
	for page := 0; ; page++ {
		require.Less(t, page, 4, "too many pages")
		lists, next, err := s.ListTaskLists(t.Context(), store.ListTaskListsQuery{PageSize: 3, After: after, View: store.ViewBasic})
		require.NoError(t, err)
		seen = append(seen, lists...)
		for _, l := range lists {
			require.Empty(t, l.Spec.GetTasks(), "BASIC")
			require.EqualValues(t, 1+int32(l.ID[3]-'0')%3, l.TaskCount)
		}
		if next == nil {
			require.Len(t, lists, 1)
			break
		}
		require.Len(t, lists, 3)
		after = next
	}
	require.Len(t, seen, 7)
	// Newest first: create time, then id, both descending; every list once.
	require.True(t, slices.IsSortedFunc(seen, func(a, b *store.TaskList) int {
		if c := b.CreateTime.Compare(a.CreateTime); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	}))
	ids := map[string]bool{}
	for _, l := range seen {
		ids[l.ID] = true
	}
	require.Len(t, ids, 7)

	full, _, err := s.ListTaskLists(t.Context(), store.ListTaskListsQuery{PageSize: 100, View: store.ViewFull})
	require.NoError(t, err)
	require.Len(t, full, 7)
	for _, l := range full {
		require.Len(t, l.Spec.GetTasks(), int(l.TaskCount), "FULL")
	}
}

func testTaskListListByName(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	for id, name := range map[string]string{"a": "Überblick Backend", "b": "backend v2", "c": "Frontend"} {
		_, err := s.CreateTaskList(t.Context(), id, listOf(name, 1), nil)
		require.NoError(t, err)
	}
	for needle, want := range map[string][]string{
		"BACKEND": {"a", "b"},
		"üBER":    {"a"},
		"end":     {"a", "b", "c"},
		"nothing": nil,
	} {
		lists, next, err := s.ListTaskLists(t.Context(), store.ListTaskListsQuery{PageSize: 10, NameContains: needle, View: store.ViewBasic})
		require.NoError(t, err)
		require.Nil(t, next)
		var got []string
		for _, l := range lists {
			got = append(got, l.ID)
		}
		slices.Sort(got)
		require.Equal(t, want, got, needle)
	}
}

func testTaskListDelete(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	_, err := s.CreateTaskList(t.Context(), "gone", richSpec(), nil)
	require.NoError(t, err)
	_, err = s.CreateTaskList(t.Context(), "kept", listOf("kept", 2), nil)
	require.NoError(t, err)
	require.NoError(t, s.DeleteTaskList(t.Context(), "gone"))
	_, err = s.GetTaskList(t.Context(), "gone", store.ViewBasic)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, s.DeleteTaskList(t.Context(), "gone"), store.ErrNotFound)

	// Its tasks and impacts went with it; the other list's stayed.
	sqlStore := harness.RequireSQL(t, s)
	var tasks, impacts int
	require.NoError(t, sqlStore.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM tasks`).Scan(&tasks))
	require.NoError(t, sqlStore.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM task_file_impacts`).Scan(&impacts))
	require.Equal(t, 2, tasks)
	require.Equal(t, 2, impacts)
}

func testTaskListDeleteRefusedWhileActive(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	sqlStore := harness.RequireSQL(t, s)
	_, err := s.CreateTaskList(t.Context(), "tl", listOf("busy", 1), nil)
	require.NoError(t, err)

	// A running execution holds the list.
	harness.Exec(t, sqlStore, `INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, status)
		VALUES ('ex1', 'tl', 1, 'running')`)
	require.ErrorIs(t, s.DeleteTaskList(t.Context(), "tl"), store.ErrActive)
	got, err := s.GetTaskList(t.Context(), "tl", store.ViewBasic)
	require.NoError(t, err)
	require.Equal(t, "ex1", got.LatestExecutionID)
	require.EqualValues(t, 1, got.RunCount)

	// So does a feature build in progress, once the execution has ended.
	harness.Exec(t, sqlStore, `UPDATE task_list_execution_runs SET status = 'completed', outcome = 'converged' WHERE execution_id = 'ex1'`)
	harness.Exec(t, sqlStore, `INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, status, outcome)
		VALUES ('ex2', 'tl', 2, 'failed', 'failed')`)
	harness.Exec(t, sqlStore, `INSERT INTO feature_builds (id, feature, task_list_id, loop_key) VALUES ('fb1', 'busy', 'tl', 'k')`)
	require.ErrorIs(t, s.DeleteTaskList(t.Context(), "tl"), store.ErrActive)
	got, err = s.GetTaskList(t.Context(), "tl", store.ViewBasic)
	require.NoError(t, err)
	require.Equal(t, "ex2", got.LatestExecutionID)
	require.EqualValues(t, 2, got.RunCount)

	// When everything has ended, the list goes with its executions; the build stays, unlinked.
	harness.Exec(t, sqlStore, `UPDATE feature_builds SET status = 'CONVERGED' WHERE id = 'fb1'`)
	require.NoError(t, s.DeleteTaskList(t.Context(), "tl"))
	var runs int
	require.NoError(t, sqlStore.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM task_list_execution_runs`).Scan(&runs))
	require.Zero(t, runs)
	var link *string
	require.NoError(t, sqlStore.DB().QueryRowContext(t.Context(), `SELECT task_list_id FROM feature_builds WHERE id = 'fb1'`).Scan(&link))
	require.Nil(t, link)
}
