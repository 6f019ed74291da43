package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/knowledgeproject"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Knowledge from failures: when a fix task made its failing criterion pass, the Scheduler records
// a Knowledge gotcha on the task's files (the failure signature, what failed, what fixed it), so
// Prime of later tasks touching those files is told; its tags name the criterion and the
// signature ("converge knowledge" or QueryItems by tag shows it).

// WithKnowledge makes the Scheduler record what fixed a feature build's failed criteria.
func WithKnowledge(k knowledgev1.KnowledgeServiceClient) Option {
	return func(s *Server) { s.knowledge = k }
}

// recordFixes records a Knowledge item per criterion that failed in the iteration before the
// last one of b and passes now, fixed by a fix task of ex (the iteration's execution).
func (s *Server) recordFixes(ctx context.Context, b *schedulerv1.FeatureBuild, ex *schedulerv1.Execution) {
	its := b.GetIterations()
	if s.knowledge == nil || len(its) < 2 || ex.GetId() == "" {
		return
	}
	prev, cur := its[len(its)-2].GetVerification(), its[len(its)-1].GetVerification()
	if cur.GetReportId() == "" {
		return
	}
	tl, err := s.store.GetTaskList(ctx, ex.GetTaskListId(), store.ViewFull)
	if err != nil {
		return
	}
	for _, id := range prev.GetFailedCriteria() {
		if slices.Contains(cur.GetFailedCriteria(), id) {
			continue
		}
		i := slices.IndexFunc(tl.Spec.GetTasks(), func(t *commonv1.Task) bool { return t.GetId() == fixTaskPrefix+id })
		if i < 0 {
			continue
		}
		task := tl.Spec.GetTasks()[i]
		sig := prev.GetFailureSignature()
		if len(sig) > 12 {
			sig = sig[:12]
		}
		detail, _, _ := strings.Cut(task.GetDescription(), "\nIteration history")
		content := fmt.Sprintf("Done-criterion %s of feature %s failed (failure signature %s) and was fixed in iteration %d by task %s (%s). What failed:\n%s",
			id, b.GetFeature(), prev.GetFailureSignature(), its[len(its)-1].GetNumber(), task.GetId(), task.GetTitle(), detail)
		req := &knowledgev1.RecordItemRequest{Type: knowledgev1.ItemType_ITEM_TYPE_GOTCHA, Content: clip(content, 16000),
			FilePattern: task.GetFile(), Tags: []string{"feature-build", "criterion-" + strings.ToLower(id), "signature-" + sig},
			Source:   &knowledgev1.Source{ExecutionId: ex.GetId(), TaskId: task.GetId()},
			Evidence: clip(fmt.Sprintf("verify reports %s (failed) and %s (passed), loop %s", prev.GetReportId(), cur.GetReportId(), b.GetId()), 16000),
			Project:  projectOfRepo(ex.GetRepository(), ex.GetTaskListId())}
		if _, err := s.knowledge.RecordItem(ctx, req); err != nil && ctx.Err() == nil {
			s.log.Warn("feature build: record what fixed a criterion", "feature_build", b.GetId(), "criterion", id, "err", err)
		}
	}
}

// projectOfRepo is the Knowledge project of a repository as the agents name it
// (platform/knowledgeproject: a clone URL's host/path, a local repository's absolute path, a
// scratch list's "tasklist:<id>").
func projectOfRepo(repo *schedulerv1.Repository, listID string) string {
	return knowledgeproject.Of(repo.GetUrl(), repo.GetPath(), listID)
}
