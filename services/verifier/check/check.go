// Package check runs the check of one done-criterion against a target and reports what it
// observed: a command, an HTTP request, a look at files, or a gRPC call. It never reports PASS
// for a check that did not run: a check that cannot run (the target directory is gone, the
// server does not accept connections after the retries, the program or a credential is missing)
// is ERROR with the reason, a check that ran and did not hold is FAIL, and both carry evidence.
package check

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/netguard"
	"github.com/converge-dev/converge/platform/proc"
)

// Target is what checks run against, as resolved by the caller.
type Target struct {
	// Dir is the absolute root directory of command and file checks, symlinks resolved; "" when
	// the target has no directory (command checks then run in an empty scratch directory).
	Dir string
	// DirUnavailable, when set, says why the target's directory cannot be used (a checkout
	// failed, the directory is missing): command and file checks are ERROR with it.
	DirUnavailable string
	// DirDenied says the directory is unavailable because the destination policy refused the
	// repository's address (BLOCK_REASON_DESTINATION_DENIED rather than TARGET_UNAVAILABLE).
	DirDenied bool
	// BaseURL is what http checks given by path are resolved against.
	BaseURL string
	// GRPCAddress is the address of grpc checks that name none.
	GRPCAddress string
	// GRPCSecurity is the security of grpc checks that set none.
	GRPCSecurity verifierv1.TransportSecurity
}

// Options are the limits and hooks of a verification, shared by its checks.
type Options struct {
	// DefaultTimeout bounds a check that sets no timeout of its own.
	DefaultTimeout time.Duration
	// OutputCap is how many bytes of each output a check keeps and matches against.
	OutputCap int64
	// ExcerptBytes is how many bytes of each output go into the evidence.
	ExcerptBytes int
	// MaxAttempts is how often a check that could not connect is tried.
	MaxAttempts int
	// RetryBackoff is the pause before the second attempt; it doubles for each further one.
	RetryBackoff time.Duration
	// LookupEnv reads the verifier's environment, for env_passthrough, header_env and
	// metadata_env (default os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// ScratchDir is where command checks without a target directory get their empty directory
	// (default os.TempDir()).
	ScratchDir string
	// OnAttempt, if set, hears each attempt of a check as it starts (1-based).
	OnAttempt func(attempt int32)
	// Destinations is the policy every connection of http and grpc checks is held to, after
	// resolution and on each redirect (platform/netguard); nil: none (every destination).
	Destinations *netguard.Policy
	// Sandbox confines command checks (platform/proc.Sandbox); nil: none.
	Sandbox *proc.Sandbox
	// OutputBudget bounds the memory of every command check's output together (shared by a
	// verifier's verifications); nil: none (each check keeps OutputCap per stream).
	OutputBudget *OutputBudget
}

// dialContext answers the dial function of a check's connections: bounded by timeout, held to
// the destination policy.
func (o *Options) dialContext(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if o.Destinations == nil {
		return d.DialContext
	}
	return o.Destinations.DialContext(d)
}

// denied answers the blocked outcome of a connection the destination policy refused.
func denied(err error, attempts int32) (outcome, bool) {
	d, ok := netguard.IsDenied(err)
	if !ok {
		return outcome{}, false
	}
	return blocked(verifierv1.BlockReason_BLOCK_REASON_DESTINATION_DENIED, attempts, "%s", d.Error()), true
}

func (o *Options) lookupEnv(name string) (string, bool) {
	if o.LookupEnv != nil {
		return o.LookupEnv(name)
	}
	return os.LookupEnv(name)
}

func (o *Options) timeout(d *durationpb.Duration) time.Duration {
	if d != nil {
		return d.AsDuration()
	}
	return o.DefaultTimeout
}

func (o *Options) attempt(n int32) {
	if o.OnAttempt != nil {
		o.OnAttempt(n)
	}
}

// Result is one criterion's result, plus where its failure most likely is when the check could
// tell (a file check's file, a file:line named by a command's output).
type Result struct {
	*verifierv1.CriterionResult
	// File is the target-relative file most likely at fault; "" when unknown.
	File string
	// Line is the 1-based line in File; 0 when unknown.
	Line int32
}

// outcome is what a check kind's runner answers.
type outcome struct {
	status   verifierv1.CriterionStatus
	evidence *verifierv1.Evidence
	err      string
	reason   verifierv1.BlockReason
	attempts int32
	file     string
	line     int32
}

// blocked is an outcome for a check that could not run.
func blocked(reason verifierv1.BlockReason, attempts int32, format string, args ...any) outcome {
	msg := fmt.Sprintf(format, args...)
	return outcome{
		status:   verifierv1.CriterionStatus_CRITERION_STATUS_ERROR,
		evidence: &verifierv1.Evidence{Summary: "could not run: " + msg},
		err:      msg,
		reason:   reason,
		attempts: attempts,
	}
}

// Run runs c's check against t. A criterion without a check (HUMAN_VERIFY) is not run: the
// caller decides those. ctx ending stops the check; the result is then meaningless and the
// caller discards it.
func Run(ctx context.Context, t *Target, o *Options, c *verifierv1.Criterion) Result {
	start := time.Now()
	var out outcome
	switch {
	case c.GetCommand() != nil:
		out = runCommand(ctx, t, o, c.GetCommand())
	case c.GetHttp() != nil:
		out = runHTTP(ctx, t, o, c.GetHttp())
	case c.GetFile() != nil:
		out = runFile(ctx, t, o, c.GetFile())
	case c.GetGrpc() != nil:
		out = runGRPC(ctx, t, o, c.GetGrpc())
	default:
		out = blocked(verifierv1.BlockReason_BLOCK_REASON_UNSPECIFIED, 0, "criterion %s has no check", c.GetId())
	}
	return Result{
		CriterionResult: &verifierv1.CriterionResult{
			CriterionId: c.GetId(),
			Name:        c.GetName(),
			Tag:         c.GetTag(),
			Status:      out.status,
			Evidence:    out.evidence,
			Error:       out.err,
			BlockReason: out.reason,
			Duration:    durationpb.New(time.Since(start)),
			Attempts:    out.attempts,
		},
		File: out.file,
		Line: out.line,
	}
}

// judge turns assertions into PASS or FAIL.
func judge(a *assertions) verifierv1.CriterionStatus {
	if a.passed() {
		return verifierv1.CriterionStatus_CRITERION_STATUS_PASS
	}
	return verifierv1.CriterionStatus_CRITERION_STATUS_FAIL
}

// sleep waits d or until ctx ends, and reports whether the full pause elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// backoff is the pause after attempt n (1-based): RetryBackoff doubling.
func (o *Options) backoff(n int32) time.Duration {
	d := o.RetryBackoff
	for i := int32(1); i < n && d < time.Hour; i++ {
		d *= 2
	}
	return d
}

// rootAvailable checks that the target directory can be used by a command or file check.
func rootAvailable(t *Target) (outcome, bool) {
	if t.DirUnavailable != "" {
		reason := verifierv1.BlockReason_BLOCK_REASON_TARGET_UNAVAILABLE
		if t.DirDenied {
			reason = verifierv1.BlockReason_BLOCK_REASON_DESTINATION_DENIED
		}
		return blocked(reason, 0, "%s", t.DirUnavailable), false
	}
	if t.Dir == "" {
		return outcome{}, true
	}
	fi, err := os.Stat(t.Dir)
	if err != nil || !fi.IsDir() {
		return blocked(verifierv1.BlockReason_BLOCK_REASON_TARGET_UNAVAILABLE, 0,
			"target directory %s is gone: %s", t.Dir, describeStatErr(err)), false
	}
	return outcome{}, true
}

func describeStatErr(err error) string {
	if err == nil {
		return "not a directory"
	}
	if os.IsNotExist(err) {
		return "no such directory"
	}
	return err.Error()
}

// roundDuration shortens d for summaries: 1.234s, 41ms.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	default:
		return d.Round(time.Microsecond)
	}
}
