package verifier_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/grpcerr/grpcerrtest"
	"github.com/converge-dev/converge/platform/pagetoken/pagetokentest"
	"github.com/converge-dev/converge/services/verifier"
	"github.com/converge-dev/converge/services/verifier/store"
	"github.com/converge-dev/converge/services/verifier/store/postgres"
	"github.com/converge-dev/converge/services/verifier/store/sqlite"
)

// TestUnexpectedErrorIsInternal: a table dropped under the Verifier is a bug: Internal with the
// request id and no SQL text (the Verifier used to answer Unavailable or "internal error" after
// pinging the store).
func TestUnexpectedErrorIsInternal(t *testing.T) {
	t.Parallel()
	dbtest.ForEachDialect(t, postgres.New, sqlite.New, func(t *testing.T, _ database.Dialect, st store.Store, db *sql.DB) {
		c := verifierv1.NewVerifierServiceClient(serveBuf(t, verifier.New(st, verifier.WithScratchDir(t.TempDir())), st))
		_, err := c.ListReports(t.Context(), &verifierv1.ListReportsRequest{})
		require.NoError(t, err)
		_, err = db.ExecContext(t.Context(), "DROP TABLE human_verdicts")
		require.NoError(t, err)
		_, err = c.ListHumanVerdicts(t.Context(), &verifierv1.ListHumanVerdictsRequest{LoopKey: "x"})
		grpcerrtest.RequireInternal(t, err)
	})
}

// TestStoreOutageIsUnavailable: a closed store answers Unavailable, without the driver's text.
func TestStoreOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	dbtest.ForEachDialect(t, postgres.New, sqlite.New, func(t *testing.T, _ database.Dialect, st store.Store, _ *sql.DB) {
		c := verifierv1.NewVerifierServiceClient(serveBuf(t, verifier.New(st, verifier.WithScratchDir(t.TempDir())), st))
		_, err := c.ListReports(t.Context(), &verifierv1.ListReportsRequest{})
		require.NoError(t, err)
		require.NoError(t, st.Close())
		_, err = c.ListReports(t.Context(), &verifierv1.ListReportsRequest{})
		grpcerrtest.RequireUnavailable(t, err)
		_, err = c.GetReport(t.Context(), &verifierv1.GetReportRequest{Id: "vr_01JH3V8Q2T5N3X7Y9Z1A2B3C4D"})
		grpcerrtest.RequireUnavailable(t, err)
	})
}

// TestPageTokensAreBoundToFilters: ListReports and ListHumanVerdicts walk every item exactly
// once with a page size of 1, and a token replayed with other filters is InvalidArgument on
// page_token.
func TestPageTokensAreBoundToFilters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, be backend) {
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

		got, token := pagetokentest.Walk(t, func(tok string) (ids []string, next string) {
			page, err := b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{LoopKey: "loop-a", PageSize: 1, PageToken: tok})
			require.NoError(t, err)
			for _, r := range page.GetReports() {
				ids = append(ids, r.GetId())
			}
			return ids, page.GetNextPageToken()
		})
		require.Equal(t, []string{reports[2], reports[1], reports[0]}, got)
		_, err = b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{LoopKey: "loop-b", PageSize: 1, PageToken: token})
		pagetokentest.RequireOtherFilters(t, err)

		got, token = pagetokentest.Walk(t, func(tok string) (ids []string, next string) {
			page, err := b.client.ListHumanVerdicts(t.Context(), &verifierv1.ListHumanVerdictsRequest{LoopKey: "loop-a", CriterionId: "U1", PageSize: 1, PageToken: tok})
			require.NoError(t, err)
			for _, v := range page.GetHumanVerdicts() {
				ids = append(ids, v.GetId())
			}
			return ids, page.GetNextPageToken()
		})
		require.Equal(t, []string{verdicts[2], verdicts[1], verdicts[0]}, got)
		_, err = b.client.ListHumanVerdicts(t.Context(), &verifierv1.ListHumanVerdictsRequest{LoopKey: "loop-a", CriterionId: "U2", PageSize: 1, PageToken: token})
		pagetokentest.RequireOtherFilters(t, err)
		_, err = b.client.ListHumanVerdicts(t.Context(), &verifierv1.ListHumanVerdictsRequest{LoopKey: "loop-a", CriterionId: "U1", PageToken: token + "x"})
		pagetokentest.RequireMalformed(t, err)
	})
}
