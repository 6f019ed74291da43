package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// taskListColumns are the columns a task list is read with, counts and run numbers included;
// they scan with collect.
const taskListColumns = `tl.id, tl.name, tl.description, tl.source_format, tl.source_path,
	tl.repository_url, tl.repository_path, tl.base_ref, tl.spec_file, tl.tasks_file,
	tl.conventions_files, tl.context_files, tl.validation_levels,
	tl.done_criteria, tl.metadata, tl.created_at, tl.updated_at,
	(SELECT count(*) FROM tasks t WHERE t.task_list_id = tl.id),
	(SELECT count(*) FROM tasks t WHERE t.task_list_id = tl.id AND t.status = 'completed'),
	(SELECT r.execution_id FROM task_list_execution_runs r WHERE r.task_list_id = tl.id ORDER BY r.run_number DESC LIMIT 1),
	(SELECT coalesce(max(r.run_number), 0) FROM task_list_execution_runs r WHERE r.task_list_id = tl.id)`

// taskColumns are the columns a task is read with.
const taskColumns = `task_list_id, task_key, title, description, action, action_declared, file,
	files, depends_on, phase, priority, requirements, steps, command, code_template,
	validation_command, validation_expected, validation_expected_exit_code, validation_timeout_ms,
	position, status, requires_signoff`

// CreateTaskList stores a task list with its tasks and file impacts in one transaction, with a
// prepared statement per table.
func (s *Store) CreateTaskList(ctx context.Context, id string, spec *schedulerv1.TaskListSpec, source *schedulerv1.ImportSource) (*store.TaskList, error) {
	row, tasks, impacts, err := store.EncodeTaskList(id, spec, source)
	if err != nil {
		return nil, err
	}
	var created, updated string
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `INSERT INTO task_lists (id, name, name_folded, description, source_format,
			source_path, repository_url, repository_path, base_ref, spec_file, tasks_file,
			conventions_files, context_files, validation_levels, done_criteria, metadata)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING created_at, updated_at`,
			row.ID, row.Name, row.NameFolded, row.Description, row.SourceFormat, row.SourcePath,
			row.RepositoryURL, row.RepositoryPath, row.BaseRef, row.SpecFile, row.TasksFile,
			row.ConventionsFiles, row.ContextFiles, row.ValidationLevels, row.DoneCriteria, row.Metadata).
			Scan(&created, &updated)
		if database.ViolationOf(err) == database.UniqueViolation {
			return fmt.Errorf("task list %q: %w", id, store.ErrAlreadyExists)
		}
		if err != nil {
			return fmt.Errorf("insert task list: %w", err)
		}
		// The tasks in multi-row INSERTs (insertRows' chunks), each answering its rows' ids by
		// key (the order of RETURNING's rows is not defined), then their file impacts likewise.
		ids := make(map[string]int64, len(tasks))
		var args []any
		rest := tasks
		for _, k := range chunkSizes(len(tasks)) {
			chunk := rest[:k]
			args = args[:0]
			for _, t := range chunk {
				args = append(args, id, t.Key, t.Title, t.Description, t.Action, t.ActionDeclared,
					t.File, t.Files, t.DependsOn, t.Phase, t.Priority, t.Requirements, t.Steps, t.Command,
					t.CodeTemplate, t.ValidationCommand, t.ValidationExpected, t.ValidationExpectedExitCode,
					t.ValidationTimeoutMS, t.Position, t.Status, t.RequiresSignoff)
			}
			if err := insertReturningIDs(ctx, tx, multiRowSQL(insertTasksSQL, taskTuple, ` RETURNING task_key, id`, k), args, ids); err != nil {
				return fmt.Errorf("insert tasks %q to %q: %w", chunk[0].Key, chunk[k-1].Key, err)
			}
			rest = rest[k:]
		}
		var rows []impactRow
		for i, t := range tasks {
			taskID, ok := ids[t.Key]
			if !ok {
				return fmt.Errorf("insert task %q: no id returned", t.Key)
			}
			for _, im := range impacts[i] {
				rows = append(rows, impactRow{taskID: taskID, key: t.Key, path: im.Path, kind: im.Kind, operation: im.Operation, source: im.Source})
			}
		}
		return insertRows(ctx, tx, "file impacts", insertImpactsSQL, impactTuple, rows,
			func(r impactRow) string { return r.key + " " + r.path },
			func(r impactRow) []any { return []any{r.taskID, r.path, r.kind, r.operation, r.source} })
	})
	if err != nil {
		if errors.Is(err, store.ErrAlreadyExists) {
			return nil, err
		}
		return nil, fmt.Errorf("scheduler store: create task list %q: %w", id, err)
	}
	createTime, err := database.ParseSQLiteTime(created)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: create task list %q: %w", id, err)
	}
	updateTime, err := database.ParseSQLiteTime(updated)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: create task list %q: %w", id, err)
	}
	tl, err := store.CreatedTaskList(row, tasks, createTime, updateTime)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: create task list %q: %w", id, err)
	}
	return tl, nil
}

// inTx runs f in a transaction (BEGIN IMMEDIATE: it holds the write lock), committed when f
// returns nil.
func (s *Store) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// GetTaskList reads one task list.
func (s *Store) GetTaskList(ctx context.Context, id string, view store.View) (*store.TaskList, error) {
	lists, err := s.query(ctx, view, `SELECT `+taskListColumns+` FROM task_lists tl WHERE tl.id = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: get task list %q: %w", id, err)
	}
	if len(lists) == 0 {
		return nil, fmt.Errorf("task list %q: %w", id, store.ErrNotFound)
	}
	return lists[0], nil
}

// ListTaskLists reads a page of task lists, newest first.
func (s *Store) ListTaskLists(ctx context.Context, q store.ListTaskListsQuery) ([]*store.TaskList, *store.Cursor, error) {
	var where []string
	var args []any
	if q.After != nil {
		where = append(where, "(tl.created_at, tl.id) < (?, ?)")
		args = append(args, database.FormatSQLiteTime(q.After.CreateTime), q.After.ID)
	}
	if q.NameContains != "" {
		where = append(where, "instr(tl.name_folded, ?) > 0")
		args = append(args, strings.ToLower(q.NameContains))
	}
	query := `SELECT ` + taskListColumns + ` FROM task_lists tl`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY tl.created_at DESC, tl.id DESC LIMIT ?`
	args = append(args, q.PageSize+1) // one more, to know whether there is a next page
	lists, err := s.query(ctx, q.View, query, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler store: list task lists: %w", err)
	}
	var next *store.Cursor
	if len(lists) > q.PageSize {
		lists = lists[:q.PageSize]
		last := lists[len(lists)-1]
		next = &store.Cursor{CreateTime: last.CreateTime, ID: last.ID}
	}
	return lists, next, nil
}

// query reads task lists and, for the FULL view, their tasks in one more query.
func (s *Store) query(ctx context.Context, view store.View, query string, args ...any) ([]*store.TaskList, error) {
	type scanned struct {
		row                   store.TaskListRow
		created, updated      string
		count, completed, run int32
		latest                *string
	}
	rows, err := s.DB().QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var all []scanned
	for rows.Next() {
		var sc scanned
		r := &sc.row
		if err := rows.Scan(&r.ID, &r.Name, &r.Description, &r.SourceFormat, &r.SourcePath,
			&r.RepositoryURL, &r.RepositoryPath, &r.BaseRef, &r.SpecFile, &r.TasksFile,
			&r.ConventionsFiles, &r.ContextFiles, &r.ValidationLevels, &r.DoneCriteria, &r.Metadata,
			&sc.created, &sc.updated, &sc.count, &sc.completed, &sc.latest, &sc.run); err != nil {
			_ = rows.Close()
			return nil, err
		}
		all = append(all, sc)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	tasks := map[string][]store.TaskRow{}
	if view == store.ViewFull && len(all) > 0 {
		ids := make([]any, len(all))
		for i, sc := range all {
			ids[i] = sc.row.ID
		}
		trows, err := s.DB().QueryContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE task_list_id IN (?`+
			strings.Repeat(", ?", len(ids)-1)+`) ORDER BY task_list_id, position`, ids...)
		if err != nil {
			return nil, err
		}
		for trows.Next() {
			var list string
			var t store.TaskRow
			if err := trows.Scan(&list, &t.Key, &t.Title, &t.Description, &t.Action, &t.ActionDeclared, &t.File,
				&t.Files, &t.DependsOn, &t.Phase, &t.Priority, &t.Requirements, &t.Steps, &t.Command,
				&t.CodeTemplate, &t.ValidationCommand, &t.ValidationExpected, &t.ValidationExpectedExitCode,
				&t.ValidationTimeoutMS, &t.Position, &t.Status, &t.RequiresSignoff); err != nil {
				_ = trows.Close()
				return nil, err
			}
			tasks[list] = append(tasks[list], t)
		}
		if err := trows.Close(); err != nil {
			return nil, err
		}
		if err := trows.Err(); err != nil {
			return nil, err
		}
	}

	out := make([]*store.TaskList, len(all))
	for i, sc := range all {
		if view == store.ViewBasic {
			sc.row.DoneCriteria = ""
		}
		tl, err := store.DecodeTaskList(sc.row, tasks[sc.row.ID])
		if err != nil {
			return nil, err
		}
		if tl.CreateTime, err = database.ParseSQLiteTime(sc.created); err != nil {
			return nil, err
		}
		if tl.UpdateTime, err = database.ParseSQLiteTime(sc.updated); err != nil {
			return nil, err
		}
		tl.TaskCount, tl.CompletedTaskCount, tl.RunCount = sc.count, sc.completed, sc.run
		if sc.latest != nil {
			tl.LatestExecutionID = *sc.latest
		}
		out[i] = tl
	}
	return out, nil
}

// DeleteTaskList deletes a task list unless one of its executions or feature builds is running.
// The transaction holds SQLite's write lock from its start, so nothing starts meanwhile.
func (s *Store) DeleteTaskList(ctx context.Context, id string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var found string
		err := tx.QueryRowContext(ctx, `SELECT id FROM task_lists WHERE id = ?`, id).Scan(&found)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task list %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		var active bool
		if err := tx.QueryRowContext(ctx, `SELECT
			EXISTS (SELECT 1 FROM task_list_execution_runs WHERE task_list_id = ?
				AND status IN ('pending', 'running', 'paused'))
			OR EXISTS (SELECT 1 FROM feature_builds WHERE task_list_id = ? AND status = 'IN_PROGRESS')`,
			id, id).Scan(&active); err != nil {
			return err
		}
		if active {
			return fmt.Errorf("task list %q: %w", id, store.ErrActive)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM task_lists WHERE id = ?`, id)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrActive) {
		return fmt.Errorf("scheduler store: delete task list %q: %w", id, err)
	}
	return err
}

const (
	insertTasksSQL = `INSERT INTO tasks (task_list_id, task_key, title,
	description, action, action_declared, file, files, depends_on, phase, priority, requirements,
	steps, command, code_template, validation_command, validation_expected,
	validation_expected_exit_code, validation_timeout_ms, position, status, requires_signoff)
	VALUES `
	taskTuple        = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insertImpactsSQL = `INSERT INTO task_file_impacts (task_id, path, kind, operation, source) VALUES `
	impactTuple      = `(?, ?, ?, ?, ?)`
)

// impactRow is a task's file impact with the task's row id, as stored.
type impactRow struct {
	taskID                             int64
	key, path, kind, operation, source string
}

// insertReturningIDs runs a multi-row INSERT … RETURNING key, id and adds each row's id to ids.
func insertReturningIDs(ctx context.Context, tx querier, query string, args []any, ids map[string]int64) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var id int64
		if err := rows.Scan(&key, &id); err != nil {
			return err
		}
		ids[key] = id
	}
	return rows.Err()
}
