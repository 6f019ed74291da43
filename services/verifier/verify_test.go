package verifier_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/verifier"
)

func TestParseCriteria(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1])
	res, err := b.client.ParseCriteria(t.Context(), &verifierv1.ParseCriteriaRequest{Markdown: example(t, "inventory-export.md")})
	require.NoError(t, err)
	require.Len(t, res.GetCriteria(), 9)
	require.Len(t, res.GetCriteriaHash(), 64)
	require.Empty(t, res.GetWarnings())

	_, err = b.client.ParseCriteria(t.Context(), &verifierv1.ParseCriteriaRequest{
		Markdown: "# Done\n\n## F1: Export works\nTag: AUTO_VERIFY\n\n```check\nftp:\n  url: ftp://example.com\n```\n\n## F1: Again\nTag: HUMAN_VERIFY\n",
	})
	requireViolation(t, err, "markdown:L7", `unknown check kind "ftp"`)
	requireViolation(t, err, "markdown:L11", "duplicate criterion id F1, first defined at line 3")

	// The contract's own rules come first (protovalidate).
	_, err = b.client.ParseCriteria(t.Context(), &verifierv1.ParseCriteriaRequest{})
	requireViolation(t, err, "markdown", "")
}

// TestBadInput: what the request gets wrong is InvalidArgument with field violations, never
// Internal.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1])
	dir := b.dir(t, map[string]string{"a.ok": ""})
	cmd := func(cc *verifierv1.CommandCheck) *verifierv1.CriteriaSet {
		return &verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{{
			Id: "F1", Name: "x", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_Command{Command: cc},
		}}}
	}
	httpSet := func(h *verifierv1.HttpCheck) *verifierv1.CriteriaSet {
		return &verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{{
			Id: "F1", Name: "x", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_Http{Http: h},
		}}}
	}
	md := func(s string) *verifierv1.VerifyRequest {
		return &verifierv1.VerifyRequest{
			CriteriaSource: &verifierv1.VerifyRequest_CriteriaMarkdown{CriteriaMarkdown: s},
			Target:         &verifierv1.Target{Directory: &verifierv1.Target_LocalDir{LocalDir: dir}},
			LoopKey:        "bad",
		}
	}
	cases := []struct {
		name  string
		req   *verifierv1.VerifyRequest
		field string
		want  string
	}{
		{"unknown check kind", md("## F1: x\nTag: AUTO_VERIFY\n\n```check\nftp: {}\n```\n"), "criteria_markdown:L5", `unknown check kind "ftp"`},
		{"malformed regex", structured(cmd(&verifierv1.CommandCheck{Argv: []string{"ls"}, Expect: &verifierv1.CommandExpectation{
			Stdout: &verifierv1.TextExpectation{Matches: []string{"(x"}}}}), dir, "bad"),
			"criteria.criteria[0].command.expect.stdout.matches[0]", "regex does not compile"},
		{"URL scheme", structured(httpSet(&verifierv1.HttpCheck{Location: &verifierv1.HttpCheck_Url{Url: "ftp://example.com/x"}}), dir, "bad"),
			"criteria.criteria[0].http.url", "URL scheme must be http or https"},
		{"URL scheme in markdown", md("## F1: x\nTag: AUTO_VERIFY\n\n```check\nhttp: {url: 'file:///etc/passwd'}\n```\n"),
			"criteria_markdown:L5", "URL scheme must be http or https"},
		{"directory outside the allowed roots", structured(commandCriteria("a.ok"), t.TempDir(), "bad"), "target.local_dir", "outside the verifier's allowed roots"},
		{"symlink out of the allowed roots", structured(commandCriteria("a.ok"), symlinkOut(t, b), "bad"), "target.local_dir", "outside the verifier's allowed roots"},
		{"relative directory", structured(commandCriteria("a.ok"), "app", "bad"), "target.local_dir", "absolute path"},
		{"oversize criteria", md(strings.Repeat("x", 1<<20+1)), "criteria_markdown", "1048576"},
		{"http path without base_url", structured(httpSet(&verifierv1.HttpCheck{Location: &verifierv1.HttpCheck_Path{Path: "/x"}}), dir, "bad"),
			"criteria.criteria[0].http.path", "needs target.base_url"},
		{"file check without a directory", &verifierv1.VerifyRequest{
			CriteriaSource: &verifierv1.VerifyRequest_CriteriaMarkdown{CriteriaMarkdown: "## F1: x\nTag: AUTO_VERIFY\n```check\nfile: {path: a}\n```\n"},
			Target:         &verifierv1.Target{BaseUrl: "http://127.0.0.1:1"}, LoopKey: "bad",
		}, "criteria_markdown:L1", "needs a directory target"},
		{"grpc check without an address", md("## F1: x\nTag: AUTO_VERIFY\n```check\ngrpc: {health: {}}\n```\n"), "criteria_markdown:L1", "needs an address"},
		{"only_criteria unknown", func() *verifierv1.VerifyRequest {
			r := structured(commandCriteria("a.ok"), dir, "bad")
			r.OnlyCriteria = []string{"F9"}
			return r
		}(), "only_criteria[0]", "not among the criteria"},
		{"duplicate ids", structured(&verifierv1.CriteriaSet{Criteria: append(commandCriteria("a.ok").Criteria, commandCriteria("b.ok").Criteria...)}, dir, "bad"),
			"criteria", "unique"},
		{"bad loop key", structured(commandCriteria("a.ok"), dir, "no spaces"), "loop_key", "pattern"},
		{"timeout too short", structured(cmd(&verifierv1.CommandCheck{Argv: []string{"ls"}, Timeout: durationpb.New(1)}), dir, "bad"),
			"criteria.criteria[0].command.timeout", "0.1s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.client.Verify(t.Context(), tc.req)
			requireViolation(t, err, tc.field, tc.want)
		})
	}
	// Nothing was stored.
	list, err := b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetReports())
}

// symlinkOut is a symlink inside the allowed root pointing outside it.
func symlinkOut(t *testing.T, b *bundle) string {
	t.Helper()
	link := filepath.Join(b.root, "escape")
	require.NoError(t, os.Symlink(t.TempDir(), link))
	return link
}

func TestNoAllowedRoots(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1])
	closed := setupWithout(t)
	_, err := closed.client.Verify(t.Context(), structured(commandCriteria("a.ok"), b.root, "k"))
	requireViolation(t, err, "target.local_dir", "allows no local directories")
}

// setupWithout is a Verifier without allowed roots.
func setupWithout(t *testing.T) *bundle {
	t.Helper()
	b := setup(t, backends[1])
	st := backends[1].open(t)
	b.client = verifierv1.NewVerifierServiceClient(serveBuf(t, verifier.New(st), st))
	return b
}

// TestTargetUnavailable: a directory that is missing is BLOCKED, not an error, and not a crash.
func TestTargetUnavailable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, be backend) {
		b := setup(t, be)
		gone := filepath.Join(b.root, "not-yet-built")
		set := commandCriteria("a.ok")
		set.Criteria = append(set.Criteria, &verifierv1.Criterion{
			Id: "F2", Name: "docs", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_File{File: &verifierv1.FileCheck{Target: &verifierv1.FileCheck_Path{Path: "README.md"}}},
		})
		r := b.verify(t, structured(set, gone, "gone"))
		require.Equal(t, commonv1.Verdict_VERDICT_BLOCKED, r.GetVerdict())
		require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_TARGET_UNAVAILABLE, r.GetBlockReason())
		require.Equal(t, map[string]string{"F1": "ERROR", "F2": "ERROR"}, statusOf(r))
		require.Contains(t, r.GetBlockDetail(), "F1, F2: target directory "+gone+" is unavailable: no such directory")
		require.Equal(t, int32(0), r.GetPassCount(), "never PASS for a check that did not run")

		// A directory that vanishes while the checks run: the checks after it are BLOCKED.
		dir := b.dir(t, map[string]string{"a.ok": ""})
		vanish := &verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{
			{Id: "F1", Name: "remove the target", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
				Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{Shell: `rm -rf "$PWD"`}}},
		}}
		r = b.verify(t, structured(vanish, dir, "vanish"))
		require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, r.GetVerdict())
		r = b.verify(t, structured(vanish, dir, "vanish"))
		require.Equal(t, commonv1.Verdict_VERDICT_BLOCKED, r.GetVerdict())
	})
}

func TestIterations(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, be backend) {
		b := setup(t, be)
		dir := b.dir(t, map[string]string{"a.ok": ""})
		req := func(iteration int32) *verifierv1.VerifyRequest {
			r := structured(commandCriteria("a.ok"), dir, "it")
			if iteration > 0 {
				r.Iteration = &iteration
			}
			return r
		}
		require.Equal(t, int32(1), b.verify(t, req(0)).GetIteration())
		require.Equal(t, int32(3), b.verify(t, req(3)).GetIteration())
		require.Equal(t, int32(4), b.verify(t, req(0)).GetIteration())

		_, err := b.client.Verify(t.Context(), req(4))
		requireCode(t, err, codes.AlreadyExists)
		_, err = b.client.Verify(t.Context(), req(2))
		requireCode(t, err, codes.FailedPrecondition)

		// A dry run plans, runs nothing and stores nothing.
		dry := req(0)
		dry.DryRun = true
		r := b.verify(t, dry)
		require.Empty(t, r.GetId())
		require.True(t, r.GetDryRun())
		require.Equal(t, commonv1.Verdict_VERDICT_UNSPECIFIED, r.GetVerdict())
		require.Equal(t, int32(5), r.GetIteration())
		require.Equal(t, "SKIP", statusOf(r)["F1"])
		require.Contains(t, resultOf(t, r, "F1").GetEvidence().GetSummary(), "would run `test -f a.ok`")
		require.Equal(t, int32(1), r.GetSkipCount())
		list, err := b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{LoopKey: "it"})
		require.NoError(t, err)
		require.Len(t, list.GetReports(), 3)
	})
}

func TestListReports(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1])
	dir := b.dir(t, map[string]string{"a.ok": ""})
	var ids []string
	for i := range 5 {
		loop := "even"
		set := commandCriteria("a.ok")
		if i%2 == 1 {
			loop, set = "odd", commandCriteria("missing")
		}
		ids = append(ids, b.verify(t, structured(set, dir, loop)).GetId())
	}
	var got []string
	token := ""
	for {
		page, err := b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{PageSize: 2, PageToken: token, View: verifierv1.ReportView_REPORT_VIEW_FULL})
		require.NoError(t, err)
		for _, r := range page.GetReports() {
			got = append(got, r.GetId())
			require.NotEmpty(t, r.GetResults(), "FULL view")
		}
		token = page.GetNextPageToken()
		if token == "" {
			break
		}
	}
	require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, got)

	page, err := b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{Verdict: commonv1.Verdict_VERDICT_FAILED})
	require.NoError(t, err)
	require.Len(t, page.GetReports(), 2)
	for _, r := range page.GetReports() {
		require.Equal(t, "odd", r.GetLoopKey())
	}

	first, err := b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{LoopKey: "even", PageSize: 1})
	require.NoError(t, err)
	_, err = b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{LoopKey: "odd", PageSize: 1, PageToken: first.GetNextPageToken()})
	requireViolation(t, err, "page_token", "other filters")
	_, err = b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{PageToken: "garbage!"})
	requireViolation(t, err, "page_token", "malformed")

	one, err := b.client.GetReport(t.Context(), &verifierv1.GetReportRequest{Id: ids[0], View: verifierv1.ReportView_REPORT_VIEW_SUMMARY})
	require.NoError(t, err)
	require.Empty(t, one.GetReport().GetResults())
	_, err = b.client.GetReport(t.Context(), &verifierv1.GetReportRequest{Id: "vr_nope"})
	requireCode(t, err, codes.NotFound)
}

// sleeper is a criterion whose command runs until it is killed.
func sleeper(id string) *verifierv1.Criterion {
	return &verifierv1.Criterion{Id: id, Name: "sleeps", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
		Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{Argv: []string{"sleep", "300"}}}}
}

func TestVerifyStream(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, be backend) {
		b := setup(t, be)
		dir := b.dir(t, map[string]string{"a.ok": ""})
		set := commandCriteria("a.ok", "b.ok")
		set.Criteria = append(set.Criteria, &verifierv1.Criterion{Id: "U1", Name: "looks", Tag: verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY})
		stream, err := b.client.VerifyStream(t.Context(), &verifierv1.VerifyStreamRequest{
			CriteriaSource: &verifierv1.VerifyStreamRequest_Criteria{Criteria: set},
			Target:         &verifierv1.Target{Directory: &verifierv1.Target_LocalDir{LocalDir: dir}},
			LoopKey:        "stream",
			Parallelism:    2,
		})
		require.NoError(t, err)
		var events []*verifierv1.VerifyStreamResponse
		for {
			ev, err := stream.Recv()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			events = append(events, ev)
		}
		for i, ev := range events {
			require.Equal(t, int64(i+1), ev.GetSeq(), "gap-free")
			require.NotNil(t, ev.GetTime())
		}
		started := events[0].GetStarted()
		require.NotNil(t, started)
		require.Equal(t, int32(2), started.GetChecksToRun())
		require.Equal(t, int32(2), started.GetParallelism())
		require.Equal(t, int32(1), started.GetIteration())
		require.Len(t, started.GetCriteria(), 3)

		var starts, finishes int
		var lastDone int32
		for _, ev := range events[1 : len(events)-1] {
			switch {
			case ev.GetCriterionStarted() != nil:
				starts++
				require.Equal(t, int32(1), ev.GetCriterionStarted().GetAttempt())
			case ev.GetCriterionFinished() != nil:
				finishes++
				f := ev.GetCriterionFinished()
				require.Equal(t, lastDone+1, f.GetDoneCount())
				require.Equal(t, int32(3), f.GetTotalCount())
				lastDone = f.GetDoneCount()
			default:
				t.Fatalf("unexpected event %v", ev)
			}
		}
		require.Equal(t, 2, starts)
		require.Equal(t, 3, finishes, "HUMAN_VERIFY criteria get a finished event only")
		rep := events[len(events)-1].GetReport()
		require.Equal(t, started.GetReportId(), rep.GetId())
		require.Equal(t, commonv1.Verdict_VERDICT_FAILED, rep.GetVerdict())
		got, err := b.client.GetReport(t.Context(), &verifierv1.GetReportRequest{Id: rep.GetId()})
		require.NoError(t, err)
		require.Equal(t, rep.GetFailureSignature(), got.GetReport().GetFailureSignature())
	})
}

// TestCancel: a caller that gives up stops the checks, and a partial run is never stored.
func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1], verifier.WithMaxVerifications(1))
	dir := b.dir(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := b.client.VerifyStream(ctx, &verifierv1.VerifyStreamRequest{
		CriteriaSource: &verifierv1.VerifyStreamRequest_Criteria{Criteria: &verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{sleeper("F1")}}},
		Target:         &verifierv1.Target{Directory: &verifierv1.Target_LocalDir{LocalDir: dir}},
		LoopKey:        "cancel",
	})
	require.NoError(t, err)
	for {
		ev, err := stream.Recv()
		require.NoError(t, err)
		if ev.GetCriterionStarted() != nil {
			break
		}
	}
	// The server is at its maximum: another verification is refused.
	_, err = b.client.Verify(t.Context(), structured(commandCriteria("a.ok"), dir, "other"))
	requireCode(t, err, codes.ResourceExhausted)

	cancel()
	_, err = stream.Recv()
	requireCode(t, err, codes.Canceled)

	// The slot comes back once the cancelled run has stopped its checks; nothing was stored.
	require.Eventually(t, func() bool {
		_, err = b.client.Verify(t.Context(), structured(commandCriteria("a.ok"), dir, "other"))
		if err != nil {
			requireCode(t, err, codes.ResourceExhausted)
		}
		return err == nil
	}, 30*time.Second, 10*time.Millisecond)
	list, err := b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{LoopKey: "cancel"})
	require.NoError(t, err)
	require.Empty(t, list.GetReports())

	// A deadline is the same: DeadlineExceeded, nothing stored.
	req := structured(&verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{sleeper("F1")}}, dir, "deadline")
	dctx, dcancel := context.WithTimeout(t.Context(), 200e6)
	defer dcancel()
	_, err = b.client.Verify(dctx, req)
	requireCode(t, err, codes.DeadlineExceeded)
}

// TestGitTarget checks out a repository served over HTTP by git's own smart-HTTP backend.
func TestGitTarget(t *testing.T) {
	t.Parallel()
	repo, commit := gitRepo(t)
	url := gitServer(t, repo)
	b := setup(t, backends[1])
	set := &verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{
		{Id: "F1", Name: "service file", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_File{File: &verifierv1.FileCheck{Target: &verifierv1.FileCheck_Path{Path: "svc/main.go"},
				Expect: &verifierv1.FileExpectation{Content: &verifierv1.TextExpectation{Contains: []string{"package main"}}}}}},
		{Id: "F2", Name: "version", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{Argv: []string{"cat", "VERSION"},
				Expect: &verifierv1.CommandExpectation{Stdout: &verifierv1.TextExpectation{Contains: []string{"2.0.0"}}}}}},
	}}
	req := func(ref string) *verifierv1.VerifyRequest {
		return &verifierv1.VerifyRequest{
			CriteriaSource: &verifierv1.VerifyRequest_Criteria{Criteria: set},
			Target:         &verifierv1.Target{Directory: &verifierv1.Target_Git{Git: &verifierv1.GitSource{RepositoryUrl: url, Ref: ref}}},
			LoopKey:        "git",
			MaxAttempts:    1,
		}
	}
	for _, ref := range []string{"main", "", commit} {
		r := b.verify(t, req(ref))
		require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, r.GetVerdict(), "ref %q: %v", ref, r.GetResults())
		require.Equal(t, commit, r.GetTarget().GetCommit())
		require.Equal(t, url, r.GetTarget().GetRepositoryUrl())
		require.Contains(t, r.GetTarget().GetDescription(), "("+commit[:7]+")")
		_, err := os.Stat(r.GetTarget().GetDirectory())
		require.True(t, os.IsNotExist(err), "the scratch worktree is deleted")
	}
	r := b.verify(t, req("no-such-branch"))
	require.Equal(t, commonv1.Verdict_VERDICT_BLOCKED, r.GetVerdict())
	require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_TARGET_UNAVAILABLE, r.GetBlockReason())
	require.Contains(t, r.GetBlockDetail(), "fetch "+url+" no-such-branch")

	sub := req("main")
	sub.Target.GetGit().Subdirectory = "svc"
	set.Criteria[0].GetFile().Target = &verifierv1.FileCheck_Path{Path: "main.go"}
	set.Criteria = set.Criteria[:1]
	require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, b.verify(t, sub).GetVerdict())
}

// gitRepo creates a repository with two commits on main and answers its path and head commit.
func gitRepo(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	run("init", "-q", "-b", "main")
	writeFile(t, filepath.Join(dir, "VERSION"), "1.0.0\n")
	run("add", ".")
	run("commit", "-q", "-m", "one")
	writeFile(t, filepath.Join(dir, "VERSION"), "2.0.0\n")
	writeFile(t, filepath.Join(dir, "svc/main.go"), "package main\n")
	run("add", ".")
	run("commit", "-q", "-m", "two")
	run("config", "uploadpack.allowAnySHA1InWant", "true")
	return dir, run("rev-parse", "HEAD")
}

// gitServer serves the repository at dir over smart HTTP (git http-backend as CGI).
func gitServer(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("git", "--exec-path").Output()
	require.NoError(t, err)
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	h := &cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(dir), "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_GLOBAL=/dev/null"},
	}
	srv := httptest.NewServer(http.StripPrefix("", h))
	t.Cleanup(srv.Close)
	return fmt.Sprintf("%s/%s", srv.URL, filepath.Base(dir))
}

// A scratch target is an empty directory of the Verifier's own, removed after the run: a caller
// with no repository shares no file system with the Verifier.
func TestScratchTarget(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1])
	set := &verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{
		{Id: "S1", Name: "empty and writable", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{Shell: `test -z "$(ls -A)" && touch made && test -f made`}}},
	}}
	r := b.verify(t, &verifierv1.VerifyRequest{
		CriteriaSource: &verifierv1.VerifyRequest_Criteria{Criteria: set},
		Target:         &verifierv1.Target{Directory: &verifierv1.Target_Scratch{Scratch: true}},
		LoopKey:        "scratch", MaxAttempts: 1,
	})
	require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, r.GetVerdict(), "%v", r.GetResults())
	require.Contains(t, r.GetTarget().GetDescription(), "scratch directory")
	_, err := os.Stat(r.GetTarget().GetDirectory())
	require.True(t, os.IsNotExist(err), "the scratch directory is deleted")

	_, err = b.client.Verify(t.Context(), &verifierv1.VerifyRequest{
		CriteriaSource: &verifierv1.VerifyRequest_Criteria{Criteria: set},
		Target:         &verifierv1.Target{Directory: &verifierv1.Target_Scratch{Scratch: false}},
		LoopKey:        "scratch", MaxAttempts: 1,
	})
	requireCode(t, err, codes.InvalidArgument)
}
