package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// The driver is the Scheduler's background work. It runs on every replica, but does anything only
// on the one that holds the leadership (store.TryLead: a Postgres advisory lock, released when
// the replica's session ends, so a killed leader is replaced within one driver interval):
//
//   - the reaper requeues assignments whose lease ran out (attempt + 1; FAILED after max_retries);
//   - executions stored PENDING by a replica that died before opening their first wave are begun;
//   - executions past their wall-time budget end ESCALATED;
//   - executions whose waves are all integrated are verified (Verify Done).
//
// Every step is an UpdateExecution that re-checks the state it acts on, so a step repeated by a
// new leader, or racing a completion, changes nothing twice.

// Start runs the driver until ctx ends. It returns at once; the driver stops with ctx.
func (s *Server) Start(ctx context.Context) {
	go s.drive(ctx)
}

// leadHolder is a store that can name the session holding a leadership from any session
// (Postgres: the advisory lock's backend). The leadership lasts as long as the session that took
// it; when that one session ends (Postgres restarted, the connection cut or terminated) the rest
// of the pool may go on working and another replica may take the lead. So the leader checks,
// every round, that its session still holds the leadership, and steps down otherwise.
type leadHolder interface {
	LeadHolder(ctx context.Context, name string) (int64, error)
}

func (s *Server) drive(ctx context.Context) {
	var (
		release func()
		session int64 // the session holding our leadership, when the store can say
	)
	defer func() {
		if release != nil {
			release()
		}
	}()
	stepDown := func() {
		release()
		release, session = nil, 0
	}
	holder, canCheck := s.store.(leadHolder)
	t := time.NewTicker(s.driverEvery)
	defer t.Stop()
	for {
		if release == nil {
			ok, rel, err := s.store.TryLead(ctx, leaderName)
			switch {
			case err != nil && ctx.Err() == nil:
				s.log.Warn("scheduler driver: leadership", "err", err)
			case ok:
				release = rel
				if canCheck {
					if session, err = holder.LeadHolder(ctx, leaderName); err != nil || session == 0 {
						if ctx.Err() == nil {
							s.log.Warn("scheduler driver: leadership taken but not confirmed; trying again", "err", err)
						}
						stepDown()
						break
					}
				}
				s.log.Info("scheduler driver: this replica leads (reaper, verification)")
			}
		}
		if release != nil && canCheck {
			now, err := holder.LeadHolder(ctx, leaderName)
			switch {
			case err != nil:
				if ctx.Err() == nil {
					s.log.Warn("scheduler driver: leadership check", "err", err)
				}
				stepDown()
			case now != session:
				s.log.Warn("scheduler driver: leadership lost (the session holding it ended); stepping down", "session", session, "holder", now)
				stepDown()
			}
		}
		if release != nil {
			if err := s.driveOnce(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("scheduler driver", "err", err)
				// A store error may mean the session holding the leadership is gone: let it go
				// and take it again on the next round.
				release()
				release = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// driveOnce does one round of the leader's work.
func (s *Server) driveOnce(ctx context.Context) error {
	if err := s.reap(ctx); err != nil {
		return fmt.Errorf("reaper: %w", err)
	}
	pending, err := s.store.ExecutionsInStatus(ctx, []schedulerv1.ExecutionStatus{schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING}, 100)
	if err != nil {
		return err
	}
	for _, e := range pending {
		if time.Since(e.GetCreateTime().AsTime()) > 5*time.Second {
			if err := s.begin(ctx, e.GetId()); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
	}
	open, err := s.store.ExecutionsInStatus(ctx, []schedulerv1.ExecutionStatus{
		schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED}, 1000)
	if err != nil {
		return err
	}
	for _, e := range open {
		if err := s.overtime(ctx, e); err != nil {
			return err
		}
		if v := e.GetVerification(); v != nil && v.GetVerdict() == commonv1.Verdict_VERDICT_UNSPECIFIED &&
			e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
			s.verify(ctx, e)
		}
	}
	return nil
}

// reap requeues expired leases.
func (s *Server) reap(ctx context.Context) error {
	expired, err := s.store.ExpiredLeases(ctx, reaperBatch)
	if err != nil {
		return err
	}
	for _, x := range expired {
		err := s.takeBack(ctx, x, "LEASE_EXPIRED", commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED, func(r *runner, a *store.Assignment) (string, bool) {
			if r.tx.Now().Before(a.GetLeaseExpireTime().AsTime()) {
				return "", false // renewed since
			}
			return fmt.Sprintf("lease of %s (token %d) expired at %s", a.GetInstanceId(), a.GetFencingToken(),
				a.GetLeaseExpireTime().AsTime().UTC().Format(time.RFC3339Nano)), true
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return s.reapStale(ctx)
}

// takeBack requeues the assignment x names (as x's holder had it: same fencing token, still
// held) when why says so in the transaction, logging ev with the reason; a run that has ended
// just records it cancelled.
func (s *Server) takeBack(ctx context.Context, x *store.Assignment, code string, ev commonv1.EventType,
	why func(r *runner, a *store.Assignment) (string, bool)) error {
	return s.update(ctx, x.GetExecutionId(), func(r *runner) error {
		a, err := r.tx.Assignment(x.GetId())
		if err != nil {
			return err
		}
		// Only the lease x saw: not one re-leased since.
		if !held(a.GetStatus()) || a.GetFencingToken() != x.GetFencingToken() {
			return nil
		}
		reason, ok := why(r, a)
		if !ok {
			return nil
		}
		w, err := r.wave(a.GetWaveNumber())
		if err != nil {
			return err
		}
		if w.GetActiveAgents() > 0 {
			w.ActiveAgents--
		}
		if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK && r.e.GetRunningTasks() > 0 {
			r.e.RunningTasks--
			r.changed = true
		}
		if err := r.log(entry(ev, a, reason,
			map[string]any{"fencing_token": float64(a.GetFencingToken()), "assignment_id": a.GetId()})); err != nil {
			return err
		}
		if ended(r.e) {
			a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_CANCELLED
			a.CompleteTime = r.now()
			if err := r.tx.PutWave(w); err != nil {
				return err
			}
			return r.tx.PutAssignment(a)
		}
		return r.requeue(a, w, code, reason)
	})
}

// overtime ends an execution that ran past its wall-time budget.
func (s *Server) overtime(ctx context.Context, e *schedulerv1.Execution) error {
	limit := e.GetOptions().GetMaxWallTime().AsDuration()
	start := e.GetStartTime()
	if limit <= 0 || start == nil || time.Since(start.AsTime()) < limit {
		return nil
	}
	return s.update(ctx, e.GetId(), func(r *runner) error {
		if ended(r.e) {
			return nil
		}
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_ESCALATED,
			fmt.Sprintf("budget spent: wall time %s (max_wall_time)", limit))
	})
}

// verify asks the Verifier for Verify Done on the run branch and ends the execution with its
// verdict. A Verifier that cannot be reached is retried on the next round.
func (s *Server) verify(ctx context.Context, e *schedulerv1.Execution) {
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
	req := &verifierv1.VerifyRequest{LoopKey: e.GetId(), Parallelism: 4,
		DefaultCheckTimeout: durationpb.New(e.GetOptions().GetAgentConfig().GetValidationTimeout().AsDuration())}
	if md := strings.TrimSpace(tl.Spec.GetDoneCriteria()); md != "" {
		req.CriteriaSource = &verifierv1.VerifyRequest_CriteriaMarkdown{CriteriaMarkdown: tl.Spec.GetDoneCriteria()}
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
	target, cleanup, err := s.verifyTarget(ctx, e)
	if err != nil {
		end(commonv1.Outcome_OUTCOME_BLOCKED, &schedulerv1.VerifySummary{Verdict: commonv1.Verdict_VERDICT_BLOCKED, VerifyTime: now,
			BlockReason: err.Error()}, "the run branch could not be checked out for Verify Done: "+err.Error())
		return
	}
	defer cleanup()
	req.Target = target
	vctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	res, err := s.verifier.Verify(vctx, req)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("verify: Verifier call failed; retrying next round", "execution", e.GetId(), "err", err)
		}
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

// verifyTarget is what the Verifier checks: the run branch of a URL repository as a git source;
// for a local repository a checkout of the run branch in the work dir; without a repository an
// empty scratch directory.
func (s *Server) verifyTarget(ctx context.Context, e *schedulerv1.Execution) (*verifierv1.Target, func(), error) {
	repo := e.GetRepository()
	if u := repo.GetUrl(); u != "" && (strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")) {
		return &verifierv1.Target{Directory: &verifierv1.Target_Git{Git: &verifierv1.GitSource{RepositoryUrl: u, Ref: e.GetRunBranch()}}}, func() {}, nil
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
	if repo != nil {
		if _, err := git(ctx, "", "clone", "--quiet", "--no-hardlinks", "--branch", e.GetRunBranch(), "--", repoSource(repo), dir); err != nil {
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
