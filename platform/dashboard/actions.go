package dashboard

import (
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// Every action is one RPC sent with the operator's token only (actCtx): the API decides, and its
// answer (Unauthenticated, FailedPrecondition, ...) is what the operator sees. The pages ask for a
// confirmation before the form is sent (static/app.js, data-confirm).

// runAction is POST /runs/{id}/{pause|resume|cancel}.
func (d *Dashboard) runAction(w http.ResponseWriter, r *http.Request) {
	ctx := d.actCtx(r)
	id := r.PathValue("id")
	reason := reasonOf(r)
	var err error
	switch r.PathValue("action") {
	case "pause":
		_, err = d.sched.PauseExecution(ctx, &schedulerv1.PauseExecutionRequest{ExecutionId: id, Reason: reason})
	case "resume":
		_, err = d.sched.ResumeExecution(ctx, &schedulerv1.ResumeExecutionRequest{ExecutionId: id, Reason: reason})
	case "cancel":
		_, err = d.sched.CancelExecution(ctx, &schedulerv1.CancelExecutionRequest{ExecutionId: id, Reason: reason})
	default:
		http.NotFound(w, r)
		return
	}
	d.done(w, r, err, "/runs/"+url.PathEscape(id))
}

// taskAction is POST /runs/{id}/tasks/{task}/{retry|skip}.
func (d *Dashboard) taskAction(w http.ResponseWriter, r *http.Request) {
	ctx := d.actCtx(r)
	id, task := r.PathValue("id"), r.PathValue("task")
	reason := reasonOf(r)
	var err error
	switch r.PathValue("action") {
	case "retry":
		_, err = d.sched.RetryTask(ctx, &schedulerv1.RetryTaskRequest{ExecutionId: id, TaskId: task, Reason: reason})
	case "skip":
		_, err = d.sched.SkipTask(ctx, &schedulerv1.SkipTaskRequest{ExecutionId: id, TaskId: task, Reason: reason,
			SkipDependents: r.PostFormValue("skip_dependents") == "on"})
	default:
		http.NotFound(w, r)
		return
	}
	d.done(w, r, err, "/runs/"+url.PathEscape(id)+"/tasks/"+url.PathEscape(task))
}

// signOff is POST /runs/{id}/verify/{criterion}: a person's PASS or FAIL for a pending
// HUMAN_VERIFY criterion of the run's report (RecordHumanVerdict; the loop key is the execution id).
func (d *Dashboard) signOff(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	dec, ok := formDecision(r, verifierv1.HumanDecision_HUMAN_DECISION_PASS, verifierv1.HumanDecision_HUMAN_DECISION_FAIL)
	if !ok {
		d.fail(w, r, status.Error(codes.InvalidArgument, "decision: want pass or fail"))
		return
	}
	who := strings.TrimSpace(r.PostFormValue("who"))
	if who == "" {
		who = "dashboard operator"
	}
	res, err := d.verifier.RecordHumanVerdict(d.actCtx(r), &verifierv1.RecordHumanVerdictRequest{
		LoopKey: id, CriterionId: r.PathValue("criterion"), Decision: dec, Who: who,
		Note: r.PostFormValue("note"), ReportId: r.PostFormValue("report_id")})
	if err != nil {
		d.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(id)+"/verify?signed="+url.QueryEscape(enumName(res.GetLoop().GetVerdict())), http.StatusSeeOther)
}

// gateSignOff is POST /runs/{id}/gates/{gate}: a person's PASS or FAIL at the gate the run waits
// at (SignOffGate). The API decides: a FAIL without a note is its InvalidArgument, a gate the run
// does not wait at its FailedPrecondition, a read-only principal its PermissionDenied.
func (d *Dashboard) gateSignOff(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	dec, ok := formDecision(r, schedulerv1.GateDecision_GATE_DECISION_PASS, schedulerv1.GateDecision_GATE_DECISION_FAIL)
	if !ok {
		d.fail(w, r, status.Error(codes.InvalidArgument, "decision: want pass or fail"))
		return
	}
	_, err := d.sched.SignOffGate(d.actCtx(r), &schedulerv1.SignOffGateRequest{ExecutionId: id, GateId: r.PathValue("gate"),
		Decision: dec, Note: strings.TrimSpace(r.PostFormValue("note")), Who: strings.TrimSpace(r.PostFormValue("who"))})
	d.done(w, r, err, "/runs/"+url.PathEscape(id))
}

func reasonOf(r *http.Request) string {
	if s := strings.TrimSpace(r.PostFormValue("reason")); s != "" {
		return s
	}
	return "from the dashboard"
}

// done answers an action: back to the page on success, the API's error otherwise.
func (d *Dashboard) done(w http.ResponseWriter, r *http.Request, err error, back string) {
	if err != nil {
		d.fail(w, r, err)
		return
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// formDecision is the form's "decision" field as pass or fail; false for anything else.
func formDecision[D any](r *http.Request, pass, fail D) (D, bool) {
	switch r.PostFormValue("decision") {
	case "pass":
		return pass, true
	case "fail":
		return fail, true
	}
	var none D
	return none, false
}
