package scheduler

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// recordingVerifier answers CONVERGED and keeps the requests it got.
type recordingVerifier struct {
	verifierv1.UnimplementedVerifierServiceServer
	mu   sync.Mutex
	reqs []*verifierv1.VerifyRequest
	// heads are the commits checked out in the requests' local directories.
	heads []string
}

func (v *recordingVerifier) Verify(_ context.Context, req *verifierv1.VerifyRequest) (*verifierv1.VerifyResponse, error) {
	v.mu.Lock()
	v.reqs = append(v.reqs, proto.Clone(req).(*verifierv1.VerifyRequest))
	if dir := req.GetTarget().GetLocalDir(); dir != "" {
		out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
		v.heads = append(v.heads, strings.TrimSpace(string(out))+fmt.Sprint(errText(err)))
	}
	if g := req.GetTarget().GetGit(); g != nil && strings.Contains(g.GetRepositoryUrl(), "/export/") {
		// Fetch the commit as the real Verifier does: a shallow fetch of the ref from the URL.
		v.heads = append(v.heads, fetchHead(g.GetRepositoryUrl(), g.GetRef()))
	}
	v.mu.Unlock()
	return &verifierv1.VerifyResponse{Report: &verifierv1.VerifyReport{Id: "vr_1", Verdict: commonv1.Verdict_VERDICT_CONVERGED, PassCount: 1}}, nil
}

// fetchHead fetches ref of the repository at url into a new repository and answers the commit
// fetched (or the error).
func fetchHead(url, ref string) string {
	dir, err := os.MkdirTemp("", "fetch-")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	for _, args := range [][]string{{"init", "-q"}, {"fetch", "-q", "--depth", "1", url, ref}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			return fmt.Sprintf("git %v: %v: %s", args, err, out)
		}
	}
	out, err := exec.Command("git", "-C", dir, "rev-parse", "FETCH_HEAD").Output()
	return strings.TrimSpace(string(out)) + errText(err)
}

func errText(err error) string {
	if err != nil {
		return " " + err.Error()
	}
	return ""
}

func (v *recordingVerifier) requests() []*verifierv1.VerifyRequest {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]*verifierv1.VerifyRequest(nil), v.reqs...)
}

// gitIn runs git in dir (no user configuration) and answers its trimmed output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// servedRepo creates a repository with one commit on main and serves it over smart HTTP (git
// http-backend as CGI); it answers the repository's directory and URL.
func servedRepo(t *testing.T) (string, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "app.git")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	gitIn(t, dir, "init", "-q", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README"), []byte("app\n"), 0o644))
	gitIn(t, dir, "add", ".")
	gitIn(t, dir, "commit", "-q", "-m", "one")
	out, err := exec.Command("git", "--exec-path").Output()
	require.NoError(t, err)
	h := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(out)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(dir), "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1"},
	}
	srv := httptest.NewServer(http.Handler(h))
	t.Cleanup(srv.Close)
	return dir, fmt.Sprintf("%s/%s", srv.URL, filepath.Base(dir))
}

// Issue 13: Verify Done of an http(s) repository hands the Verifier a git source — the repository
// URL at the run branch's commit (the last wave's integration commit) — not a directory: the
// Scheduler checks nothing out, and the two services share no file system.
func TestVerifyDoneOfAURLRepositoryIsAGitSourceAtTheRunCommit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		dir, url := servedRepo(t)
		v := &recordingVerifier{}
		work := t.TempDir()
		b := bundleWith(t, st, WithVerifier(serveVerifier(t, v)), WithWorkDir(work))
		spec := withCriteria("git-source")
		spec.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Url{Url: url}}
		e := b.start(t, b.createList(t, spec), nil)
		require.Equal(t, "converge/"+e.GetId(), e.GetRunBranch())

		var runCommit string
		deadline := time.Now().Add(20 * time.Second)
		for ex, _ := b.execution(t, e.GetId()); !ended(ex) && time.Now().Before(deadline); ex, _ = b.execution(t, e.GetId()) {
			c := b.claim(t, "agent-1", 200*time.Millisecond)
			if c == nil {
				continue
			}
			req := &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(), InstanceId: "agent-1",
				FencingToken: c.GetAssignment().GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1}
			if c.GetAssignment().GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
				req.CommitSha = c.GetBaseCommit() // a commit to merge: the wave gets an integration
			}
			if c.GetAssignment().GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION {
				// The integration agent pushes the run branch with a commit of its own.
				gitIn(t, dir, "checkout", "-q", "-b", c.GetRunBranch())
				require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644))
				gitIn(t, dir, "add", ".")
				gitIn(t, dir, "commit", "-q", "-m", "integrate")
				runCommit = gitIn(t, dir, "rev-parse", "HEAD")
				req.CommitSha = runCommit
			}
			_, err := b.client.CompleteTask(t.Context(), req)
			require.NoError(t, err)
		}
		e = b.waitEnded(t, e.GetId())
		require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, e.GetOutcome(), e.GetStatusMessage())
		require.NotEmpty(t, runCommit)

		reqs := v.requests()
		require.Len(t, reqs, 1)
		target := reqs[0].GetTarget()
		require.Empty(t, target.GetLocalDir(), "no directory is handed over")
		require.Equal(t, url, target.GetGit().GetRepositoryUrl())
		require.Equal(t, runCommit, target.GetGit().GetRef(), "the run branch's commit, not its name")
		_, err := os.Stat(filepath.Join(work, verificationCheckoutDir))
		require.True(t, os.IsNotExist(err), "the Scheduler checked nothing out: %v", err)
	})
}

// A local repository cannot be a git source (the Verifier's git sources are http(s) only): the
// Scheduler hands the Verifier a checkout of the run branch's commit in its work dir.
func TestVerifyDoneOfALocalRepositoryIsACheckoutOfTheRunCommit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		work := t.TempDir()
		v, runCommit := verifyLocalRepository(t, st, WithWorkDir(work))
		reqs := v.requests()
		require.Len(t, reqs, 1)
		checkout := reqs[0].GetTarget().GetLocalDir()
		require.Nil(t, reqs[0].GetTarget().GetGit())
		require.True(t, strings.HasPrefix(checkout, filepath.Join(work, verificationCheckoutDir)+string(filepath.Separator)), checkout)
		v.mu.Lock()
		require.Equal(t, []string{runCommit}, v.heads, "the checkout is at the integration commit, not the branch's tip")
		v.mu.Unlock()
		// Verify Done runs off the driver's loop: the run ends, then its checkout goes.
		require.Eventually(t, func() bool {
			_, err := os.Stat(checkout)
			return os.IsNotExist(err)
		}, 10*time.Second, 10*time.Millisecond, "the checkout is removed after Verify Done")
	})
}

// With the git export, a local repository reaches the Verifier as a git source too: it fetches
// the run's commit over HTTP from the Scheduler, the two share no file system, and the export's
// URL answers nothing once Verify Done is over.
func TestVerifyDoneOfALocalRepositoryThroughTheGitExport(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		var handler atomic.Pointer[http.Handler]
		srv := httptest.NewServer(http.StripPrefix("/export", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			(*handler.Load()).ServeHTTP(w, r)
		})))
		t.Cleanup(srv.Close)
		v, runCommit := verifyLocalRepository(t, st, WithWorkDir(t.TempDir()), WithGitExport(srv.URL+"/export"),
			func(s *Server) { h := s.GitHandler(); handler.Store(&h) })
		reqs := v.requests()
		require.Len(t, reqs, 1)
		g := reqs[0].GetTarget().GetGit()
		require.NotNil(t, g, "%v", reqs[0].GetTarget())
		require.Empty(t, reqs[0].GetTarget().GetLocalDir())
		require.Equal(t, runCommit, g.GetRef())
		v.mu.Lock()
		require.Equal(t, []string{runCommit}, v.heads, "the Verifier fetched the integration commit")
		v.mu.Unlock()
		require.Eventually(t, func() bool { return fetchHead(g.GetRepositoryUrl(), g.GetRef()) != runCommit },
			10*time.Second, 20*time.Millisecond, "the export ends with Verify Done")
		res, err := http.Get(srv.URL + "/export/anything/info/refs?service=git-upload-pack")
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusNotFound, res.StatusCode)
		res, err = http.Post(g.GetRepositoryUrl()+"/git-receive-pack", "application/x-git-receive-pack-request", strings.NewReader(""))
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusNotFound, res.StatusCode, "never a push")
	})
}

// A run without a repository hands the Verifier a scratch target: nothing of the Scheduler's disk.
func TestVerifyDoneWithoutARepositoryIsAScratchTarget(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		v := &recordingVerifier{}
		b := bundleWith(t, st, WithVerifier(serveVerifier(t, v)), WithWorkDir(t.TempDir()))
		e := b.start(t, b.createList(t, withCriteria("scratch")), nil)
		deadline := time.Now().Add(20 * time.Second)
		for ex, _ := b.execution(t, e.GetId()); !ended(ex) && time.Now().Before(deadline); ex, _ = b.execution(t, e.GetId()) {
			c := b.claim(t, "agent-1", 200*time.Millisecond)
			if c == nil {
				continue
			}
			_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(), InstanceId: "agent-1",
				FencingToken: c.GetAssignment().GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1})
			require.NoError(t, err)
		}
		e = b.waitEnded(t, e.GetId())
		require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, e.GetOutcome(), e.GetStatusMessage())
		reqs := v.requests()
		require.Len(t, reqs, 1)
		require.True(t, reqs[0].GetTarget().GetScratch(), "%v", reqs[0].GetTarget())
	})
}

// verifyLocalRepository runs a list on a local repository to Verify Done through a recording
// Verifier and answers it and the run's integration commit.
func verifyLocalRepository(t *testing.T, st store.Store, opts ...Option) (*recordingVerifier, string) {
	t.Helper()
	dir, _ := servedRepo(t)
	base := gitIn(t, dir, "rev-parse", "HEAD")
	v := &recordingVerifier{}
	b := bundleWith(t, st, append([]Option{WithVerifier(serveVerifier(t, v))}, opts...)...)
	spec := withCriteria("local-dir")
	spec.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: dir}}
	e := b.start(t, b.createList(t, spec), nil)
	var runCommit string
	deadline := time.Now().Add(20 * time.Second)
	for ex, _ := b.execution(t, e.GetId()); !ended(ex) && time.Now().Before(deadline); ex, _ = b.execution(t, e.GetId()) {
		c := b.claim(t, "agent-1", 200*time.Millisecond)
		if c == nil {
			continue
		}
		req := &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(), InstanceId: "agent-1",
			FencingToken: c.GetAssignment().GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1}
		if c.GetAssignment().GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
			req.CommitSha = c.GetBaseCommit() // a commit to merge: the wave gets an integration
		}
		if c.GetAssignment().GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION {
			// The run branch gets the integration commit, then moves on: Verify Done checks the
			// integration commit, not the branch's tip.
			gitIn(t, dir, "checkout", "-q", "-b", c.GetRunBranch())
			require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644))
			gitIn(t, dir, "add", ".")
			gitIn(t, dir, "commit", "-q", "-m", "integrate")
			runCommit = gitIn(t, dir, "rev-parse", "HEAD")
			require.NoError(t, os.WriteFile(filepath.Join(dir, "b.txt"), []byte("b\n"), 0o644))
			gitIn(t, dir, "add", ".")
			gitIn(t, dir, "commit", "-q", "-m", "later")
			gitIn(t, dir, "checkout", "-q", "main")
			req.CommitSha = runCommit
		}
		_, err := b.client.CompleteTask(t.Context(), req)
		require.NoError(t, err)
	}
	e = b.waitEnded(t, e.GetId())
	require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, e.GetOutcome(), e.GetStatusMessage())
	require.NotEqual(t, base, runCommit)
	return v, runCommit
}
