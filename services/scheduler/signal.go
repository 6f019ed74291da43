package scheduler

import "sync"

// signal wakes long polls (ClaimTask) and streams (WatchExecution) of this replica; other
// replicas find the change on their next poll, or at once through the store's notifications
// (Postgres LISTEN/NOTIFY, driver.go's changeListener).
//
// It also remembers which executions have ended (committed COMPLETED, FAILED or CANCELLED by
// this replica, or announced so by another's notification): a ClaimTask filtered on one of them
// has nothing more to wait for and answers at once.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
	// ended holds the ids of the last endedKept executions known to have ended; order is their
	// ring, oldest at next.
	ended map[string]struct{}
	order []string
	next  int
}

// endedKept bounds what signal remembers of ended executions: a claim on an execution ended
// longer ago than that (or before the process started) waits out its wait, as the contract
// allows.
const endedKept = 1024

func newSignal() *signal { return &signal{ch: make(chan struct{}), ended: map[string]struct{}{}} }

// wait returns a channel closed at the next broadcast.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *signal) broadcast() {
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}

// end records that execution id has ended (the caller broadcasts after).
func (s *signal) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ended[id]; ok {
		return
	}
	if len(s.order) < endedKept {
		s.order = append(s.order, id)
	} else {
		delete(s.ended, s.order[s.next])
		s.order[s.next] = id
		s.next = (s.next + 1) % endedKept
	}
	s.ended[id] = struct{}{}
}

// hasEnded reports whether execution id is known to have ended.
func (s *signal) hasEnded(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ended[id]
	return ok
}
