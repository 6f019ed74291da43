// Package postgres is the Postgres backend of the Verifier store.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/verifier/store"
)

// Store is the Verifier store on Postgres. The embedded handle provides Ping, Close,
// Migrate, MigrationStatus, Pool and DB.
type Store struct {
	*database.Postgres
}

var _ store.Store = (*Store)(nil)

// New returns a Verifier store on the Postgres database at url. The pool connects lazily,
// so New succeeds while Postgres is down (Ping tells when it is up) unless
// [database.WithMigrate] asks it to apply pending migrations first. See
// [database.NewPostgres] for the other options.
func New(ctx context.Context, url string, opts ...database.Option) (*Store, error) {
	db, err := database.NewPostgres(ctx, url, store.Service, store.Migrations(database.DialectPostgres), opts...)
	if err != nil {
		return nil, fmt.Errorf("verifier store: %w", err)
	}
	return &Store{Postgres: db}, nil
}

// Iterations implements store.Store.
func (s *Store) Iterations(ctx context.Context, loopKey string, iteration int32) (latest int32, exists bool, err error) {
	err = s.Pool().QueryRow(ctx, `SELECT coalesce(max(iteration), 0), coalesce(bool_or(iteration = $2), false)
		FROM verify_reports WHERE loop_key = $1`, loopKey, iteration).Scan(&latest, &exists)
	if err != nil {
		return 0, false, fmt.Errorf("verifier store: iterations of %s: %w", loopKey, err)
	}
	return latest, exists, nil
}

// InsertReport implements store.Store. The report's number in its loop is max + 1; a concurrent
// insert that took the same number makes the unique constraint fail, and the transaction is
// retried (where it sees the other report).
func (s *Store) InsertReport(ctx context.Context, r *verifierv1.VerifyReport, assignIteration bool) error {
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error { return insertReport(ctx, tx, r, assignIteration) })
		var pgErr *pgconn.PgError
		if attempt < store.MaxInsertAttempts && errors.As(err, &pgErr) && pgErr.ConstraintName == "verify_reports_seq_uniq" {
			continue
		}
		return err
	}
}

func insertReport(ctx context.Context, tx pgx.Tx, r *verifierv1.VerifyReport, assignIteration bool) error {
	var maxSeq int64
	var maxIteration int32
	err := tx.QueryRow(ctx, `SELECT coalesce(max(seq), 0), coalesce(max(iteration), 0) FROM verify_reports WHERE loop_key = $1`,
		r.GetLoopKey()).Scan(&maxSeq, &maxIteration)
	if err != nil {
		return fmt.Errorf("verifier store: insert report: %w", err)
	}
	if assignIteration {
		r.Iteration = maxIteration + 1
	} else {
		var exists bool
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM verify_reports WHERE loop_key = $1 AND iteration = $2)`,
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
	_, err = tx.Exec(ctx, `INSERT INTO verify_reports (id, loop_key, seq, iteration, verdict, pass_count, fail_count,
			skip_count, pending_human_count, error_count, failure_signature, block_reason, criteria_source_hash,
			report, created_at, partial)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		row.ID, row.LoopKey, maxSeq+1, row.Iteration, row.Verdict, row.PassCount, row.FailCount, row.SkipCount,
		row.PendingHumanCount, row.ErrorCount, row.FailureSignature, row.BlockReason, row.CriteriaHash,
		doc, row.CreateTime, row.Partial)
	if err != nil {
		return fmt.Errorf("verifier store: insert report %s: %w", row.ID, err)
	}
	if len(results) == 0 {
		return nil
	}
	rows := make([][]any, len(results))
	for i, rr := range results {
		rows[i] = []any{row.ID, rr.CriterionID, rr.Position, rr.Name, rr.Tag, rr.Status, rr.Evidence, rr.Error, rr.DurationMS}
	}
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"verify_criterion_results"},
		[]string{"report_id", "criterion_id", "position", "name", "tag", "status", "evidence", "error", "duration_ms"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("verifier store: insert results of report %s: %w", row.ID, err)
	}
	return nil
}

// GetReport implements store.Store.
func (s *Store) GetReport(ctx context.Context, id string) (*store.Report, error) {
	var seq int64
	var doc string
	err := s.Pool().QueryRow(ctx, `SELECT seq, report::text FROM verify_reports WHERE id = $1`, id).Scan(&seq, &doc)
	if errors.Is(err, pgx.ErrNoRows) {
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
	column := "report::text"
	if q.Summary {
		column = "(report - 'results' - 'failures' - 'nextActions')::text"
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.LoopKey != "" {
		where = append(where, "loop_key = "+arg(q.LoopKey))
	}
	if q.Verdict != 0 {
		where = append(where, "verdict = "+arg(store.ShortName(q.Verdict)))
	}
	if q.After != nil {
		where = append(where, fmt.Sprintf("(created_at, id) < (%s, %s)", arg(q.After.CreateTime), arg(q.After.ID)))
	}
	sql := "SELECT " + column + " FROM verify_reports"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY created_at DESC, id DESC LIMIT " + arg(q.Limit)
	rows, err := s.Pool().Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("verifier store: list reports: %w", err)
	}
	docs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("verifier store: list reports: %w", err)
	}
	out := make([]*verifierv1.VerifyReport, len(docs))
	for i, doc := range docs {
		if out[i], err = store.DecodeReport(doc); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// LatestReports implements store.Store.
func (s *Store) LatestReports(ctx context.Context, loopKey string, limit int) ([]*store.Report, error) {
	rows, err := s.Pool().Query(ctx, `SELECT seq, report::text FROM verify_reports
		WHERE loop_key = $1 AND NOT partial ORDER BY seq DESC LIMIT $2`, loopKey, limit)
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
	var created time.Time
	err := s.Pool().QueryRow(ctx, `INSERT INTO human_verdicts (public_id, loop_key, criterion_id, pass, who, note, report_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING created_at`,
		v.GetId(), v.GetLoopKey(), v.GetCriterionId(), store.Decision(v.GetDecision()), v.GetWho(), v.GetNote(),
		nullable(v.GetReportId())).Scan(&created)
	if err != nil {
		return nil, fmt.Errorf("verifier store: insert human verdict: %w", err)
	}
	out := &verifierv1.HumanVerdict{
		Id: v.GetId(), LoopKey: v.GetLoopKey(), CriterionId: v.GetCriterionId(), Decision: v.GetDecision(),
		Who: v.GetWho(), Note: v.GetNote(), ReportId: v.GetReportId(), CreateTime: timestamppb.New(created),
	}
	return out, nil
}

const humanColumns = `hv.public_id, hv.loop_key, hv.criterion_id, hv.pass, hv.who, hv.note, coalesce(hv.report_id, ''), hv.created_at`

func scanHuman(row pgx.CollectableRow) (*verifierv1.HumanVerdict, error) {
	var v verifierv1.HumanVerdict
	var pass bool
	var created time.Time
	if err := row.Scan(&v.Id, &v.LoopKey, &v.CriterionId, &pass, &v.Who, &v.Note, &v.ReportId, &created); err != nil {
		return nil, err
	}
	v.Decision = store.DecisionOf(pass)
	v.CreateTime = timestamppb.New(created)
	return &v, nil
}

// ListHumanVerdicts implements store.Store.
func (s *Store) ListHumanVerdicts(ctx context.Context, q store.HumanQuery) ([]*verifierv1.HumanVerdict, error) {
	sql := `SELECT ` + humanColumns + ` FROM human_verdicts hv WHERE hv.loop_key = $1
		AND ($2 = '' OR hv.criterion_id = $2)
		AND ($3 = '' OR hv.id < (SELECT id FROM human_verdicts WHERE public_id = $3))
		ORDER BY hv.id DESC LIMIT $4`
	rows, err := s.Pool().Query(ctx, sql, q.LoopKey, q.CriterionID, q.AfterID, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("verifier store: list human verdicts of %s: %w", q.LoopKey, err)
	}
	out, err := pgx.CollectRows(rows, scanHuman)
	if err != nil {
		return nil, fmt.Errorf("verifier store: list human verdicts of %s: %w", q.LoopKey, err)
	}
	return out, nil
}

// Signoffs implements store.Store.
func (s *Store) Signoffs(ctx context.Context, loopKey string, upToSeq int64) (map[string]*verifierv1.HumanVerdict, error) {
	rows, err := s.Pool().Query(ctx, `SELECT `+humanColumns+` FROM human_verdicts hv
		JOIN verify_reports r ON r.id = hv.report_id
		WHERE hv.loop_key = $1 AND r.seq <= $2::bigint ORDER BY hv.id DESC`, loopKey, upToSeq)
	if err != nil {
		return nil, fmt.Errorf("verifier store: sign-offs of %s: %w", loopKey, err)
	}
	all, err := pgx.CollectRows(rows, scanHuman)
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
