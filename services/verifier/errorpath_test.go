package verifier_test

import (
	"database/sql"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/verifier"
	"github.com/converge-dev/converge/services/verifier/store"
	"github.com/converge-dev/converge/services/verifier/store/postgres"
	"github.com/converge-dev/converge/services/verifier/store/sqlite"
)

// rawBackends open a store on a database the test can also reach with plain SQL.
var rawBackends = []struct {
	name string
	open func(t *testing.T) (store.Store, *sql.DB)
}{
	{"postgres", func(t *testing.T) (store.Store, *sql.DB) {
		url := dbtest.Postgres(t)
		st, err := postgres.New(t.Context(), url, database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		db, err := sql.Open("pgx", url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return st, db
	}},
	{"sqlite", func(t *testing.T) (store.Store, *sql.DB) {
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
	for _, leak := range []string{"relation", "table", "column", "SELECT", "SQLSTATE", "/", ".go"} {
		require.False(t, strings.Contains(msg, leak), "message %q leaks %q", msg, leak)
	}
}

// TestUnexpectedErrorIsInternal: a table dropped under the Verifier is a bug: Internal with the
// request id and no SQL text (the Verifier used to answer Unavailable or "internal error" after
// pinging the store).
func TestUnexpectedErrorIsInternal(t *testing.T) {
	t.Parallel()
	for _, rb := range rawBackends {
		t.Run(rb.name, func(t *testing.T) {
			t.Parallel()
			st, db := rb.open(t)
			c := verifierv1.NewVerifierServiceClient(serveBuf(t, verifier.New(st, verifier.WithScratchDir(t.TempDir())), st))
			_, err := c.ListReports(t.Context(), &verifierv1.ListReportsRequest{})
			require.NoError(t, err)
			_, err = db.ExecContext(t.Context(), "DROP TABLE human_verdicts")
			require.NoError(t, err)
			_, err = c.ListHumanVerdicts(t.Context(), &verifierv1.ListHumanVerdictsRequest{LoopKey: "x"})
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
			c := verifierv1.NewVerifierServiceClient(serveBuf(t, verifier.New(st, verifier.WithScratchDir(t.TempDir())), st))
			_, err := c.ListReports(t.Context(), &verifierv1.ListReportsRequest{})
			require.NoError(t, err)
			require.NoError(t, st.Close())
			_, err = c.ListReports(t.Context(), &verifierv1.ListReportsRequest{})
			requireCode(t, err, codes.Unavailable)
			require.NotContains(t, status.Convert(err).Message(), "closed")
			_, err = c.GetReport(t.Context(), &verifierv1.GetReportRequest{Id: "vr_01JH3V8Q2T5N3X7Y9Z1A2B3C4D"})
			requireCode(t, err, codes.Unavailable)
		})
	}
}

// TestPageTokensAreBoundToFilters: ListReports and ListHumanVerdicts walk every item exactly
// once with a page size of 1, and a token replayed with other filters is InvalidArgument on
// page_token.
func TestPageTokensAreBoundToFilters(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, be backend) {
		b := setup(t, be)
		dir := b.dir(t, map[string]string{"a.ok": ""})
		set := commandCriteria("a.ok")
		set.Criteria = append(set.Criteria, &verifierv1.Criterion{Id: "U1", Name: "Look", Tag: verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY},
			&verifierv1.Criterion{Id: "U2", Name: "Feel", Tag: verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY})
		var reports []string
		for range 3 {
			reports = append(reports, b.verify(t, structured(set, dir, "loop-a")).GetId())
		}
		b.verify(t, structured(set, dir, "loop-b"))
		var verdicts []string
		for i := range 3 {
			res, err := b.client.RecordHumanVerdict(t.Context(), &verifierv1.RecordHumanVerdictRequest{
				LoopKey: "loop-a", CriterionId: "U1", Decision: verifierv1.HumanDecision_HUMAN_DECISION_PASS, Who: filepath.Join("who", string(rune('a'+i))),
			})
			require.NoError(t, err)
			verdicts = append(verdicts, res.GetHumanVerdict().GetId())
		}
		_, err := b.client.RecordHumanVerdict(t.Context(), &verifierv1.RecordHumanVerdictRequest{
			LoopKey: "loop-a", CriterionId: "U2", Decision: verifierv1.HumanDecision_HUMAN_DECISION_PASS, Who: "x",
		})
		require.NoError(t, err)

		var got []string
		var firstToken string
		req := &verifierv1.ListReportsRequest{LoopKey: "loop-a", PageSize: 1}
		for {
			page, err := b.client.ListReports(t.Context(), req)
			require.NoError(t, err)
			for _, r := range page.GetReports() {
				got = append(got, r.GetId())
			}
			if page.GetNextPageToken() == "" {
				break
			}
			if firstToken == "" {
				firstToken = page.GetNextPageToken()
			}
			req.PageToken = page.GetNextPageToken()
		}
		require.Equal(t, []string{reports[2], reports[1], reports[0]}, got)
		_, err = b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{LoopKey: "loop-b", PageSize: 1, PageToken: firstToken})
		requireViolation(t, err, "page_token", "other filters")

		got, firstToken = nil, ""
		hreq := &verifierv1.ListHumanVerdictsRequest{LoopKey: "loop-a", CriterionId: "U1", PageSize: 1}
		for {
			page, err := b.client.ListHumanVerdicts(t.Context(), hreq)
			require.NoError(t, err)
			for _, v := range page.GetHumanVerdicts() {
				got = append(got, v.GetId())
			}
			if page.GetNextPageToken() == "" {
				break
			}
			if firstToken == "" {
				firstToken = page.GetNextPageToken()
			}
			hreq.PageToken = page.GetNextPageToken()
		}
		require.Equal(t, []string{verdicts[2], verdicts[1], verdicts[0]}, got)
		_, err = b.client.ListHumanVerdicts(t.Context(), &verifierv1.ListHumanVerdictsRequest{LoopKey: "loop-a", CriterionId: "U2", PageSize: 1, PageToken: firstToken})
		requireViolation(t, err, "page_token", "other filters")
		_, err = b.client.ListHumanVerdicts(t.Context(), &verifierv1.ListHumanVerdictsRequest{LoopKey: "loop-a", CriterionId: "U1", PageToken: firstToken + "x"})
		requireViolation(t, err, "page_token", "malformed")
	})
}
