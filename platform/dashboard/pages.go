package dashboard

import (
	"context"
	"net/http"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// runsPage lists executions newest first, filtered by ?status= and ?list=.
func (d *Dashboard) runsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &schedulerv1.ListExecutionsRequest{PageSize: 100, TaskListId: q.Get("list"), PageToken: q.Get("page")}
	if s := q.Get("status"); s != "" {
		v, ok := schedulerv1.ExecutionStatus_value["EXECUTION_STATUS_"+strings.ToUpper(s)]
		if !ok || v == 0 {
			w.WriteHeader(http.StatusBadRequest)
			d.render(w, r, "error", map[string]any{"Code": "InvalidArgument", "Message": "status " + s + ": want pending, running, paused, completed, failed or cancelled"})
			return
		}
		req.Statuses = []schedulerv1.ExecutionStatus{schedulerv1.ExecutionStatus(v)}
	}
	res, err := d.sched.ListExecutions(d.readCtx(r), req)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.render(w, r, "runs", map[string]any{"Title": "Runs", "Runs": res.GetExecutions(), "Next": res.GetNextPageToken(),
		"Status": q.Get("status"), "List": q.Get("list"),
		"Statuses": []string{"pending", "running", "paused", "completed", "failed", "cancelled"}})
}

// waveView is one wave with its assignments.
type waveView struct {
	Wave        *schedulerv1.Wave
	Tasks       []*schedulerv1.Assignment
	Integration *schedulerv1.Assignment
}

// runData reads what the run view shows: the execution, its waves with their assignments.
func (d *Dashboard) runData(ctx context.Context, id string) (map[string]any, error) {
	ex, err := d.sched.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
	if err != nil {
		return nil, err
	}
	as, err := d.assignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: id})
	if err != nil {
		return nil, err
	}
	waves := make([]*waveView, 0, len(ex.GetWaves()))
	byNumber := map[int32]*waveView{}
	for _, wv := range ex.GetWaves() {
		v := &waveView{Wave: wv}
		waves = append(waves, v)
		byNumber[wv.GetWaveNumber()] = v
	}
	for _, a := range as {
		v := byNumber[a.GetWaveNumber()]
		if v == nil {
			continue
		}
		if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION {
			v.Integration = a
		} else {
			v.Tasks = append(v.Tasks, a)
		}
	}
	return map[string]any{"Run": ex.GetExecution(), "Waves": waves, "Tracking": d.tracking(ctx, ex.GetExecution(), as)}, nil
}

// assignments reads every page of a ListAssignments.
func (d *Dashboard) assignments(ctx context.Context, req *schedulerv1.ListAssignmentsRequest) ([]*schedulerv1.Assignment, error) {
	req.PageSize = 1000
	var all []*schedulerv1.Assignment
	for {
		res, err := d.sched.ListAssignments(ctx, req)
		if err != nil {
			return nil, err
		}
		all = append(all, res.GetAssignments()...)
		if res.GetNextPageToken() == "" {
			return all, nil
		}
		req.PageToken = res.GetNextPageToken()
	}
}

// runPage is the run view: waves with their tasks (refreshed live by static/app.js from
// /runs/{id}/events) and the execution log, filtered by ?type= and ?task=.
func (d *Dashboard) runPage(w http.ResponseWriter, r *http.Request) {
	ctx := d.readCtx(r)
	id := r.PathValue("id")
	data, err := d.runData(ctx, id)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	logReq := &schedulerv1.GetExecutionLogRequest{ExecutionId: id, Limit: 200, Tail: true, TaskId: q.Get("task")}
	if t := q.Get("type"); t != "" {
		v, ok := commonv1.EventType_value["EVENT_TYPE_"+strings.ToUpper(t)]
		if !ok || v == 0 {
			w.WriteHeader(http.StatusBadRequest)
			d.render(w, r, "error", map[string]any{"Code": "InvalidArgument", "Message": "type " + t + ": not an event type"})
			return
		}
		logReq.EventTypes = []commonv1.EventType{commonv1.EventType(v)}
	}
	lg, err := d.sched.GetExecutionLog(ctx, logReq)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	data["Title"] = "Run " + id
	data["Log"] = lg.GetEntries()
	data["LastSeq"] = lg.GetLastSeq()
	data["Filtered"] = logReq.TaskId != "" || len(logReq.EventTypes) > 0
	data["TypeFilter"] = q.Get("type")
	data["TaskFilter"] = q.Get("task")
	d.render(w, r, "run", data)
}

// runLive is the live part of the run view alone (what app.js swaps in on every event).
func (d *Dashboard) runLive(w http.ResponseWriter, r *http.Request) {
	data, err := d.runData(d.readCtx(r), r.PathValue("id"))
	if err != nil {
		d.fail(w, r, err)
		return
	}
	data["SignedIn"] = operatorToken(r) != ""
	data["CanAct"] = d.canAct(r)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := d.pages["live"].ExecuteTemplate(w, "live", data); err != nil {
		d.log.Warn("dashboard: render live", "error", err)
	}
}

// criterionView is one criterion of a report with its failure detail and the latest sign-off.
type criterionView struct {
	Result  *verifierv1.CriterionResult
	Failure *verifierv1.FailureDetail
	Pending bool
	Signed  *verifierv1.HumanVerdict
}

// verifyPage is the Verify Done report of a run: each criterion with status and evidence, failure
// details, and a sign-off form for each pending HUMAN_VERIFY criterion.
func (d *Dashboard) verifyPage(w http.ResponseWriter, r *http.Request) {
	ctx := d.readCtx(r)
	id := r.PathValue("id")
	ex, err := d.sched.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
	if err != nil {
		d.fail(w, r, err)
		return
	}
	data := map[string]any{"Title": "Verify Done · " + id, "Run": ex.GetExecution(), "Signed": r.URL.Query().Get("signed")}
	reportID := ex.GetExecution().GetVerification().GetReportId()
	if reportID != "" {
		rep, err := d.verifier.GetReport(ctx, &verifierv1.GetReportRequest{Id: reportID})
		if err != nil {
			d.fail(w, r, err)
			return
		}
		// Sign-offs recorded after the report are the Verifier's audit trail, newest first.
		hv, err := d.verifier.ListHumanVerdicts(ctx, &verifierv1.ListHumanVerdictsRequest{LoopKey: id, PageSize: 1000})
		if err != nil {
			d.fail(w, r, err)
			return
		}
		signed := map[string]*verifierv1.HumanVerdict{}
		for _, v := range hv.GetHumanVerdicts() {
			if signed[v.GetCriterionId()] == nil {
				signed[v.GetCriterionId()] = v
			}
		}
		failures := map[string]*verifierv1.FailureDetail{}
		for _, f := range rep.GetReport().GetFailures() {
			failures[f.GetCriterionId()] = f
		}
		var cs []criterionView
		for _, c := range rep.GetReport().GetResults() {
			cs = append(cs, criterionView{Result: c, Failure: failures[c.GetCriterionId()], Signed: signed[c.GetCriterionId()],
				Pending: c.GetStatus() == verifierv1.CriterionStatus_CRITERION_STATUS_PENDING_HUMAN})
		}
		data["Report"] = rep.GetReport()
		data["Criteria"] = cs
	}
	d.render(w, r, "verify", data)
}

// agentsPage lists agents (heartbeat age, current task) and held locks (holder, fencing token,
// expiry).
func (d *Dashboard) agentsPage(w http.ResponseWriter, r *http.Request) {
	ctx := d.readCtx(r)
	ag, err := d.registry.ListAgents(ctx, &registryv1.ListAgentsRequest{PageSize: 1000})
	if err != nil {
		d.fail(w, r, err)
		return
	}
	lk, err := d.registry.ListLocks(ctx, &registryv1.ListLocksRequest{PageSize: 1000, Prefix: r.URL.Query().Get("prefix")})
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.render(w, r, "agents", map[string]any{"Title": "Agents and locks", "Agents": ag.GetAgents(), "Locks": lk.GetLocks(),
		"Prefix": r.URL.Query().Get("prefix")})
}

// knowledgePage lists knowledge items, newest first, optionally only those stored under one path
// glob (?pattern=, e.g. "**/*.sql"). ListItems, not QueryItems: looking does not count as a hit.
func (d *Dashboard) knowledgePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	res, err := d.know.ListItems(d.readCtx(r), &knowledgev1.ListItemsRequest{FilePattern: q.Get("pattern"), PageSize: 200, PageToken: q.Get("page")})
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.render(w, r, "knowledge", map[string]any{"Title": "Knowledge", "Items": res.GetItems(), "Pattern": q.Get("pattern"), "Next": res.GetNextPageToken()})
}
