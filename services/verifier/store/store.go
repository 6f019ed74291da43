// Package store is the Verifier's storage: the [Store] interface its backends implement
// (postgres for production, sqlite embedded) and the SQL migrations they apply.
//
// The Verifier owns its tables, and no other service reads or writes them: verify reports, per-
// criterion results and human verdicts. The conformance suite in ./storetest holds every backend
// to the same behaviour.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/database"
)

// Service is the name the Verifier's migrations are recorded under (version table
// converge_verifier_migrations) and the suffix of its Postgres application_name.
const Service = "verifier"

// migrations holds migrations/<dialect>/NNNN_name.sql, goose-annotated.
//
//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrations embed.FS

// Migrations returns the Verifier's migration files for dialect d, NNNN_name.sql at the root
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

// Store is the Verifier's durable state: verify reports (with their per-criterion results) and
// human verdicts. Every backend implements all of it and passes ./storetest.
type Store interface {
	// Ping reports whether the store can serve requests. The server's health is NOT_SERVING
	// until it succeeds, and a closed store fails it.
	Ping(ctx context.Context) error
	// Close releases the store's connections. It may be called more than once.
	Close() error

	// Iterations answers the highest iteration among loopKey's reports, partial ones included
	// (0 for a loop without reports), and whether one of them has iteration.
	Iterations(ctx context.Context, loopKey string, iteration int32) (latest int32, exists bool, err error)
	// InsertReport stores r, a finished report with its id, loop key, iteration, create time and
	// results set, and its per-criterion results. The report is numbered after the loop's others.
	//
	// With assignIteration, r.Iteration is replaced by the loop's latest iteration + 1, decided in
	// the same transaction, so verifications of one loop that finish together get distinct
	// iterations. Otherwise r.Iteration must be above every iteration of the loop:
	// *IterationExistsError when the loop has a report for it, *IterationBehindError when it is
	// lower than the loop's latest.
	InsertReport(ctx context.Context, r *verifierv1.VerifyReport, assignIteration bool) error
	// GetReport answers the report with id, or ErrNotFound.
	GetReport(ctx context.Context, id string) (*Report, error)
	// ListReports answers up to q.Limit reports matching q, newest first by (create time, id),
	// starting after q.After. With q.Summary the results, failures and next actions are left out.
	ListReports(ctx context.Context, q ListQuery) ([]*verifierv1.VerifyReport, error)
	// LatestReports answers up to limit of loopKey's latest complete (not partial) reports,
	// newest first.
	LatestReports(ctx context.Context, loopKey string, limit int) ([]*Report, error)

	// InsertHumanVerdict stores v (id, loop key, criterion id, decision, who, note and the
	// reviewed report id set) and answers it with the store's create time.
	InsertHumanVerdict(ctx context.Context, v *verifierv1.HumanVerdict) (*verifierv1.HumanVerdict, error)
	// ListHumanVerdicts answers up to q.Limit of a loop's human verdicts matching q, newest
	// (latest recorded) first, starting after the verdict q.AfterID.
	ListHumanVerdicts(ctx context.Context, q HumanQuery) ([]*verifierv1.HumanVerdict, error)
	// Signoffs answers, for each criterion of loopKey, its latest recorded human verdict among
	// those that reviewed a report numbered at most upToSeq (see Report.Seq).
	Signoffs(ctx context.Context, loopKey string, upToSeq int64) (map[string]*verifierv1.HumanVerdict, error)
}

// Report is a stored report with its position in its loop.
type Report struct {
	*verifierv1.VerifyReport
	// Seq numbers the loop's reports 1, 2, ... in the order they were stored.
	Seq int64
}

// ListQuery filters and pages ListReports.
type ListQuery struct {
	// LoopKey keeps only this loop's reports; "" for all.
	LoopKey string
	// Verdict keeps only reports with this verdict; UNSPECIFIED for any.
	Verdict commonv1.Verdict
	// Limit is the most reports answered.
	Limit int
	// After starts the page after this report; nil for the first page.
	After *Cursor
	// Summary leaves results, failures and next actions out.
	Summary bool
}

// Cursor is a position in the newest-first order of reports.
type Cursor struct {
	// CreateTime of the last report of the previous page.
	CreateTime time.Time
	// ID of that report.
	ID string
}

// HumanQuery filters and pages ListHumanVerdicts.
type HumanQuery struct {
	// LoopKey is the loop. Required.
	LoopKey string
	// CriterionID keeps only verdicts on this criterion; "" for all.
	CriterionID string
	// Limit is the most verdicts answered.
	Limit int
	// AfterID starts the page after this verdict (its id); "" for the first page.
	AfterID string
}

// ErrNotFound is the answer for a report that does not exist.
var ErrNotFound = errors.New("not found")

// IterationExistsError is the answer of InsertReport for an iteration the loop already has.
type IterationExistsError struct {
	LoopKey   string
	Iteration int32
}

func (e *IterationExistsError) Error() string {
	return fmt.Sprintf("loop %s already has a report for iteration %d", e.LoopKey, e.Iteration)
}

// IterationBehindError is the answer of InsertReport for an iteration below the loop's latest.
type IterationBehindError struct {
	LoopKey   string
	Iteration int32
	Latest    int32
}

func (e *IterationBehindError) Error() string {
	return fmt.Sprintf("iteration %d of loop %s is lower than its latest iteration %d", e.Iteration, e.LoopKey, e.Latest)
}

// CheckIteration applies InsertReport's rule for a requested iteration: it must be above latest,
// the loop's highest iteration, and not among the loop's; exists says whether it is.
func CheckIteration(loopKey string, iteration, latest int32, exists bool) error {
	if exists {
		return &IterationExistsError{LoopKey: loopKey, Iteration: iteration}
	}
	if iteration < latest {
		return &IterationBehindError{LoopKey: loopKey, Iteration: iteration, Latest: latest}
	}
	return nil
}
