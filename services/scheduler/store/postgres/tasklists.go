package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// taskListColumns are the columns a task list is read with, counts and run numbers included;
// they scan with scanTaskList.
const taskListColumns = `tl.id, tl.name, tl.description, tl.source_format, tl.source_path,
	tl.repository_url, tl.repository_path, tl.base_ref, tl.spec_file, tl.tasks_file,
	tl.conventions_files::text, tl.context_files::text, tl.validation_levels::text,
	tl.done_criteria, tl.metadata::text, tl.created_at, tl.updated_at,
	(SELECT count(*) FROM tasks t WHERE t.task_list_id = tl.id),
	(SELECT count(*) FROM tasks t WHERE t.task_list_id = tl.id AND t.status = 'completed'),
	(SELECT r.execution_id FROM task_list_execution_runs r WHERE r.task_list_id = tl.id ORDER BY r.run_number DESC LIMIT 1),
	(SELECT coalesce(max(r.run_number), 0) FROM task_list_execution_runs r WHERE r.task_list_id = tl.id)`

// taskColumns are the columns a task is read with; they scan with scanTask.
const taskColumns = `task_list_id, task_key, title, description, action, action_declared, file,
	files::text, depends_on::text, phase, priority, requirements::text, steps::text, command,
	code_template, validation_command, validation_expected, validation_expected_exit_code,
	validation_timeout_ms, position, status, requires_signoff`

// CreateTaskList stores a task list with its tasks and file impacts in one transaction. Tasks
// and impacts go in one statement each (unnest over arrays), whatever their number.
func (s *Store) CreateTaskList(ctx context.Context, id string, spec *schedulerv1.TaskListSpec, source *schedulerv1.ImportSource) (*store.TaskList, error) {
	row, tasks, impacts, err := store.EncodeTaskList(id, spec, source)
	if err != nil {
		return nil, err
	}
	var created, updated time.Time
	err = pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO task_lists (id, name, name_folded, description, source_format,
			source_path, repository_url, repository_path, base_ref, spec_file, tasks_file,
			conventions_files, context_files, validation_levels, done_criteria, metadata)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13::jsonb, $14::jsonb, $15, $16::jsonb)
			RETURNING created_at, updated_at`,
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
		if len(tasks) == 0 {
			return nil
		}
		cols := taskArrays(tasks)
		rows, err := tx.Query(ctx, `INSERT INTO tasks (task_list_id, task_key, title, description, action,
			action_declared, file, files, depends_on, phase, priority, requirements, steps, command,
			code_template, validation_command, validation_expected, validation_expected_exit_code,
			validation_timeout_ms, position, status, requires_signoff)
			SELECT $1, t.key, t.title, t.description, t.action, t.declared, t.file, t.files::jsonb,
				t.depends_on::jsonb, t.phase, t.priority, t.requirements::jsonb, t.steps::jsonb,
				t.command, t.code_template, t.vcommand, t.vexpected, t.vexit, t.vtimeout, t.position, t.status,
				t.signoff
			FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::boolean[], $7::text[],
				$8::text[], $9::text[], $10::text[], $11::integer[], $12::text[], $13::text[], $14::text[],
				$15::text[], $16::text[], $17::text[], $18::integer[], $19::bigint[], $20::integer[], $21::text[],
				$22::boolean[])
				AS t(key, title, description, action, declared, file, files, depends_on, phase, priority,
					requirements, steps, command, code_template, vcommand, vexpected, vexit, vtimeout, position, status,
					signoff)
			RETURNING id, position`,
			append([]any{id}, cols...)...)
		if err != nil {
			return fmt.Errorf("insert tasks: %w", err)
		}
		taskIDs := make([]int64, len(tasks))
		for rows.Next() {
			var tid int64
			var pos int32
			if err := rows.Scan(&tid, &pos); err != nil {
				rows.Close()
				return fmt.Errorf("insert tasks: %w", err)
			}
			taskIDs[pos] = tid
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("insert tasks: %w", err)
		}

		var ids []int64
		var paths, kinds, ops, sources []string
		for i, ims := range impacts {
			for _, im := range ims {
				ids = append(ids, taskIDs[i])
				paths, kinds = append(paths, im.Path), append(kinds, im.Kind)
				ops, sources = append(ops, im.Operation), append(sources, im.Source)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO task_file_impacts (task_id, path, kind, operation, source)
			SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[])`,
			ids, paths, kinds, ops, sources); err != nil {
			return fmt.Errorf("insert file impacts: %w", err)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrAlreadyExists) {
			return nil, err
		}
		return nil, fmt.Errorf("scheduler store: create task list %q: %w", id, err)
	}
	tl, err := store.CreatedTaskList(row, tasks, created, updated)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: create task list %q: %w", id, err)
	}
	return tl, nil
}

// taskArrays turns task rows into the column arrays of the tasks insert ($2 to $22).
func taskArrays(tasks []store.TaskRow) []any {
	n := len(tasks)
	keys, titles, descs, actions := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	declared := make([]bool, n)
	files, fileJSON, deps, phases := make([]*string, n), make([]string, n), make([]string, n), make([]string, n)
	priorities, reqs, steps := make([]int32, n), make([]string, n), make([]string, n)
	commands, templates := make([]*string, n), make([]*string, n)
	vcommands, vexpected, vexit, vtimeouts := make([]*string, n), make([]*string, n), make([]int32, n), make([]*int64, n)
	positions, statuses, signoffs := make([]int32, n), make([]string, n), make([]bool, n)
	for i, t := range tasks {
		keys[i], titles[i], descs[i], actions[i], declared[i] = t.Key, t.Title, t.Description, t.Action, t.ActionDeclared
		files[i], fileJSON[i], deps[i], phases[i] = t.File, t.Files, t.DependsOn, t.Phase
		priorities[i], reqs[i], steps[i] = t.Priority, t.Requirements, t.Steps
		commands[i], templates[i] = t.Command, t.CodeTemplate
		vcommands[i], vexpected[i], vexit[i], vtimeouts[i] = t.ValidationCommand, t.ValidationExpected, t.ValidationExpectedExitCode, t.ValidationTimeoutMS
		positions[i], statuses[i], signoffs[i] = t.Position, t.Status, t.RequiresSignoff
	}
	return []any{keys, titles, descs, actions, declared, files, fileJSON, deps, phases, priorities,
		reqs, steps, commands, templates, vcommands, vexpected, vexit, vtimeouts, positions, statuses, signoffs}
}

// GetTaskList reads one task list.
func (s *Store) GetTaskList(ctx context.Context, id string, view store.View) (*store.TaskList, error) {
	rows, err := s.Pool().Query(ctx, `SELECT `+taskListColumns+` FROM task_lists tl WHERE tl.id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: get task list %q: %w", id, err)
	}
	lists, err := s.collect(ctx, rows, view)
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
		args = append(args, q.After.CreateTime, q.After.ID)
		where = append(where, fmt.Sprintf("(tl.created_at, tl.id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	if q.NameContains != "" {
		args = append(args, strings.ToLower(q.NameContains))
		where = append(where, fmt.Sprintf("strpos(tl.name_folded, $%d) > 0", len(args)))
	}
	sql := `SELECT ` + taskListColumns + ` FROM task_lists tl`
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, q.PageSize+1) // one more, to know whether there is a next page
	sql += fmt.Sprintf(` ORDER BY tl.created_at DESC, tl.id DESC LIMIT $%d`, len(args))
	rows, err := s.Pool().Query(ctx, sql, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler store: list task lists: %w", err)
	}
	lists, err := s.collect(ctx, rows, q.View)
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

// collect scans task list rows and, for the FULL view, reads their tasks in one query.
func (s *Store) collect(ctx context.Context, rows pgx.Rows, view store.View) ([]*store.TaskList, error) {
	type scanned struct {
		row                   store.TaskListRow
		created, updated      time.Time
		count, completed, run int32
		latest                *string
	}
	var all []scanned
	for rows.Next() {
		var sc scanned
		r := &sc.row
		var count, completed int64
		if err := rows.Scan(&r.ID, &r.Name, &r.Description, &r.SourceFormat, &r.SourcePath,
			&r.RepositoryURL, &r.RepositoryPath, &r.BaseRef, &r.SpecFile, &r.TasksFile,
			&r.ConventionsFiles, &r.ContextFiles, &r.ValidationLevels, &r.DoneCriteria, &r.Metadata,
			&sc.created, &sc.updated, &count, &completed, &sc.latest, &sc.run); err != nil {
			rows.Close()
			return nil, err
		}
		sc.count, sc.completed = int32(count), int32(completed)
		all = append(all, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	tasks := map[string][]store.TaskRow{}
	if view == store.ViewFull && len(all) > 0 {
		ids := make([]string, len(all))
		for i, sc := range all {
			ids[i] = sc.row.ID
		}
		trows, err := s.Pool().Query(ctx, `SELECT `+taskColumns+` FROM tasks
			WHERE task_list_id = ANY($1) ORDER BY task_list_id, position`, ids)
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
				trows.Close()
				return nil, err
			}
			tasks[list] = append(tasks[list], t)
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
		tl.CreateTime, tl.UpdateTime = sc.created.UTC(), sc.updated.UTC()
		tl.TaskCount, tl.CompletedTaskCount, tl.RunCount = sc.count, sc.completed, sc.run
		if sc.latest != nil {
			tl.LatestExecutionID = *sc.latest
		}
		out[i] = tl
	}
	return out, nil
}

// DeleteTaskList deletes a task list unless one of its executions or feature builds is running.
// The list's row is locked first, so that no execution starts while the check runs.
func (s *Store) DeleteTaskList(ctx context.Context, id string) error {
	err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		var found string
		err := tx.QueryRow(ctx, `SELECT id FROM task_lists WHERE id = $1 FOR UPDATE`, id).Scan(&found)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("task list %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		var active bool
		if err := tx.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM task_list_execution_runs WHERE task_list_id = $1
				AND status IN ('pending', 'running', 'paused'))
			OR EXISTS (SELECT 1 FROM feature_builds WHERE task_list_id = $1 AND status = 'IN_PROGRESS')`,
			id).Scan(&active); err != nil {
			return err
		}
		if active {
			return fmt.Errorf("task list %q: %w", id, store.ErrActive)
		}
		_, err = tx.Exec(ctx, `DELETE FROM task_lists WHERE id = $1`, id)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrActive) {
		return fmt.Errorf("scheduler store: delete task list %q: %w", id, err)
	}
	return err
}
