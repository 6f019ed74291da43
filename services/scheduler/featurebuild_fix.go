package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// errNothingToBuild: every task completed and no criterion failed (the last verdict was BLOCKED,
// e.g. before a resume): the iteration only verifies again (featurebuild_reverify.go).
var errNothingToBuild = errors.New("nothing to build: every task completed and no criterion failed")

// fixTaskPrefix starts the id of a fix task: "fix-F3" fixes criterion F3.
const fixTaskPrefix = "fix-"

// fixList stores (or finds again) the task list of iteration n ≥ 2: the previous iteration's
// tasks that did not complete, plus one fix task per criterion the previous verification failed
// (seed §8.2), built from the report's failure details and the iteration history (§7.3, §14.2),
// with the criterion's files as the task's files so that waves stay conflict-free.
func (s *Server) fixList(ctx context.Context, fb *schedulerv1.FeatureBuild, n int32, prevEx *schedulerv1.Execution, prev *schedulerv1.FeatureIteration) (string, error) {
	id := fmt.Sprintf("%s.i%d", fb.GetId(), n)
	if _, err := s.store.GetTaskList(ctx, id, store.ViewBasic); err == nil {
		return id, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	prevList, err := s.store.GetTaskList(ctx, prevEx.GetTaskListId(), store.ViewFull)
	if err != nil {
		return "", err
	}
	fixes, err := s.fixTasks(ctx, fb, n, prev)
	if err != nil {
		return "", err
	}
	fixing := map[string]bool{}
	for _, t := range fixes {
		fixing[t.GetId()] = true
	}
	remaining := map[string]bool{}
	var tasks []*commonv1.Task
	for _, t := range prevList.Spec.GetTasks() {
		if t.GetStatus() == commonv1.TaskStatus_TASK_STATUS_COMPLETED || fixing[t.GetId()] {
			continue
		}
		c := proto.CloneOf(t)
		c.Status = commonv1.TaskStatus_TASK_STATUS_PENDING
		remaining[c.GetId()] = true
		tasks = append(tasks, c)
	}
	for _, t := range tasks {
		var deps []string
		for _, d := range t.GetDependsOn() {
			if remaining[d] {
				deps = append(deps, d)
			}
		}
		t.DependsOn = deps
	}
	tasks = append(tasks, fixes...)
	if len(tasks) == 0 {
		return "", errNothingToBuild
	}
	spec := proto.CloneOf(prevList.Spec)
	spec.Name = clip(fmt.Sprintf("%s — iteration %d", fb.GetFeature(), n), 200)
	spec.Tasks = tasks
	if vs := tasklist.Validate(spec); len(vs) > 0 {
		// A failure detail's file the list's rules refuse: drop the fix tasks' files, keep the work.
		for _, t := range fixes {
			t.File, t.Files = "", nil
		}
		if vs = tasklist.Validate(spec); len(vs) > 0 {
			return "", failedPrecondition("the fix tasks of iteration %d are not a valid task list: %s: %s", n, vs[0].Field, vs[0].Description)
		}
	}
	if _, err := s.store.CreateTaskList(ctx, id, spec, nil); err != nil && !errors.Is(err, store.ErrAlreadyExists) {
		return "", err
	}
	return id, nil
}

// fixTasks are the fix tasks of the previous iteration's failed criteria (none when it ended
// before Verify Done or was not FAILED: its failed tasks are retried as they are).
func (s *Server) fixTasks(ctx context.Context, fb *schedulerv1.FeatureBuild, n int32, prev *schedulerv1.FeatureIteration) ([]*commonv1.Task, error) {
	v := prev.GetVerification()
	if strings.HasPrefix(v.GetBlockReason(), appBuildErrorPrefix) {
		return []*commonv1.Task{appFixTask(fb, n, v.GetBlockReason())}, nil
	}
	if v.GetReportId() == "" || v.GetVerdict() != commonv1.Verdict_VERDICT_FAILED || s.verifier == nil {
		return nil, nil
	}
	res, err := s.verifier.GetReport(ctx, &verifierv1.GetReportRequest{Id: v.GetReportId(), View: verifierv1.ReportView_REPORT_VIEW_FULL})
	if err != nil {
		return nil, fmt.Errorf("read verify report %s: %w", v.GetReportId(), err)
	}
	rep := res.GetReport()
	criteria := map[string]*verifierv1.Criterion{}
	if _, dc, err := s.store.GetFeatureBuild(ctx, fb.GetId()); err == nil && dc != "" {
		if parsed, err := s.verifier.ParseCriteria(ctx, &verifierv1.ParseCriteriaRequest{Markdown: dc}); err == nil {
			for _, c := range parsed.GetCriteria() {
				criteria[c.GetId()] = c
			}
		}
	}
	evidence := map[string]string{}
	var passing []string
	for _, r := range rep.GetResults() {
		if r.GetStatus() == verifierv1.CriterionStatus_CRITERION_STATUS_PASS {
			passing = append(passing, r.GetCriterionId())
		}
		e := r.GetEvidence()
		tail := e.GetCommand().GetStderrTail() + e.GetCommand().GetStdoutTail()
		if tail == "" {
			tail = e.GetSummary()
		}
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		evidence[r.GetCriterionId()] = tail
	}
	history := historySummary(fb)
	var out []*commonv1.Task
	for _, f := range rep.GetFailures() {
		c := criteria[f.GetCriterionId()]
		t := &commonv1.Task{Id: fixTaskPrefix + f.GetCriterionId(), Action: commonv1.TaskAction_TASK_ACTION_UPDATE, Phase: "fix",
			Title:       clip(fmt.Sprintf("Fix %s: %s", f.GetCriterionId(), orDefault(f.GetCriterionName(), c.GetName())), 200),
			Description: fixPrompt(fb, n, f, c, evidence[f.GetCriterionId()], history, passing),
			Requirements: []string{clip(fmt.Sprintf("criterion %s passes: %s", f.GetCriterionId(), orDefault(f.GetExpected(), c.GetName())), 1000),
				"do not break the criteria that pass: " + orDefault(strings.Join(passing, ", "), "none yet")}}
		files := append([]string(nil), c.GetRelatedFiles()...)
		if f.GetFile() != "" {
			files = append([]string{f.GetFile()}, files...)
		}
		seen := map[string]bool{}
		for _, p := range files {
			if seen[p] {
				continue
			}
			seen[p] = true
			if t.File == "" {
				t.File = p
			}
			t.Files = append(t.Files, &commonv1.FileImpact{Path: p})
		}
		out = append(out, t)
	}
	return out, nil
}

// historySummary is the iteration history for a fix prompt (§7.3, §14.2): what each iteration
// passed, failed and regressed.
func historySummary(fb *schedulerv1.FeatureBuild) string {
	var w strings.Builder
	for _, it := range fb.GetIterations() {
		fmt.Fprintf(&w, "- Iteration %d (%s): %s\n", it.GetNumber(), orDefault(verdictName(it.GetVerification().GetVerdict()), "running"), it.GetSummary())
	}
	return w.String()
}

// fixPrompt is a fix task's description: the failure in the seed's FailureDetail terms, the
// evidence's tail, and what the iterations so far tried.
func fixPrompt(fb *schedulerv1.FeatureBuild, n int32, f *verifierv1.FailureDetail, c *verifierv1.Criterion, evidence, history string, passing []string) string {
	var w strings.Builder
	fmt.Fprintf(&w, "Fix done-criterion %s (%s) of feature %s: iteration %d of %d.\n\n", f.GetCriterionId(),
		orDefault(f.GetCriterionName(), c.GetName()), fb.GetFeature(), n, fb.GetMaxIterations())
	if d := c.GetDescription(); d != "" {
		fmt.Fprintf(&w, "Criterion: %s\n", d)
	}
	fmt.Fprintf(&w, "Expected: %s\nActual: %s\nGap: %s\n", f.GetExpected(), f.GetActual(), f.GetGap())
	if f.GetFile() != "" {
		loc := f.GetFile()
		if f.Line != nil {
			loc = fmt.Sprintf("%s:%d", loc, f.GetLine())
		}
		fmt.Fprintf(&w, "Where: %s\n", loc)
	}
	if fix := orDefault(f.GetSuggestedFix(), c.GetFixHint()); fix != "" {
		fmt.Fprintf(&w, "Suggested fix (%s confidence): %s\n", strings.TrimPrefix(f.GetConfidence().String(), "CONFIDENCE_"), fix)
	}
	if evidence != "" {
		fmt.Fprintf(&w, "\nEvidence (tail):\n%s\n", evidence)
	}
	if history != "" {
		fmt.Fprintf(&w, "\nIteration history (do not repeat what did not work):\n%s", history)
	}
	if len(passing) > 0 {
		fmt.Fprintf(&w, "\nDo NOT regress these passing criteria: %s\n", strings.Join(passing, ", "))
	}
	return clip(w.String(), 60000)
}

// clip cuts s to at most n bytes at a rune boundary (truncate may split a rune).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
