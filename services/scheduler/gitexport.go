package scheduler

import (
	"crypto/rand"
	"net/http"
	"net/http/cgi"
	"os/exec"
	"strings"
	"sync"
)

// gitExport serves local repositories read-only over git's smart HTTP (git http-backend), each at
// an unguessable path that exists only while a verification of it runs, so that a Verifier in
// another container fetches the run's commit like any http(s) git source.
type gitExport struct {
	base string // URL the Verifier reaches this replica's export at
	mu   sync.Mutex
	repo map[string]string // path token → local repository
}

// WithGitExport makes Verify Done hand the Verifier a git source for local repositories too:
// the Scheduler serves them at baseURL (GitHandler mounted there, reachable by the Verifier), each
// under a random path valid while its verification runs. Without it, a local repository is
// checked out under the work dir and handed over as a directory.
func WithGitExport(baseURL string) Option {
	return func(s *Server) {
		s.gitExport = &gitExport{base: strings.TrimRight(baseURL, "/"), repo: map[string]string{}}
	}
}

// export makes repo fetchable at the URL it answers until unexport is called.
func (g *gitExport) export(repo string) (url string, unexport func()) {
	token := rand.Text()
	g.mu.Lock()
	g.repo[token] = repo
	g.mu.Unlock()
	return g.base + "/" + token, func() {
		g.mu.Lock()
		delete(g.repo, token)
		g.mu.Unlock()
	}
}

// GitHandler serves the exported repositories (git http-backend: fetch only, no push), 404 for
// any other path. Mount it at the path of WithGitExport's URL.
func (s *Server) GitHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := s.gitExport
		if g == nil {
			http.NotFound(w, r)
			return
		}
		token, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		g.mu.Lock()
		repo, ok := g.repo[token]
		g.mu.Unlock()
		// Only what a fetch needs: the ref advertisement and upload-pack.
		fetch := (r.Method == http.MethodGet && rest == "info/refs" && r.URL.Query().Get("service") == "git-upload-pack") ||
			(r.Method == http.MethodPost && rest == "git-upload-pack")
		if !ok || !fetch {
			http.NotFound(w, r)
			return
		}
		bin, err := exec.LookPath("git")
		if err != nil {
			http.Error(w, "git is not installed on the scheduler", http.StatusServiceUnavailable)
			return
		}
		h := &cgi.Handler{
			Path: bin, Args: []string{"http-backend"}, Root: "/" + token,
			Env: []string{"GIT_PROJECT_ROOT=" + repo, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1",
				// The Verifier may fetch the run's commit by id.
				"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=uploadpack.allowReachableSHA1InWant", "GIT_CONFIG_VALUE_0=true"},
		}
		h.ServeHTTP(w, r)
	})
}
