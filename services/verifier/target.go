package verifier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/backoff"
	"github.com/converge-dev/converge/platform/gitexec"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/services/verifier/check"
)

// gitTimeout bounds each git command of a checkout.
const gitTimeout = 10 * time.Minute

// fullSHA is a commit id as a ref.
var fullSHA = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// checkLocalDir refuses a local_dir outside the allowed roots (after resolving symlinks; a
// directory that does not exist is judged by its path, and BLOCKED later).
func (s *Server) checkLocalDir(dir string) *grpcerr.FieldViolation {
	if len(s.cfg.allowedRoots) == 0 {
		return &grpcerr.FieldViolation{Field: "target.local_dir",
			Description: "this verifier allows no local directories: start it with --allowed-root (or give a git target)"}
	}
	path := filepath.Clean(dir)
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		path = resolved
	}
	for _, root := range s.cfg.allowedRoots {
		if within(root, path) {
			return nil
		}
	}
	return &grpcerr.FieldViolation{Field: "target.local_dir",
		Description: "is outside the verifier's allowed roots (its --allowed-root flag): give a directory inside one of them"}
}

func within(root, path string) bool {
	if path == root {
		return true
	}
	return strings.HasPrefix(path, strings.TrimSuffix(root, string(filepath.Separator))+string(filepath.Separator))
}

// resolveTarget turns the request's target into what checks run against, and describes it. A
// git target is checked out into a scratch worktree that cleanup removes. A directory that
// cannot be used does not fail the request: its checks are ERROR (BLOCKED) with the reason.
func (s *Server) resolveTarget(ctx context.Context, t *verifierv1.Target, o *check.Options, dryRun bool) (*check.Target, *verifierv1.ResolvedTarget, func()) {
	ct := &check.Target{
		BaseURL:      t.GetBaseUrl(),
		GRPCAddress:  t.GetGrpcAddress(),
		GRPCSecurity: t.GetGrpcSecurity(),
	}
	if ct.GRPCSecurity == verifierv1.TransportSecurity_TRANSPORT_SECURITY_UNSPECIFIED {
		ct.GRPCSecurity = verifierv1.TransportSecurity_TRANSPORT_SECURITY_PLAINTEXT
	}
	rt := &verifierv1.ResolvedTarget{BaseUrl: t.GetBaseUrl(), GrpcAddress: t.GetGrpcAddress()}
	cleanup := func() {}
	var parts []string

	switch {
	case t.GetLocalDir() != "":
		dir := filepath.Clean(t.GetLocalDir())
		parts = append(parts, "dir "+dir)
		resolved, err := filepath.EvalSymlinks(dir)
		if err == nil {
			if fi, serr := os.Stat(resolved); serr != nil || !fi.IsDir() {
				err = errors.New("not a directory")
			}
		}
		if err == nil && s.checkLocalDir(resolved) != nil {
			// A symlink changed between the request's validation and now.
			err = errors.New("it now resolves outside the verifier's allowed roots")
		}
		if err != nil {
			ct.DirUnavailable = fmt.Sprintf("target directory %s is unavailable: %s", dir, describeErr(err))
			rt.Directory = dir
			break
		}
		ct.Dir, rt.Directory = resolved, resolved
	case t.GetGit() != nil:
		g := t.GetGit()
		rt.RepositoryUrl, rt.Ref = g.GetRepositoryUrl(), g.GetRef()
		ref := g.GetRef()
		if ref == "" {
			ref = "HEAD"
		}
		desc := fmt.Sprintf("git %s@%s", g.GetRepositoryUrl(), ref)
		if dryRun {
			parts = append(parts, desc)
			break
		}
		dir, commit, cleanupDir, err := s.checkout(ctx, g, o)
		cleanup = cleanupDir
		if err != nil {
			ct.DirUnavailable = err.Error()
			_, ct.DirDenied = err.(*destinationDeniedError)
			parts = append(parts, desc)
			break
		}
		rt.Commit = commit
		parts = append(parts, fmt.Sprintf("%s (%s)", desc, commit[:min(len(commit), 7)]))
		root := dir
		if sub := g.GetSubdirectory(); sub != "" {
			root = filepath.Join(dir, filepath.FromSlash(sub))
			if resolved, err := filepath.EvalSymlinks(root); err != nil || !within(dir, resolved) {
				ct.DirUnavailable = fmt.Sprintf("subdirectory %s is not in %s at %s", sub, g.GetRepositoryUrl(), commit)
				break
			} else {
				root = resolved
			}
		}
		ct.Dir, rt.Directory = root, root
	case t.GetScratch():
		parts = append(parts, "scratch directory")
		if dryRun {
			break
		}
		dir, err := os.MkdirTemp(s.cfg.scratchDir, "converge-scratch-")
		if err != nil {
			ct.DirUnavailable = fmt.Sprintf("create a scratch directory: %v", err)
			break
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
		if err := check.GiveToSandbox(s.cfg.sandbox, dir); err != nil {
			ct.DirUnavailable = fmt.Sprintf("give the scratch directory to the sandbox user: %v", err)
			break
		}
		if resolved, err := filepath.EvalSymlinks(dir); err == nil {
			dir = resolved
		}
		ct.Dir, rt.Directory = dir, dir
	}
	if t.GetBaseUrl() != "" {
		parts = append(parts, t.GetBaseUrl())
	}
	if t.GetGrpcAddress() != "" {
		parts = append(parts, "grpc "+t.GetGrpcAddress())
	}
	rt.Description = strings.Join(parts, " + ")
	return ct, rt, cleanup
}

func describeErr(err error) string {
	if os.IsNotExist(err) {
		return "no such directory"
	}
	return err.Error()
}

// checkout fetches ref of the repository (shallow) into a new scratch worktree and answers its
// directory (symlinks resolved) and commit. Fetches that fail are retried like connections.
func (s *Server) checkout(ctx context.Context, g *verifierv1.GitSource, o *check.Options) (dir, commit string, cleanup func(), err error) {
	cleanup = func() {}
	if _, err := exec.LookPath("git"); err != nil {
		return "", "", cleanup, errors.New("git is not installed on the verifier: a git target needs it")
	}
	scratch, err := os.MkdirTemp(s.cfg.scratchDir, "converge-checkout-")
	if err != nil {
		return "", "", cleanup, fmt.Errorf("create a scratch worktree: %w", err)
	}
	cleanup = func() { _ = os.RemoveAll(scratch) }
	if resolved, err := filepath.EvalSymlinks(scratch); err == nil {
		scratch = resolved
	}
	url, ref := g.GetRepositoryUrl(), g.GetRef()
	if ref == "" {
		ref = "HEAD"
	}
	if _, err := git(ctx, scratch, "init", "-q"); err != nil {
		return "", "", cleanup, fmt.Errorf("git init: %w", err)
	}
	// Fetches connect through the destination policy's proxy (see destinations.go).
	px, netArgs, netEnv, err := s.gitNetwork()
	if err != nil {
		return "", "", cleanup, err
	}
	defer func() { _ = px.Close() }()
	fetch := func(args ...string) error {
		_, err := gitexecRun(ctx, scratch, append(append(append([]string{}, netArgs...), "fetch"), args...), netEnv)
		if d := px.Denied(); len(d) > 0 {
			return &destinationDeniedError{err: d[0]}
		}
		return err
	}
	var fetchErr error
	for attempt := int32(1); ; attempt++ {
		fetchErr = fetch("-q", "--depth", "1", "--no-tags", url, ref)
		if _, ok := fetchErr.(*destinationDeniedError); ok {
			break
		}
		if fetchErr != nil && fullSHA.MatchString(ref) {
			// Servers that refuse to fetch a commit by id still serve every branch.
			fetchErr = fetch("-q", "--no-tags", url, "+refs/heads/*:refs/remotes/origin/*")
			if fetchErr == nil {
				ref = "sha"
			}
		}
		if fetchErr == nil || ctx.Err() != nil || int(attempt) >= o.MaxAttempts {
			break
		}
		if backoff.Wait(ctx, o.RetryBackoff<<(attempt-1)) != nil {
			break
		}
	}
	if d, ok := fetchErr.(*destinationDeniedError); ok {
		return "", "", cleanup, d
	}
	if fetchErr != nil {
		return "", "", cleanup, fmt.Errorf("fetch %s %s: %w", url, g.GetRef(), fetchErr)
	}
	target := "FETCH_HEAD"
	if ref == "sha" {
		target = g.GetRef()
	}
	if _, err := git(ctx, scratch, "checkout", "-q", "--detach", target); err != nil {
		return "", "", cleanup, fmt.Errorf("check out %s of %s: %w", g.GetRef(), url, err)
	}
	out, err := git(ctx, scratch, "rev-parse", "HEAD")
	if err != nil {
		return "", "", cleanup, fmt.Errorf("read the commit of %s: %w", url, err)
	}
	if err := check.GiveToSandbox(s.cfg.sandbox, scratch); err != nil {
		return "", "", cleanup, fmt.Errorf("give the checkout to the sandbox user: %w", err)
	}
	return scratch, strings.TrimSpace(out), cleanup, nil
}

// git runs git (platform/gitexec: fixed config and environment, no prompt, capped output) in dir
// with a timeout and answers its standard output; the error is git's own last line of explanation.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	return gitexecRun(ctx, dir, args, nil)
}

// gitexecRun is git with extra environment.
func gitexecRun(ctx context.Context, dir string, args, env []string) (string, error) {
	out, err := gitexec.Cmd{Dir: dir, Args: args, Env: env, Timeout: gitTimeout}.Run(ctx)
	var ge *gitexec.Error
	if errors.As(err, &ge) {
		return "", errors.New(ge.Reason())
	}
	return out, err
}

// destinationDeniedError is a fetch the destination policy refused (BLOCK_REASON_DESTINATION_DENIED).
type destinationDeniedError struct{ err error }

func (e *destinationDeniedError) Error() string { return "fetch refused: " + e.err.Error() }
