package worker

import (
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/knowledgeproject"
)

// projectOf is the Knowledge project of an assignment: its repository's identity
// (platform/knowledgeproject, which the Scheduler names the same way), so that what is learned on
// one repository never reaches the prompts of another (issue 14 finding 10).
func projectOf(ca *schedulerv1.ClaimedAssignment) string {
	repo := ca.GetRepository()
	return knowledgeproject.Of(repo.GetUrl(), repo.GetPath(), ca.GetTaskListId())
}
