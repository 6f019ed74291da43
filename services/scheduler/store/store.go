// Package store is the Scheduler's storage: the [Store] interface its backends implement
// (postgres for production, sqlite embedded) and the SQL migrations they apply.
//
// The Scheduler owns its tables, and no other service reads or writes them: task lists, tasks and
// their file impacts, execution runs, waves, assignments, the execution log, checkpoints and
// feature builds. The conformance suite in ./storetest holds every backend to the same behaviour.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
)

// Service is the name the Scheduler's migrations are recorded under (version table
// converge_scheduler_migrations) and the suffix of its Postgres application_name.
const Service = "scheduler"

// migrations holds migrations/<dialect>/NNNN_name.sql, goose-annotated.
//
//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrations embed.FS

// Migrations returns the Scheduler's migration files for dialect d, NNNN_name.sql at the root
// of the returned file system. It panics for a dialect without migrations, a programming error.
func Migrations(d database.Dialect) fs.FS {
	switch d {
	case database.DialectPostgres, database.DialectSQLite:
		sub, err := fs.Sub(migrations, "migrations/"+string(d))
		if err != nil {
			panic(fmt.Sprintf("store: migrations for %s: %v", d, err))
		}
		return sub
	default:
		panic(fmt.Sprintf("store: no migrations for dialect %q", d))
	}
}

// Store is the Scheduler's durable state. The methods that read and write it come with the
// features that need them; every backend implements all of them and passes ./storetest.
type Store interface {
	// Ping reports whether the store can serve requests. The server's health is NOT_SERVING
	// until it succeeds, and a closed store fails it.
	Ping(ctx context.Context) error
	// Close releases the store's connections. It may be called more than once.
	Close() error

	// CreateTaskList stores a task list that passed tasklist.Validate under id, in one
	// transaction: the list, its tasks in order, and each task's resolved file impacts
	// (tasklist.Impacts). source is nil for a list given inline. A task status left
	// UNSPECIFIED is stored as PENDING. It returns the list as stored (FULL). ErrAlreadyExists
	// when id is taken; then nothing is stored.
	CreateTaskList(ctx context.Context, id string, spec *schedulerv1.TaskListSpec, source *schedulerv1.ImportSource) (*TaskList, error)
	// GetTaskList returns one task list; ViewBasic leaves out the tasks and the done-criteria.
	// ErrNotFound when it does not exist.
	GetTaskList(ctx context.Context, id string, view View) (*TaskList, error)
	// ListTaskLists returns a page of task lists, newest first (create time, then id, both
	// descending), and the cursor of the next page, nil on the last page.
	ListTaskLists(ctx context.Context, q ListTaskListsQuery) ([]*TaskList, *Cursor, error)
	// DeleteTaskList deletes a task list with everything that hangs off it (tasks, impacts,
	// executions, waves, assignments, log, checkpoints; feature builds lose their link).
	// ErrNotFound when it does not exist; ErrActive while one of its executions or feature builds
	// has not ended, and then nothing is deleted.
	DeleteTaskList(ctx context.Context, id string) error

	// Executions keeps execution runs, waves, assignments, the log and checkpoints
	// (executions.go).
	Executions
	// FeatureBuilds keeps the build-feature loop's state (featurebuilds.go).
	FeatureBuilds
	// Confirmations keeps the outbox of knowledge confirmations (confirmations.go).
	Confirmations
}

// Errors of the store. Backends wrap them with what they concern; match them with errors.Is.
var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: an object with that id exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrActive: the object has an execution or feature build that has not ended.
	ErrActive = errors.New("has an execution or feature build that has not ended")
)

// OpenExecutionError is CreateExecution's answer when the task list already has an execution
// that has not ended (PENDING, RUNNING or PAUSED): two open runs of one list would race on its
// tasks and its run branch. It wraps ErrActive and names the open execution.
func OpenExecutionError(taskListID, executionID string) error {
	return fmt.Errorf("task list %q: execution %s has not ended; wait for it or cancel it first (one open execution per list): %w",
		taskListID, executionID, ErrActive)
}

// View says how much of a task list to read.
type View int

const (
	// ViewFull reads everything.
	ViewFull View = iota
	// ViewBasic leaves out the tasks and the done-criteria (counts are still set).
	ViewBasic
)

// TaskList is a stored task list.
type TaskList struct {
	// ID is the list's id.
	ID string
	// Spec is the list as given; with ViewBasic without tasks and done-criteria.
	Spec *schedulerv1.TaskListSpec
	// Source says where an imported list came from; nil for a list given inline.
	Source *schedulerv1.ImportSource
	// TaskCount and CompletedTaskCount count its tasks, and those COMPLETED.
	TaskCount, CompletedTaskCount int32
	// LatestExecutionID is its latest execution's id, "" before the first.
	LatestExecutionID string
	// RunCount is the number of executions started (the last run_number).
	RunCount int32
	// CreateTime and UpdateTime are store times.
	CreateTime, UpdateTime time.Time
}

// ListTaskListsQuery selects a page of task lists.
type ListTaskListsQuery struct {
	// PageSize is the most lists to return (at least 1).
	PageSize int
	// After is the cursor the previous page returned; nil for the first page.
	After *Cursor
	// NameContains keeps only lists whose name contains it, ignoring case; "" keeps all.
	NameContains string
	// View says how much of each list to read.
	View View
}

// Cursor is a position in the newest-first order of task lists: the last list of a page.
type Cursor struct {
	// CreateTime and ID of the last list returned.
	CreateTime time.Time
	ID         string
}
