package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/backoff"
)

// Verify Done: after the last wave the leader asks the Verifier about the run branch and ends
// the execution with its verdict.

// verificationCheckoutDir is the work dir's subdirectory of run-branch checkouts.
const verificationCheckoutDir = "verify"

// startVerify runs Verify Done of e in the background, unless it is already running: a Verifier
// may take minutes, and the reaper must not wait for it.
func (s *Server) startVerify(ctx context.Context, e *schedulerv1.Execution) {
	if _, busy := s.verifying.LoadOrStore(e.GetId(), struct{}{}); busy {
		return
	}
	go func() {
		defer s.verifying.Delete(e.GetId())
		// Read again: a Verify Done that ended since this round read e has recorded its verdict.
		now, waves, err := s.store.GetExecution(ctx, e.GetId())
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("verify: read the execution", "execution", e.GetId(), "err", err)
			}
			return
		}
		if ended(now) || now.GetVerification() == nil || now.GetVerification().GetVerdict() != commonv1.Verdict_VERDICT_UNSPECIFIED {
			return
		}
		s.verify(ctx, now, runCommit(waves))
	}()
}

// Retries of a Verifier that answers a retryable error (see retryableVerify): the seed retries
// Verify Done once on an infrastructure error, then the run ends BLOCKED.
const (
	defaultVerifyTries     = 2
	defaultVerifyFirstWait = time.Second
	verifyMaxWait          = 30 * time.Second
)

// backoffPolicy is the first and the longest delay between two Verifier tries.
type backoffPolicy struct{ first, max time.Duration }

// retryableVerify reports whether a Verifier error may pass on its own: the Verifier is down,
// slow, busy or lost a race. Every other answer (InvalidArgument, FailedPrecondition, NotFound,
// PermissionDenied, Unauthenticated, Unimplemented, OutOfRange, Internal, ...) is the Verifier
// refusing this request, which asking again will not change.
func retryableVerify(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}

// verify asks the Verifier for Verify Done on the run branch and ends the execution with its
// verdict. A Verifier that refuses the request ends the run BLOCKED at once with the Verifier's
// code and message; one that answers a retryable error is asked again with backoff, each try
// logged, up to verifyTries times, then the run ends BLOCKED with the last error.
func (s *Server) verify(ctx context.Context, e *schedulerv1.Execution, commit string) {
	tl, _, err := s.taskList(ctx, e.GetTaskListId())
	if err != nil {
		s.log.Warn("verify: task list", "execution", e.GetId(), "err", err)
		return
	}
	end := func(outcome commonv1.Outcome, sum *schedulerv1.VerifySummary, msg string) {
		err := s.update(ctx, e.GetId(), func(r *runner) error {
			if ended(r.e) || r.e.GetVerification() == nil || r.e.GetVerification().GetVerdict() != commonv1.Verdict_VERDICT_UNSPECIFIED {
				return nil
			}
			r.e.Verification = sum
			r.changed = true
			if err := r.log(entry(commonv1.EventType_EVENT_TYPE_VERDICT, nil, fmt.Sprintf("Verify Done: %s — %s", strings.TrimPrefix(sum.GetVerdict().String(), "VERDICT_"), msg),
				map[string]any{"verdict": sum.GetVerdict().String(), "report_id": sum.GetReportId(), "pass": float64(sum.GetPassCount()),
					"fail": float64(sum.GetFailCount()), "failed_criteria": strings.Join(sum.GetFailedCriteria(), ",")})); err != nil {
				return err
			}
			status := schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED
			if outcome == commonv1.Outcome_OUTCOME_CONVERGED || outcome == commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN {
				status = schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED
			}
			return r.finish(status, outcome, msg)
		})
		if err != nil {
			s.log.Warn("verify: record verdict", "execution", e.GetId(), "err", err)
		}
	}
	now := timestamppb.Now()
	loopKey, criteria := e.GetId(), tl.Spec.GetDoneCriteria()
	if e.GetFeatureBuildId() != "" { // an iteration of a feature build: its criteria, its loop
		var skip bool
		if loopKey, criteria, skip, err = s.iterationCriteria(ctx, e); err != nil {
			s.log.Warn("verify: feature build", "execution", e.GetId(), "err", err)
			return
		}
		if skip {
			end(commonv1.Outcome_OUTCOME_ESCALATED, &schedulerv1.VerifySummary{VerifyTime: now, BlockReason: "skip_verify"},
				"every wave integrated; verification skipped (skip_verify): built, not verified, so not done")
			return
		}
	}
	req := &verifierv1.VerifyRequest{LoopKey: loopKey, Parallelism: 4,
		DefaultCheckTimeout: durationpb.New(e.GetOptions().GetAgentConfig().GetValidationTimeout().AsDuration())}
	if md := strings.TrimSpace(criteria); md != "" {
		req.CriteriaSource = &verifierv1.VerifyRequest_CriteriaMarkdown{CriteriaMarkdown: criteria}
	} else {
		set := implicitCriteria(tl.Spec)
		if len(set.GetCriteria()) == 0 {
			end(commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN, &schedulerv1.VerifySummary{Verdict: commonv1.Verdict_VERDICT_CONVERGED, VerifyTime: now},
				"every wave integrated; no done-criteria and no validation command to verify, so a person must confirm the result")
			return
		}
		req.CriteriaSource = &verifierv1.VerifyRequest_Criteria{Criteria: set}
	}
	if s.verifier == nil {
		end(commonv1.Outcome_OUTCOME_BLOCKED, &schedulerv1.VerifySummary{Verdict: commonv1.Verdict_VERDICT_BLOCKED, VerifyTime: now,
			BlockReason: "no Verifier configured for this Scheduler"}, "no Verifier configured: Verify Done could not run")
		return
	}
	target, cleanup, err := s.verifyTarget(ctx, e, commit)
	if err != nil {
		end(commonv1.Outcome_OUTCOME_BLOCKED, &schedulerv1.VerifySummary{Verdict: commonv1.Verdict_VERDICT_BLOCKED, VerifyTime: now,
			BlockReason: err.Error()}, "the run branch could not be checked out for Verify Done: "+err.Error())
		return
	}
	defer cleanup()
	req.Target = target
	if e.GetFeatureBuildId() != "" { // the build's app under test, if any (featurebuild_app.go)
		app, why := s.iterationApp(ctx, e, commit)
		if why != "" {
			end(commonv1.Outcome_OUTCOME_BLOCKED, &schedulerv1.VerifySummary{Verdict: commonv1.Verdict_VERDICT_BLOCKED, VerifyTime: now,
				BlockReason: why}, "the app under test is not running: "+why)
			return
		}
		if app != nil {
			defer app.stop()
			app.aim(req.Target)
		}
	}
	res, err := s.callVerifier(ctx, e.GetId(), req)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, errVerifyEnded) {
			return
		}
		st := status.Convert(err)
		detail := fmt.Sprintf("%s: %s", st.Code(), st.Message())
		why := "the Verifier refused the request: " + detail
		if retryableVerify(st.Code()) {
			why = fmt.Sprintf("the Verifier failed %d times, last: %s", s.tries(), detail)
		}
		s.log.Warn("verify: Verify Done could not run; the run ends BLOCKED", "execution", e.GetId(), "code", st.Code().String(), "err", st.Message())
		end(commonv1.Outcome_OUTCOME_BLOCKED, &schedulerv1.VerifySummary{Verdict: commonv1.Verdict_VERDICT_BLOCKED, VerifyTime: timestamppb.Now(),
			BlockReason: why}, "Verify Done could not run: "+why)
		return
	}
	rep := res.GetReport()
	sum := &schedulerv1.VerifySummary{ReportId: rep.GetId(), Verdict: rep.GetVerdict(), PassCount: rep.GetPassCount(),
		FailCount: rep.GetFailCount(), SkipCount: rep.GetSkipCount(), PendingHumanCount: rep.GetPendingHumanCount(),
		FailedCriteria: rep.GetFailedIds(), FailureSignature: rep.GetFailureSignature(), BlockReason: rep.GetBlockDetail(),
		VerifyTime: rep.GetCreateTime()}
	switch rep.GetVerdict() {
	case commonv1.Verdict_VERDICT_CONVERGED:
		if rep.GetPendingHumanCount() > 0 {
			end(commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN, sum, fmt.Sprintf("converged; %d HUMAN_VERIFY criteria wait for sign-off", rep.GetPendingHumanCount()))
			return
		}
		end(commonv1.Outcome_OUTCOME_CONVERGED, sum, fmt.Sprintf("converged: %d criteria passed", rep.GetPassCount()))
	case commonv1.Verdict_VERDICT_BLOCKED:
		end(commonv1.Outcome_OUTCOME_BLOCKED, sum, "blocked: "+rep.GetBlockDetail())
	default:
		end(commonv1.Outcome_OUTCOME_FAILED, sum, fmt.Sprintf("not converged: %d criteria failed (%s)", rep.GetFailCount(), strings.Join(rep.GetFailedIds(), ", ")))
	}
}

// tries is how many times a Verifier that answers a retryable error is called.
func (s *Server) tries() int {
	if s.verifyTries <= 0 {
		return defaultVerifyTries
	}
	return s.verifyTries
}

// callVerifier calls the Verifier, again after a retryable error (each try logged in the
// execution's log) up to tries() times in all; it returns the last error.
func (s *Server) callVerifier(ctx context.Context, execution string, req *verifierv1.VerifyRequest) (*verifierv1.VerifyResponse, error) {
	p := s.verifyBackoff
	if p.first <= 0 {
		p = backoffPolicy{first: defaultVerifyFirstWait, max: verifyMaxWait}
	}
	b := &backoff.Backoff{Initial: p.first, Max: p.max}
	for try := 1; ; try++ {
		vctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
		res, err := s.verifier.Verify(vctx, req)
		cancel()
		if err == nil || ctx.Err() != nil {
			return res, err
		}
		st := status.Convert(err)
		if !retryableVerify(st.Code()) || try >= s.tries() {
			return nil, err
		}
		wait := b.Next()
		msg := fmt.Sprintf("Verify Done: the Verifier answered %s: %s (try %d of %d); trying again in %s",
			st.Code(), st.Message(), try, s.tries(), wait.Round(time.Millisecond))
		s.log.Warn("verify: Verifier call failed; retrying", "execution", execution, "try", try, "tries", s.tries(),
			"wait", wait, "code", st.Code().String(), "err", st.Message())
		if err := s.update(ctx, execution, func(r *runner) error {
			if ended(r.e) {
				return errVerifyEnded
			}
			return r.log(entry(commonv1.EventType_EVENT_TYPE_WARNING, nil, msg,
				map[string]any{"code": st.Code().String(), "try": float64(try), "tries": float64(s.tries())}))
		}); err != nil {
			if errors.Is(err, errVerifyEnded) {
				return nil, err
			}
			s.log.Warn("verify: log a Verifier try", "execution", execution, "err", err)
		}
		if err := backoff.Wait(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// errVerifyEnded: the execution ended (cancelled) while Verify Done waited to try again.
var errVerifyEnded = errors.New("the execution ended while Verify Done waited for the Verifier")

// runCommit is the run branch's commit once every wave is integrated: the last wave's
// integration commit ("" when unknown).
func runCommit(waves []*schedulerv1.Wave) string {
	if len(waves) == 0 {
		return ""
	}
	return waves[len(waves)-1].GetIntegrationCommit()
}

// fetchable reports whether the Verifier can fetch repository URL u itself: its git sources
// are http(s) URLs only (it refuses local paths, file://, ssh, git:// and scp-like URLs, so that
// a request cannot make it read its own disk or run a transport).
func fetchable(u string) bool {
	l := strings.ToLower(u)
	return strings.HasPrefix(l, "https://") || strings.HasPrefix(l, "http://")
}

// verifyTarget is what the Verifier checks, at the run branch's commit (the run branch when the
// commit is unknown):
//
//   - a repository the Verifier can fetch (an http(s) URL) is handed over as a git source: the
//     Verifier fetches the commit itself and the two services share no file system;
//   - a local repository, when the Scheduler exports local repositories over git's smart HTTP
//     (WithGitExport), is handed over as a git source too: an unguessable URL of this replica's
//     export, valid while the verification runs;
//   - any other repository (a local path without the export, or a file, ssh, git or scp-like URL,
//     which the Verifier's git sources refuse) is cloned into the work dir and handed over as a
//     local directory, which the Verifier must allow as a root (one that does not refuses the
//     request, and the run ends BLOCKED with its answer);
//   - without a repository, a scratch target: an empty directory the Verifier makes itself.
func (s *Server) verifyTarget(ctx context.Context, e *schedulerv1.Execution, commit string) (*verifierv1.Target, func(), error) {
	repo := e.GetRepository()
	ref := commit
	if ref == "" {
		ref = e.GetRunBranch()
	}
	gitTarget := func(u string) *verifierv1.Target {
		return &verifierv1.Target{Directory: &verifierv1.Target_Git{Git: &verifierv1.GitSource{RepositoryUrl: u, Ref: ref}}}
	}
	switch {
	case repo == nil:
		return &verifierv1.Target{Directory: &verifierv1.Target_Scratch{Scratch: true}}, func() {}, nil
	case fetchable(repo.GetUrl()):
		return gitTarget(repo.GetUrl()), func() {}, nil
	case repo.GetPath() != "" && s.gitExport != nil:
		u, unexport := s.gitExport.export(repo.GetPath())
		return gitTarget(u), unexport, nil
	}
	root := s.workDir
	if root == "" {
		root = os.TempDir()
	}
	root, err := filepath.Abs(filepath.Join(root, verificationCheckoutDir))
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp(root, e.GetId()+"-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if _, err := git(ctx, "", "clone", "--quiet", "--no-hardlinks", "--branch", e.GetRunBranch(), "--", repoSource(repo), dir); err != nil {
		cleanup()
		return nil, nil, err
	}
	if commit != "" {
		if _, err := git(ctx, dir, "checkout", "--quiet", "--detach", commit); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	return &verifierv1.Target{Directory: &verifierv1.Target_LocalDir{LocalDir: dir}}, cleanup, nil
}

// implicitCriteria are the done-criteria of a list without any (TaskListSpec.done_criteria):
// every task's validation command and every validation level with a command, AUTO_VERIFY.
func implicitCriteria(spec *schedulerv1.TaskListSpec) *verifierv1.CriteriaSet {
	set := &verifierv1.CriteriaSet{}
	add := func(id, name string, v *commonv1.TaskValidation) {
		if strings.TrimSpace(v.GetCommand()) == "" {
			return
		}
		c := &verifierv1.CommandCheck{Shell: v.GetCommand(), Expect: &verifierv1.CommandExpectation{ExitCode: &v.ExpectedExitCode}}
		if v.GetTimeout() != nil {
			c.Timeout = v.GetTimeout()
		}
		set.Criteria = append(set.Criteria, &verifierv1.Criterion{Id: id, Name: name, Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_Command{Command: c}})
	}
	lv := spec.GetValidation()
	add("LEVEL.CODEBASE", "codebase validation", lv.GetCodebase())
	add("LEVEL.API", "api validation", lv.GetApi())
	add("LEVEL.UI", "ui validation", lv.GetUi())
	for i, t := range spec.GetTasks() {
		if len(set.Criteria) >= 500 {
			break
		}
		add(fmt.Sprintf("T%d", i+1), truncate("task "+t.GetId()+": "+t.GetTitle(), 256), t.GetValidation())
	}
	return set
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
