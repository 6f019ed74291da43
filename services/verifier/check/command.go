package check

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/proc"
)

// waitDelay is how long a command's output pipes may stay open after it exited or was killed
// (a process that left its group holding them) before the verifier stops reading.
const waitDelay = 2 * time.Second

// runCommand runs a command check: argv or `sh -c` in the target directory (or an empty scratch
// directory), with a minimal environment, a timeout that kills the whole process group, and
// output kept up to the cap.
func runCommand(ctx context.Context, t *Target, o *Options, cc *verifierv1.CommandCheck) outcome {
	argv := cc.GetArgv()
	if len(argv) == 0 {
		argv = []string{"sh", "-c", cc.GetShell()}
	}

	env, missing := commandEnv(o, cc)
	if len(missing) > 0 {
		return blocked(verifierv1.BlockReason_BLOCK_REASON_CREDENTIAL_MISSING, 0,
			"environment variable %s is not set on the verifier (env_passthrough)", strings.Join(missing, ", "))
	}

	if out, ok := rootAvailable(t); !ok {
		return out
	}
	if o.Sandbox != nil {
		// A home and temporary directory of the check's own, owned by the sandbox user: never
		// the verifier's.
		home, err := os.MkdirTemp(o.ScratchDir, "converge-home-")
		if err != nil {
			return blocked(verifierv1.BlockReason_BLOCK_REASON_VERIFIER_ENVIRONMENT, 0, "create a home directory: %v", err)
		}
		defer os.RemoveAll(home)
		if err := GiveToSandbox(o.Sandbox, home); err != nil {
			return blocked(verifierv1.BlockReason_BLOCK_REASON_VERIFIER_ENVIRONMENT, 0, "prepare the sandbox: %v", err)
		}
		env = setEnv(env, "HOME", home)
		env = setEnv(env, "TMPDIR", home)
	}
	root := t.Dir
	if root == "" {
		scratch, err := os.MkdirTemp(o.ScratchDir, "converge-verify-")
		if err != nil {
			return blocked(verifierv1.BlockReason_BLOCK_REASON_VERIFIER_ENVIRONMENT, 0, "create a scratch directory: %v", err)
		}
		defer os.RemoveAll(scratch)
		if err := GiveToSandbox(o.Sandbox, scratch); err != nil {
			return blocked(verifierv1.BlockReason_BLOCK_REASON_VERIFIER_ENVIRONMENT, 0, "prepare the sandbox: %v", err)
		}
		if root, err = filepath.EvalSymlinks(scratch); err != nil {
			return blocked(verifierv1.BlockReason_BLOCK_REASON_VERIFIER_ENVIRONMENT, 0, "resolve the scratch directory: %v", err)
		}
	}

	var a assertions
	ev := &verifierv1.CommandEvidence{Argv: argv, WorkingDir: cc.GetWorkingDir()}
	evidence := &verifierv1.Evidence{Kind: &verifierv1.Evidence_Command{Command: ev}}
	display := displayCommand(cc)

	dir := root
	if wd := cc.GetWorkingDir(); wd != "" {
		resolved, err := insideRoot(root, wd)
		if err != nil {
			a.add(fmt.Sprintf("working directory %q exists in the target", wd), false, err.Error())
			evidence.Summary = fmt.Sprintf("`%s` not run: %v", display, err)
			evidence.Assertions = a.list
			return outcome{status: judge(&a), evidence: evidence, attempts: 1}
		}
		if fi, err := os.Stat(resolved); err != nil || !fi.IsDir() {
			a.add(fmt.Sprintf("working directory %q exists in the target", wd), false, "no such directory")
			evidence.Summary = fmt.Sprintf("`%s` not run: working directory %s does not exist", display, wd)
			evidence.Assertions = a.list
			return outcome{status: judge(&a), evidence: evidence, attempts: 1}
		}
		dir = resolved
	}

	timeout := o.timeout(cc.GetTimeout())
	capt, err := newCapture(o.OutputBudget, o.OutputCap, o.ScratchDir)
	if err != nil {
		return blocked(verifierv1.BlockReason_BLOCK_REASON_VERIFIER_ENVIRONMENT, 0, "keep the output: %v", err)
	}
	defer capt.release()
	stdout, stderr := capt.stdout, capt.stderr
	spec := proc.Spec{
		Argv:      argv,
		Dir:       dir,
		Env:       env,
		Timeout:   timeout,
		Stdout:    stdout,
		Stderr:    stderr,
		WaitDelay: waitDelay,
		Sandbox:   o.Sandbox,
	}
	if cc.GetStdin() != "" {
		spec.Stdin = strings.NewReader(cc.GetStdin())
	}

	o.attempt(1)
	// proc.Run kills the command's whole process group on timeout and once it exits.
	run := proc.Run(ctx, spec)
	if err := run.Err; err != nil {
		if isNotFound(err) {
			return blocked(verifierv1.BlockReason_BLOCK_REASON_PROGRAM_MISSING, 1,
				"program %q is not installed on the verifier (not found in PATH)", argv[0])
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return blocked(verifierv1.BlockReason_BLOCK_REASON_UNSPECIFIED, 1, "cancelled")
		}
		return blocked(verifierv1.BlockReason_BLOCK_REASON_VERIFIER_ENVIRONMENT, 1, "start `%s`: %v", display, err)
	}
	elapsed := run.Duration
	timedOut := run.TimedOut
	exitCode := run.ExitCode

	out, errOut, err := capt.texts(ctx)
	if err != nil {
		return blocked(verifierv1.BlockReason_BLOCK_REASON_UNSPECIFIED, 1, "cancelled")
	}
	ev.ExitCode = int32(exitCode)
	ev.TimedOut = timedOut
	// Copies: a substring would keep the whole kept output (up to the cap) alive with the report.
	ev.StdoutTail = strings.Clone(tail(out, o.ExcerptBytes))
	ev.StderrTail = strings.Clone(tail(errOut, o.ExcerptBytes))
	ev.StdoutBytes = stdout.Total()
	ev.StderrBytes = stderr.Total()
	ev.OutputTruncated = stdout.Truncated()

	wantExit := int32(0)
	if cc.GetExpect() != nil && cc.GetExpect().ExitCode != nil {
		wantExit = cc.GetExpect().GetExitCode()
	}
	if len(cc.GetArgv()) == 0 && exitCode == 127 && wantExit != 127 {
		// sh answers 127 for a command it cannot find.
		res := blocked(verifierv1.BlockReason_BLOCK_REASON_PROGRAM_MISSING, 1,
			"a program of `%s` is not installed on the verifier (sh exit status 127): %s", display, strings.TrimSpace(tail(errOut, 512)))
		res.evidence.Kind = evidence.Kind
		return res
	}

	switch {
	case timedOut:
		a.add(fmt.Sprintf("exit code == %d", wantExit), false, fmt.Sprintf("killed after the %s timeout", timeout))
		evidence.Summary = fmt.Sprintf("`%s` was killed after its %s timeout", display, timeout)
	case exitCode < 0:
		a.add(fmt.Sprintf("exit code == %d", wantExit), false, "killed by a signal: "+run.Status)
		evidence.Summary = fmt.Sprintf("`%s` was killed by a signal after %s", display, roundDuration(elapsed))
	default:
		a.add(fmt.Sprintf("exit code == %d", wantExit), int32(exitCode) == wantExit, strconv.Itoa(exitCode))
		evidence.Summary = fmt.Sprintf("`%s` exited %d in %s", display, exitCode, roundDuration(elapsed))
	}
	e := cc.GetExpect()
	checkText(&a, textSource{label: "stdout", text: out, fromEnd: true}, e.GetStdout())
	checkText(&a, textSource{label: "stderr", text: errOut, fromEnd: true}, e.GetStderr())
	checkJSONFields(&a, "stdout", out, e.GetStdoutJson())
	evidence.Assertions = a.list

	res := outcome{status: judge(&a), evidence: evidence, attempts: 1}
	if res.status == verifierv1.CriterionStatus_CRITERION_STATUS_FAIL && t.Dir != "" {
		res.file, res.line = locate(t.Dir, dir, errOut+"\n"+out)
	}
	return res
}

// commandEnv builds a command's environment: PATH, HOME, LANG, LC_ALL and TMPDIR of the
// verifier, the check's env, and its env_passthrough (proc.EnvFrom). It answers the passthrough
// names that are not set.
func commandEnv(o *Options, cc *verifierv1.CommandCheck) (env, missing []string) {
	return proc.EnvFrom(o.lookupEnv, cc.GetEnvPassthrough(), cc.GetEnv())
}

func isNotFound(err error) bool {
	return errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)
}

// displayCommand is the command as a person would type it, shortened.
func displayCommand(cc *verifierv1.CommandCheck) string {
	s := cc.GetShell()
	if s == "" {
		parts := make([]string, len(cc.GetArgv()))
		for i, arg := range cc.GetArgv() {
			parts[i] = shellQuote(arg)
		}
		s = strings.Join(parts, " ")
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = head(s, 120) + "…"
	}
	return s
}

var safeArg = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

func shellQuote(s string) string {
	if safeArg.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// insideRoot resolves the target-relative path rel under root (symlinks included) and refuses
// one that leaves root. A path that does not exist is answered as joined.
func insideRoot(root, rel string) (string, error) {
	joined := filepath.Join(root, filepath.FromSlash(rel))
	resolved, err := filepath.EvalSymlinks(joined)
	if err != nil {
		if os.IsNotExist(err) {
			return joined, nil
		}
		return "", err
	}
	if !within(root, resolved) {
		return "", fmt.Errorf("%s leaves the target directory", rel)
	}
	return resolved, nil
}

// within reports whether path is root or inside it (both clean and absolute).
func within(root, path string) bool {
	if path == root {
		return true
	}
	return strings.HasPrefix(path, strings.TrimSuffix(root, string(filepath.Separator))+string(filepath.Separator))
}

// locations are the ways tools name a file and line in their output.
var locations = []*regexp.Regexp{
	regexp.MustCompile(`File "([^"\n]+)", line (\d+)`),                                // Python
	regexp.MustCompile(`([A-Za-z0-9_./@+-]*[A-Za-z0-9_]\.[A-Za-z0-9]+)\((\d+),\d+\)`), // tsc
	regexp.MustCompile(`([A-Za-z0-9_./@+-]*[A-Za-z0-9_]\.[A-Za-z0-9]+):(\d+)`),        // go, gcc, eslint, jest
}

// locate finds the first file:line in output naming a file that exists in the target, and
// answers it target-relative.
func locate(root, dir, output string) (string, int32) {
	type hit struct {
		at   int
		file string
		line int32
	}
	var hits []hit
	for _, re := range locations {
		for _, m := range re.FindAllStringSubmatchIndex(output, 50) {
			n, err := strconv.ParseInt(output[m[4]:m[5]], 10, 32)
			if err != nil || n <= 0 {
				continue
			}
			hits = append(hits, hit{at: m[0], file: output[m[2]:m[3]], line: int32(n)})
		}
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].at < hits[j].at })
	for _, h := range hits {
		candidates := []string{h.file}
		if !filepath.IsAbs(h.file) {
			candidates = []string{filepath.Join(dir, h.file), filepath.Join(root, h.file)}
		}
		for _, c := range candidates {
			c = filepath.Clean(c)
			if !within(root, c) {
				continue
			}
			if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() {
				rel, err := filepath.Rel(root, c)
				if err == nil {
					return filepath.ToSlash(rel), h.line
				}
			}
		}
	}
	return "", 0
}

// setEnv sets name in a sorted NAME=value list.
func setEnv(env []string, name, value string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	out = append(out, name+"="+value)
	sort.Strings(out)
	return out
}

// GiveToSandbox makes dir (and everything under it) belong to the sandbox's user, so that a
// check may write where the verifier made room for it: its home, a scratch directory, a
// checkout. Nothing to do without a sandbox or when the sandbox runs as the verifier's user.
func GiveToSandbox(s *proc.Sandbox, dir string) error {
	if s == nil || s.UID < 0 || s.UID == os.Geteuid() {
		return nil
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, s.UID, s.GID)
	})
}
