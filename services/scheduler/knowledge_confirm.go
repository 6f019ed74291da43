package scheduler

import (
	"context"
	"slices"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A passing task confirms the provisional knowledge it was given (the design's "new items capped
// below the injection threshold until confirmed by a second principal or a passing task"). The
// agent logs the knowledge_item_ids of the items given to each try; when a task's assignment
// completes SUCCEEDED, the Scheduler — its own principal, an operator, never the recorder —
// confirms each provisional item its log names through the Knowledge service's ConfirmItem.
//
// Trust: the agent asserts which items it was given, so an item the completing agent's own
// principal recorded is never confirmed by its pass (an agent cannot launder its own item
// through a task it reports passed); items already unprovisional are left alone (a pass does not
// inflate a trusted item's confidence); a failed, skipped or cancelled task confirms nothing.

// maxConfirmedPerTask bounds the items one completion confirms (the agent's prompt takes a few
// per file).
const maxConfirmedPerTask = 64

// confirmTimeout bounds the Knowledge calls of one completion.
const confirmTimeout = 10 * time.Second

// confirmGiven confirms the provisional knowledge items the log of assignment a's try names, when
// the task passed; agent is the completing agent's principal.
func (s *Server) confirmGiven(ctx context.Context, eid string, a *schedulerv1.Assignment, agent string) {
	if s.knowledge == nil || a.GetKind() != schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK ||
		a.GetResult() != schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), confirmTimeout)
	defer cancel()
	entries, _, _, err := s.store.ReadLog(ctx, store.LogQuery{ExecutionID: eid, TaskID: a.GetTaskId(), InstanceID: a.GetInstanceId(),
		EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_INFO}, Limit: 500, Tail: true})
	if err != nil {
		s.log.Warn("knowledge: read the items given to a passing task", "execution", eid, "task", a.GetTaskId(), "err", err)
		return
	}
	var ids []string
	for _, e := range entries {
		for _, v := range e.GetContext().GetFields()["knowledge_item_ids"].GetListValue().GetValues() {
			if id := v.GetStringValue(); id != "" && !slices.Contains(ids, id) && len(ids) < maxConfirmedPerTask {
				ids = append(ids, id)
			}
		}
	}
	for _, id := range ids {
		got, err := s.knowledge.GetItem(ctx, &knowledgev1.GetItemRequest{Id: id})
		if err != nil {
			s.log.Debug("knowledge: item given to a passing task", "item", id, "err", err)
			continue
		}
		it := got.GetItem()
		if !it.GetProvisional() || it.GetRecordedBy() == agent {
			continue
		}
		if _, err := s.knowledge.ConfirmItem(ctx, &knowledgev1.ConfirmItemRequest{Id: id,
			Evidence: "task " + a.GetTaskId() + " of execution " + eid + " passed with it in its prompt (assignment " + a.GetId() + ")"}); err != nil {
			s.log.Warn("knowledge: confirm an item given to a passing task", "item", id, "err", err)
		}
	}
}
