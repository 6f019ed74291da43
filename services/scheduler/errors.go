package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/services/scheduler/plan"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// This file is the one place the Scheduler service turns its errors into gRPC status. Handlers
// return toStatus(err) for every error; anything not recognised here is a bug and reaches the
// client as Internal.

// unimplemented answers an RPC whose behaviour a later issue builds, naming what is missing.
func unimplemented(method, what string) error {
	return grpcerr.Unimplemented("%s/%s is not implemented yet: %s (the Scheduler issue, #5)",
		schedulerv1.SchedulerService_ServiceDesc.ServiceName, method, what)
}

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
// broken rule; NotFound, AlreadyExists and FailedPrecondition for the store's answers; the
// context's own status when the call was cancelled or timed out; Unavailable when the store
// cannot be reached; Internal for anything else (a bug).
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var (
		bad    *badRequest
		netErr net.Error
		state  *stateError
	)
	switch {
	case errors.As(err, &state):
		return status.Error(state.code, state.msg)
	case errors.As(err, &bad):
		return grpcerr.InvalidArgument(bad.Error(), bad.violations...)
	case errors.Is(err, store.ErrBadPageToken):
		return grpcerr.InvalidArgument("invalid page_token: "+err.Error(),
			grpcerr.FieldViolation{Field: "page_token", Description: err.Error()})
	case errors.Is(err, store.ErrNotFound):
		return grpcerr.NotFound("%s", err.Error())
	case errors.Is(err, store.ErrAlreadyExists):
		return grpcerr.AlreadyExists("%s", err.Error())
	case errors.Is(err, store.ErrActive):
		return grpcerr.FailedPrecondition("%s", err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.As(err, &netErr), storeUnavailable(err):
		return grpcerr.Unavailable("scheduler store unreachable: %v", err)
	case errors.Is(err, plan.ErrCycle):
		// tasklist.Validate refuses cycles before planning: reaching the planner with one is a bug.
		return status.Errorf(codes.Internal, "plan: %v", err)
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Internal, "%v", err)
}

// storeUnavailable reports whether err says the store could not be reached or answer now: a
// refused or failed connection, a connection cut mid-request, Postgres shutting down or starting
// up (class 57P), out of connections or resources (class 53), a connection exception (class 08),
// a serialisation failure or deadlock (class 40). The caller may retry; it is not a bug.
func storeUnavailable(err error) bool {
	var (
		connectErr *pgconn.ConnectError
		pgErr      *pgconn.PgError
	)
	switch {
	case errors.As(err, &connectErr), pgconn.Timeout(err), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, pgx.ErrTxClosed):
		return true
	case errors.As(err, &pgErr):
		c := pgErr.Code
		return len(c) >= 2 && (c[:2] == "08" || c[:2] == "53" || c[:2] == "40" || (len(c) >= 3 && c[:3] == "57P"))
	}
	msg := err.Error()
	return strings.HasSuffix(msg, "conn closed") || strings.HasSuffix(msg, "closed pool")
}
