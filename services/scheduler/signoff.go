package scheduler

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// Human sign-off reaches the run (issue 15 part 13). An execution whose Verify Done answered
// CONVERGED with HUMAN_VERIFY criteria pending ends COMPLETED with outcome
// CONVERGED_PENDING_HUMAN. A person then signs the criteria off with the Verifier's
// RecordHumanVerdict (loop key = the execution id; `converge signoff` does it). The leader's
// driver asks the Verifier, every signOffEvery, about each execution still waiting: once every
// pending criterion has a PASS the execution's outcome becomes CONVERGED; a FAIL on any of them
// ends it FAILED (outcome FAILED, the criterion, who and the note in its status message). Either
// way a VERDICT and an EXECUTION_COMPLETED entry go to its log, so its stream shows the change.

// signOffEvery is how often the driver asks the Verifier about one waiting execution.
const signOffEvery = 2 * time.Second

// signOffs remembers, per execution, when the Verifier was last asked and the criteria its
// report left pending (a report does not change).
type signOffs struct {
	mu      sync.Mutex
	asked   map[string]time.Time
	pending map[string][]string
}

// due reports whether execution id should be asked about now, and marks it asked.
func (so *signOffs) due(id string, now time.Time) bool {
	so.mu.Lock()
	defer so.mu.Unlock()
	if so.asked == nil {
		so.asked, so.pending = map[string]time.Time{}, map[string][]string{}
	}
	if now.Sub(so.asked[id]) < signOffEvery {
		return false
	}
	so.asked[id] = now
	return true
}

func (so *signOffs) forget(id string) {
	so.mu.Lock()
	defer so.mu.Unlock()
	delete(so.asked, id)
	delete(so.pending, id)
}

// signOffBatch bounds the waiting executions one driver round looks at.
const signOffBatch = 100

// driveSignOffs moves on the executions whose pending criteria were decided. A Verifier that
// cannot answer is only logged: the next round asks again.
func (s *Server) driveSignOffs(ctx context.Context) error {
	if s.verifier == nil {
		return nil
	}
	waiting, err := s.store.AwaitingSignOff(ctx, signOffBatch)
	if err != nil {
		return err
	}
	for _, e := range waiting {
		if !s.signOffs.due(e.GetId(), s.now()) {
			continue
		}
		if err := s.checkSignOff(ctx, e); err != nil && ctx.Err() == nil {
			s.log.Warn("sign-off: ask the Verifier", "execution", e.GetId(), "err", err)
		}
	}
	return nil
}

// pendingCriteria are the criteria of the execution's report that wait for a person.
func (s *Server) pendingCriteria(ctx context.Context, e *schedulerv1.Execution) ([]string, error) {
	s.signOffs.mu.Lock()
	ids, ok := s.signOffs.pending[e.GetId()]
	s.signOffs.mu.Unlock()
	if ok {
		return ids, nil
	}
	rctx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	rep, err := s.verifier.GetReport(rctx, &verifierv1.GetReportRequest{Id: e.GetVerification().GetReportId(), View: verifierv1.ReportView_REPORT_VIEW_FULL})
	if err != nil {
		return nil, err
	}
	for _, r := range rep.GetReport().GetResults() {
		if r.GetStatus() == verifierv1.CriterionStatus_CRITERION_STATUS_PENDING_HUMAN {
			ids = append(ids, r.GetCriterionId())
		}
	}
	s.signOffs.mu.Lock()
	s.signOffs.pending[e.GetId()] = ids
	s.signOffs.mu.Unlock()
	return ids, nil
}

// checkSignOff reads the human verdicts of e's loop and ends e as they decide.
func (s *Server) checkSignOff(ctx context.Context, e *schedulerv1.Execution) error {
	if e.GetVerification().GetReportId() == "" {
		return nil // nothing was verified (no done-criteria): a person confirms outside converge
	}
	pending, err := s.pendingCriteria(ctx, e)
	if err != nil {
		return err
	}
	latest := map[string]*verifierv1.HumanVerdict{} // newest first: the first per criterion
	var token string
	for page := 0; page < 10; page++ {
		rctx, cancel := context.WithTimeout(ctx, registryTimeout)
		res, err := s.verifier.ListHumanVerdicts(rctx, &verifierv1.ListHumanVerdictsRequest{LoopKey: e.GetId(), PageSize: 1000, PageToken: token})
		cancel()
		if err != nil {
			return err
		}
		for _, v := range res.GetHumanVerdicts() {
			if _, seen := latest[v.GetCriterionId()]; !seen {
				latest[v.GetCriterionId()] = v
			}
		}
		if token = res.GetNextPageToken(); token == "" {
			break
		}
	}
	var failed *verifierv1.HumanVerdict
	passed := 0
	for _, id := range pending {
		switch v := latest[id]; v.GetDecision() {
		case verifierv1.HumanDecision_HUMAN_DECISION_FAIL:
			if failed == nil {
				failed = v
			}
		case verifierv1.HumanDecision_HUMAN_DECISION_PASS:
			passed++
		}
	}
	if failed == nil && (passed < len(pending) || len(pending) == 0) {
		return nil // still waiting
	}
	err = s.update(ctx, e.GetId(), func(r *runner) error {
		if r.e.GetStatus() != schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED || r.e.GetOutcome() != commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN {
			return nil // decided meanwhile
		}
		v := r.e.GetVerification()
		var verdict, msg string
		if failed != nil {
			r.e.Status, r.e.Outcome = schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED
			verdict = "FAILED"
			msg = fmt.Sprintf("sign-off: %s failed criterion %s: %s", failed.GetWho(), failed.GetCriterionId(), failed.GetNote())
			v.Verdict = commonv1.Verdict_VERDICT_FAILED
			v.FailCount++
			v.FailedCriteria = append(v.FailedCriteria, failed.GetCriterionId())
		} else {
			r.e.Outcome = commonv1.Outcome_OUTCOME_CONVERGED
			verdict = "CONVERGED"
			who := map[string]bool{}
			var names []string
			for _, id := range pending {
				if w := latest[id].GetWho(); !who[w] {
					who[w] = true
					names = append(names, w)
				}
			}
			msg = fmt.Sprintf("converged: %s signed off %s", strings.Join(names, ", "), strings.Join(pending, ", "))
			v.PassCount += int32(len(pending))
		}
		v.PendingHumanCount = 0
		r.e.StatusMessage = msg
		r.changed = true
		return r.log(
			entry(commonv1.EventType_EVENT_TYPE_VERDICT, nil, "Verify Done after sign-off: "+verdict+" — "+msg,
				map[string]any{"verdict": "VERDICT_" + verdict, "report_id": v.GetReportId(), "signed_off": strings.Join(pending, ",")}),
			entry(commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED, nil, fmt.Sprintf("execution %s: %s", outcomeName(r.e.GetOutcome()), msg),
				map[string]any{"outcome": outcomeName(r.e.GetOutcome()), "completed_tasks": float64(r.e.GetCompletedTasks()),
					"failed_tasks": float64(r.e.GetFailedTasks()), "skipped_tasks": float64(r.e.GetSkippedTasks())}))
	})
	if err == nil {
		s.signOffs.forget(e.GetId())
	}
	return err
}
