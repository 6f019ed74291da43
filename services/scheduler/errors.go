package scheduler

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/services/scheduler/plan"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// This file is the one place the Scheduler service turns its domain errors into gRPC status.
// Handlers return toStatus(err) for every error; anything not recognised here is returned as it
// is, for the platform server's one error path (grpcerr.Resolve): a store that cannot answer is
// Unavailable, anything else a bug, logged with the request id and answered Internal without its
// text.

// badRequest is a request that breaks the service's own rules (those protovalidate cannot check:
// a task list's dependencies, cycles, paths; a document that does not parse), one violation per
// broken rule.
type badRequest struct {
	// request is the request message's name, e.g. "CreateTaskListRequest".
	request    string
	violations []grpcerr.FieldViolation
}

// add records that field is invalid, and why.
func (b *badRequest) add(field, description string) {
	b.violations = append(b.violations, grpcerr.FieldViolation{Field: field, Description: description})
}

// orNil returns b as an error if it holds a violation, else nil.
func (b *badRequest) orNil() error {
	if len(b.violations) == 0 {
		return nil
	}
	return b
}

func (b *badRequest) Error() string {
	parts := make([]string, len(b.violations))
	for i, v := range b.violations {
		parts[i] = v.Field + ": " + v.Description
	}
	return "invalid " + b.request + ": " + strings.Join(parts, "; ")
}

// stateError is a request the execution's state does not allow: FailedPrecondition (wrong
// state), Aborted (a stale lease or fencing token: the caller lost the assignment) or
// ResourceExhausted (a budget or limit).
type stateError struct {
	code codes.Code
	msg  string
}

func (e *stateError) Error() string { return e.msg }

// failedPrecondition: the object is in a state that does not allow the request.
func failedPrecondition(format string, args ...any) error {
	return &stateError{code: codes.FailedPrecondition, msg: fmt.Sprintf(format, args...)}
}

// aborted: the caller's lease or fencing token is stale; it must drop the assignment.
func aborted(format string, args ...any) error {
	return &stateError{code: codes.Aborted, msg: fmt.Sprintf(format, args...)}
}

// toStatus maps err to the status the client gets: InvalidArgument with one field violation per
// broken rule; NotFound, AlreadyExists and FailedPrecondition for the store's answers. Anything
// else (the context's end, a store outage, a bug such as a cycle reaching the planner, which
// tasklist.Validate refuses first) is returned unchanged for grpcerr.Resolve.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var (
		bad      *badRequest
		state    *stateError
		notYours *auth.NotYoursError
		budget   *plan.BudgetError
	)
	switch {
	case errors.As(err, &budget):
		return status.Error(codes.ResourceExhausted, fmt.Sprintf("planning the waves stopped after %d operations, its budget, with %d of %d tasks placed: "+
			"the tasks' globs overlap too much to plan; use fewer or narrower globs (or exact files), or split the list", budget.Operations, budget.Placed, budget.Tasks))
	case errors.As(err, &notYours):
		return grpcerr.PermissionDenied("%s", notYours.Error())
	case errors.As(err, &state):
		return status.Error(state.code, state.msg)
	case errors.As(err, &bad):
		return grpcerr.InvalidArgument(bad.Error(), bad.violations...)
	case errors.Is(err, store.ErrNotFound):
		return grpcerr.NotFound("%s", err.Error())
	case errors.Is(err, store.ErrAlreadyExists):
		return grpcerr.AlreadyExists("%s", err.Error())
	case errors.Is(err, store.ErrActive):
		return grpcerr.FailedPrecondition("%s", err.Error())
	}
	return err
}
