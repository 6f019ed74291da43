// Package sqlite is the embedded SQLite backend of the Verifier store.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/verifier/store"
)

// Store is the Verifier store on SQLite. The embedded handle provides Ping, Close, Migrate,
// MigrationStatus and DB.
type Store struct {
	*database.SQLite
}

var _ store.Store = (*Store)(nil)

// New returns a Verifier store on the SQLite database at path, created if missing;
// ":memory:" gives a private in-memory database (see [database.OpenSQLite]). Several services
// may share one file: each keeps to its own tables and version table. With
// [database.WithMigrate] pending migrations are applied first.
func New(ctx context.Context, path string, opts ...database.Option) (*Store, error) {
	db, err := database.NewSQLite(ctx, path, store.Service, store.Migrations(database.DialectSQLite), opts...)
	if err != nil {
		return nil, fmt.Errorf("verifier store: %w", err)
	}
	return &Store{SQLite: db}, nil
}

// Iterations implements store.Store.
func (s *Store) Iterations(ctx context.Context, loopKey string, iteration int32) (latest int32, exists bool, err error) {
	err = s.DB().QueryRowContext(ctx, `SELECT coalesce(max(iteration), 0), coalesce(max(iteration = ?2), 0)
		FROM verify_reports WHERE loop_key = ?1`, loopKey, iteration).Scan(&latest, &exists)
	if err != nil {
		return 0, false, fmt.Errorf("verifier store: iterations of %s: %w", loopKey, err)
	}
	return latest, exists, nil
}

// InsertReport implements store.Store. Transactions take SQLite's write lock when they begin,
// so the report number (max + 1) cannot be taken by another writer in between; the retry is for
// symmetry with Postgres and costs nothing.
func (s *Store) InsertReport(ctx context.Context, r *verifierv1.VerifyReport, assignIteration bool) error {
	for attempt := 1; ; attempt++ {
		err := s.inTx(ctx, func(tx *sql.Tx) error { return insertReport(ctx, tx, r, assignIteration) })
		if attempt < store.MaxInsertAttempts && database.ViolationOf(err) == database.UniqueViolation &&
			strings.Contains(err.Error(), "verify_reports.seq") {
			continue
		}
		return err
	}
}

// inTx runs fn in a transaction, committed when fn succeeds. fn must use tx only: with an
// in-memory database the pool has one connection, which the transaction holds.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("verifier store: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("verifier store: commit: %w", err)
	}
	return nil
}

func insertReport(ctx context.Context, tx *sql.Tx, r *verifierv1.VerifyReport, assignIteration bool) error {
	var maxSeq int64
	var maxIteration int32
	err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0), coalesce(max(iteration), 0) FROM verify_reports WHERE loop_key = ?`,
		r.GetLoopKey()).Scan(&maxSeq, &maxIteration)
	if err != nil {
		return fmt.Errorf("verifier store: insert report: %w", err)
	}
	if assignIteration {
		r.Iteration = maxIteration + 1
	} else {
		var exists bool
		err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM verify_reports WHERE loop_key = ? AND iteration = ?)`,
			r.GetLoopKey(), r.GetIteration()).Scan(&exists)
		if err != nil {
			return fmt.Errorf("verifier store: insert report: %w", err)
		}
		if err := store.CheckIteration(r.GetLoopKey(), r.GetIteration(), maxIteration, exists); err != nil {
			return err
		}
	}
	row, results, err := store.Rows(r)
	if err != nil {
		return err
	}
	doc, err := store.EncodeReport(r)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO verify_reports (id, loop_key, seq, iteration, verdict, pass_count, fail_count,
			skip_count, pending_human_count, error_count, failure_signature, block_reason, criteria_source_hash,
			report, created_at, partial)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		row.ID, row.LoopKey, maxSeq+1, row.Iteration, row.Verdict, row.PassCount, row.FailCount, row.SkipCount,
		row.PendingHumanCount, row.ErrorCount, row.FailureSignature, row.BlockReason, row.CriteriaHash,
		doc, database.FormatSQLiteTime(row.CreateTime), row.Partial)
	if err != nil {
		return fmt.Errorf("verifier store: insert report %s: %w", row.ID, err)
	}
	if len(results) == 0 {
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO verify_criterion_results (report_id, criterion_id, position, name, tag,
		status, evidence, error, duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("verifier store: insert results of report %s: %w", row.ID, err)
	}
	defer stmt.Close()
	for _, rr := range results {
		if _, err := stmt.ExecContext(ctx, row.ID, rr.CriterionID, rr.Position, rr.Name, rr.Tag, rr.Status,
			rr.Evidence, rr.Error, rr.DurationMS); err != nil {
			return fmt.Errorf("verifier store: insert results of report %s: %w", row.ID, err)
		}
	}
	return nil
}

// GetReport implements store.Store.
func (s *Store) GetReport(ctx context.Context, id string) (*store.Report, error) {
	var seq int64
	var doc string
	err := s.DB().QueryRowContext(ctx, `SELECT seq, report FROM verify_reports WHERE id = ?`, id).Scan(&seq, &doc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("verifier store: get report %s: %w", id, err)
	}
	r, err := store.DecodeReport(doc)
	if err != nil {
		return nil, err
	}
	return &store.Report{VerifyReport: r, Seq: seq}, nil
}

// ListReports implements store.Store.
func (s *Store) ListReports(ctx context.Context, q store.ListQuery) ([]*verifierv1.VerifyReport, error) {
	column := "report"
	if q.Summary {
		column = "json_remove(report, '$.results', '$.failures', '$.nextActions')"
	}
	var where []string
	var args []any
	if q.LoopKey != "" {
		where = append(where, "loop_key = ?")
		args = append(args, q.LoopKey)
	}
	if q.Verdict != 0 {
		where = append(where, "verdict = ?")
		args = append(args, store.ShortName(q.Verdict))
	}
	if q.After != nil {
		where = append(where, "(created_at, id) < (?, ?)")
		args = append(args, database.FormatSQLiteTime(q.After.CreateTime), q.After.ID)
	}
	query := "SELECT " + column + " FROM verify_reports"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY created_at DESC, id DESC LIMIT ?"
	args = append(args, q.Limit)
	rows, err := s.DB().QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("verifier store: list reports: %w", err)
	}
	defer rows.Close()
	var out []*verifierv1.VerifyReport
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			return nil, fmt.Errorf("verifier store: list reports: %w", err)
		}
		r, err := store.DecodeReport(doc)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("verifier store: list reports: %w", err)
	}
	return out, nil
}

// LatestReports implements store.Store.
func (s *Store) LatestReports(ctx context.Context, loopKey string, limit int) ([]*store.Report, error) {
	rows, err := s.DB().QueryContext(ctx, `SELECT seq, report FROM verify_reports
		WHERE loop_key = ? AND NOT partial ORDER BY seq DESC LIMIT ?`, loopKey, limit)
	if err != nil {
		return nil, fmt.Errorf("verifier store: latest reports of %s: %w", loopKey, err)
	}
	defer rows.Close()
	var out []*store.Report
	for rows.Next() {
		var seq int64
		var doc string
		if err := rows.Scan(&seq, &doc); err != nil {
			return nil, fmt.Errorf("verifier store: latest reports of %s: %w", loopKey, err)
		}
		r, err := store.DecodeReport(doc)
		if err != nil {
			return nil, err
		}
		out = append(out, &store.Report{VerifyReport: r, Seq: seq})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("verifier store: latest reports of %s: %w", loopKey, err)
	}
	return out, nil
}

// InsertHumanVerdict implements store.Store.
func (s *Store) InsertHumanVerdict(ctx context.Context, v *verifierv1.HumanVerdict) (*verifierv1.HumanVerdict, error) {
	var created string
	err := s.DB().QueryRowContext(ctx, `INSERT INTO human_verdicts (public_id, loop_key, criterion_id, pass, who, note, report_id)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING created_at`,
		v.GetId(), v.GetLoopKey(), v.GetCriterionId(), store.Decision(v.GetDecision()), v.GetWho(), v.GetNote(),
		nullable(v.GetReportId())).Scan(&created)
	if err != nil {
		return nil, fmt.Errorf("verifier store: insert human verdict: %w", err)
	}
	t, err := database.ParseSQLiteTime(created)
	if err != nil {
		return nil, fmt.Errorf("verifier store: insert human verdict: %w", err)
	}
	out := &verifierv1.HumanVerdict{
		Id: v.GetId(), LoopKey: v.GetLoopKey(), CriterionId: v.GetCriterionId(), Decision: v.GetDecision(),
		Who: v.GetWho(), Note: v.GetNote(), ReportId: v.GetReportId(), CreateTime: timestamppb.New(t),
	}
	return out, nil
}

const humanColumns = `hv.public_id, hv.loop_key, hv.criterion_id, hv.pass, hv.who, hv.note, coalesce(hv.report_id, ''), hv.created_at`

func scanHumans(rows *sql.Rows) ([]*verifierv1.HumanVerdict, error) {
	defer rows.Close()
	var out []*verifierv1.HumanVerdict
	for rows.Next() {
		var v verifierv1.HumanVerdict
		var pass bool
		var created string
		if err := rows.Scan(&v.Id, &v.LoopKey, &v.CriterionId, &pass, &v.Who, &v.Note, &v.ReportId, &created); err != nil {
			return nil, err
		}
		t, err := database.ParseSQLiteTime(created)
		if err != nil {
			return nil, err
		}
		v.Decision = store.DecisionOf(pass)
		v.CreateTime = timestamppb.New(t)
		out = append(out, &v)
	}
	return out, rows.Err()
}

// ListHumanVerdicts implements store.Store.
func (s *Store) ListHumanVerdicts(ctx context.Context, q store.HumanQuery) ([]*verifierv1.HumanVerdict, error) {
	rows, err := s.DB().QueryContext(ctx, `SELECT `+humanColumns+` FROM human_verdicts hv WHERE hv.loop_key = ?1
		AND (?2 = '' OR hv.criterion_id = ?2)
		AND (?3 = '' OR hv.id < (SELECT id FROM human_verdicts WHERE public_id = ?3))
		ORDER BY hv.id DESC LIMIT ?4`, q.LoopKey, q.CriterionID, q.AfterID, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("verifier store: list human verdicts of %s: %w", q.LoopKey, err)
	}
	out, err := scanHumans(rows)
	if err != nil {
		return nil, fmt.Errorf("verifier store: list human verdicts of %s: %w", q.LoopKey, err)
	}
	return out, nil
}

// Signoffs implements store.Store.
func (s *Store) Signoffs(ctx context.Context, loopKey string, upToSeq int64) (map[string]*verifierv1.HumanVerdict, error) {
	rows, err := s.DB().QueryContext(ctx, `SELECT `+humanColumns+` FROM human_verdicts hv
		JOIN verify_reports r ON r.id = hv.report_id
		WHERE hv.loop_key = ? AND r.seq <= ? ORDER BY hv.id DESC`, loopKey, upToSeq)
	if err != nil {
		return nil, fmt.Errorf("verifier store: sign-offs of %s: %w", loopKey, err)
	}
	all, err := scanHumans(rows)
	if err != nil {
		return nil, fmt.Errorf("verifier store: sign-offs of %s: %w", loopKey, err)
	}
	return store.LatestPerCriterion(all), nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
