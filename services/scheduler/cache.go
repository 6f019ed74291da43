package scheduler

import (
	"context"
	"sync"

	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// Caches of facts that never change once stored: task lists, the list an execution runs and the
// execution an assignment belongs to.

// lists caches task lists by id: a stored list never changes (only its tasks' statuses, which the
// engine does not read from here), so the engine reads each once per process.
type lists struct {
	mu sync.Mutex
	m  map[string]*store.TaskList
	// index maps list id → task id → position in Spec.Tasks.
	index map[string]map[string]int
	// byExecution maps execution id → task list id.
	byExecution map[string]string
	// dependents maps list id → task id → the tasks that depend on it (eager.go), built on first
	// use.
	dependents map[string]map[string][]string
	// signoffs maps list id → the ids of its gates that require a sign-off (gatesignoff.go),
	// built on first use: every wave's end asks, and a scan of the list there was O(tasks) per
	// wave.
	signoffs map[string][]string
	// prepared maps list id → its tasks prepared for planning (planlists.go), built on first use.
	prepared map[string]preparedList
}

func (s *Server) taskList(ctx context.Context, id string) (*store.TaskList, map[string]int, error) {
	s.lists.mu.Lock()
	tl, ok := s.lists.m[id]
	idx := s.lists.index[id]
	s.lists.mu.Unlock()
	if ok {
		return tl, idx, nil
	}
	tl, err := s.store.GetTaskList(ctx, id, store.ViewFull)
	if err != nil {
		return nil, nil, err
	}
	tl, idx = s.cacheList(tl)
	return tl, idx, nil
}

// cacheList keeps tl, just read from the store, as taskList would have read it, unless the
// list is cached already (then the cached one and its index are answered).
func (s *Server) cacheList(tl *store.TaskList) (*store.TaskList, map[string]int) {
	s.lists.mu.Lock()
	if c, ok := s.lists.m[tl.ID]; ok {
		idx := s.lists.index[tl.ID]
		s.lists.mu.Unlock()
		return c, idx
	}
	s.lists.mu.Unlock()
	idx := make(map[string]int, len(tl.Spec.GetTasks()))
	for i, t := range tl.Spec.GetTasks() {
		idx[t.GetId()] = i
	}
	s.lists.mu.Lock()
	if len(s.lists.m) > 256 {
		s.lists.m, s.lists.index = map[string]*store.TaskList{}, map[string]map[string]int{}
		s.lists.dependents, s.lists.signoffs = nil, nil
	}
	s.lists.m[tl.ID], s.lists.index[tl.ID] = tl, idx
	s.lists.mu.Unlock()
	return tl, idx
}

// forgetList drops a deleted list from the cache.
func (s *Server) forgetList(id string) {
	s.lists.mu.Lock()
	delete(s.lists.m, id)
	delete(s.lists.index, id)
	delete(s.lists.dependents, id)
	delete(s.lists.signoffs, id)
	delete(s.lists.prepared, id)
	s.lists.mu.Unlock()
}

// signoffGates answers the ids of list tl's gates that require a sign-off (cached: a stored
// list never changes).
func (s *Server) signoffGates(tl *store.TaskList) []string {
	s.lists.mu.Lock()
	defer s.lists.mu.Unlock()
	if ids, ok := s.lists.signoffs[tl.ID]; ok {
		return ids
	}
	ids := []string{}
	for _, t := range tl.Spec.GetTasks() {
		if t.GetRequiresSignoff() && tasklist.IsGate(t) {
			ids = append(ids, t.GetId())
		}
	}
	if s.lists.signoffs == nil || len(s.lists.signoffs) > 256 {
		s.lists.signoffs = map[string][]string{}
	}
	s.lists.signoffs[tl.ID] = ids
	return ids
}

// listOf returns the task list an execution runs (cached: it never changes).
func (s *Server) listOf(ctx context.Context, execution string) (string, error) {
	s.lists.mu.Lock()
	id, ok := s.lists.byExecution[execution]
	s.lists.mu.Unlock()
	if ok {
		return id, nil
	}
	e, err := s.store.Execution(ctx, execution)
	if err != nil {
		return "", err
	}
	s.lists.mu.Lock()
	if len(s.lists.byExecution) > 100000 {
		s.lists.byExecution = map[string]string{}
	}
	s.lists.byExecution[execution] = e.GetTaskListId()
	s.lists.mu.Unlock()
	return e.GetTaskListId(), nil
}

// executionOf finds the execution an assignment belongs to (to lock it first). An assignment
// never changes execution, so the answer is remembered: reports and completions then go straight
// to the execution's transaction, without a store round trip first.
func (s *Server) executionOf(ctx context.Context, assignmentID string) (string, error) {
	if id, ok := s.owners.get(assignmentID); ok {
		return id, nil
	}
	id, err := s.store.AssignmentExecution(ctx, assignmentID)
	if err == nil {
		s.owners.put(assignmentID, id)
	}
	return id, err
}

// owners remembers which execution an assignment belongs to, up to maxOwners assignments (then
// it starts over: a miss costs one store read).
type owners struct {
	mu sync.Mutex
	m  map[string]string
}

const maxOwners = 1 << 16

func (o *owners) get(assignment string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id, ok := o.m[assignment]
	return id, ok
}

func (o *owners) put(assignment, execution string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil || len(o.m) >= maxOwners {
		o.m = make(map[string]string)
	}
	o.m[assignment] = execution
}
