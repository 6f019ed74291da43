package store

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// TxState is what every backend's ExecutionTx keeps besides its SQL: the execution as stored in
// the transaction, the transaction's time, and whether UpdateExecution's function has returned.
// Backends embed it, so the rules around the SQL are written once.
type TxState struct {
	// Exec is the execution as the transaction has it (its writes applied).
	Exec *schedulerv1.Execution
	// At is the transaction's time (the store's clock).
	At time.Time
	// Done is set once UpdateExecution's function has returned: the transaction is over.
	Done bool
	// Async is set by CommitAsync: the commit need not wait for durability.
	Async bool
}

// CommitAsync implements [ExecTx.CommitAsync]: it sets Async, which a backend may honour.
func (s *TxState) CommitAsync() { s.Async = true }

// ID is the execution's id.
func (s *TxState) ID() string { return s.Exec.GetId() }

// Check fails once UpdateExecution's function has returned.
func (s *TxState) Check() error {
	if s.Done {
		return fmt.Errorf("execution %q: %w", s.ID(), ErrTxDone)
	}
	return nil
}

// Now implements [ExecutionTx.Now].
func (s *TxState) Now() time.Time { return s.At }

// Execution implements [ExecutionTx.Execution].
func (s *TxState) Execution() *schedulerv1.Execution { return proto.CloneOf(s.Exec) }

// ExecutionRow checks that e may be written by this transaction and answers the row to store: e
// with the fields only the store sets kept as stored.
func (s *TxState) ExecutionRow(e *schedulerv1.Execution) (ExecutionRow, error) {
	if err := s.Check(); err != nil {
		return ExecutionRow{}, err
	}
	if e.GetId() != s.ID() {
		return ExecutionRow{}, fmt.Errorf("scheduler store: put execution %q in the transaction of %q", e.GetId(), s.ID())
	}
	r, err := EncodeExecution(e)
	if err != nil {
		return r, err
	}
	keepStored(&r, s.Exec, s.At)
	return r, nil
}
