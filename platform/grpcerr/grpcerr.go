// Package grpcerr builds the gRPC status errors that converge services return,
// so that every service maps its domain errors to codes the same way
// (DESIGN §3):
//
//   - InvalidArgument, with an errdetails.BadRequest listing field violations
//   - NotFound, AlreadyExists
//   - FailedPrecondition: the resource is in the wrong state
//   - Aborted: stale lease or fencing token
//   - ResourceExhausted: budgets and limits
//   - Unavailable: a dependency (store, peer service) cannot be reached
//   - Unimplemented
//
// Internal is deliberately absent from these helpers: it means a bug, and no
// handler builds it. A handler returns the errors it does not recognise as they
// are, and the platform server passes every handler error through [Resolve],
// the one path for what is left:
//
//   - a status error (a domain error already mapped) goes out unchanged;
//   - the caller's cancelled or expired context is Canceled or DeadlineExceeded;
//   - a store that cannot answer ([database.IsUnavailable]: Postgres, SQLite or
//     Redis) is Unavailable, "retry later", without the driver's text;
//   - anything else is Internal, "internal error (request id X)", without the
//     error's text, which the server logs with the request id.
//
// A service keeps one function that maps its domain errors with these helpers,
// in the style of spicedb's internal/services/shared/errors.go:
//
//	func toStatus(err error) error {
//		var nf *store.NotFoundError
//		switch {
//		case errors.As(err, &nf):
//			return grpcerr.NotFound("lock %q not found", nf.Resource)
//		case errors.Is(err, store.ErrStaleToken):
//			return grpcerr.Aborted("fencing token is stale")
//		}
//		return err
//	}
package grpcerr

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/database"
)

// FieldViolation names one invalid request field and why it is invalid.
type FieldViolation struct {
	// Field is the dotted path of the field, e.g. "tasks[2].depends_on".
	Field string
	// Description says what is wrong in words an operator can act on.
	Description string
}

// InvalidArgument returns an InvalidArgument status with message msg and, when
// violations are given, an errdetails.BadRequest detail carrying them.
func InvalidArgument(msg string, violations ...FieldViolation) error {
	st := status.New(codes.InvalidArgument, msg)
	if len(violations) == 0 {
		return st.Err()
	}
	br := &errdetails.BadRequest{
		FieldViolations: make([]*errdetails.BadRequest_FieldViolation, 0, len(violations)),
	}
	for _, v := range violations {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field:       v.Field,
			Description: v.Description,
		})
	}
	withDetails, err := st.WithDetails(br)
	if err != nil {
		// Only fails if the detail cannot be marshalled; the code and
		// message are still right.
		return st.Err()
	}
	return withDetails.Err()
}

// Violations returns the field violations carried by err's BadRequest details,
// or nil if err is not a status error or has none. err may wrap the status.
func Violations(err error) []FieldViolation {
	st, ok := status.FromError(err)
	if !ok || st == nil {
		return nil
	}
	var out []FieldViolation
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		for _, v := range br.GetFieldViolations() {
			out = append(out, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
		}
	}
	return out
}

// NotFound returns a NotFound status with a formatted message.
func NotFound(format string, args ...any) error {
	return newf(codes.NotFound, format, args...)
}

// AlreadyExists returns an AlreadyExists status with a formatted message.
func AlreadyExists(format string, args ...any) error {
	return newf(codes.AlreadyExists, format, args...)
}

// FailedPrecondition returns a FailedPrecondition status (the target is in the
// wrong state for the request) with a formatted message.
func FailedPrecondition(format string, args ...any) error {
	return newf(codes.FailedPrecondition, format, args...)
}

// Aborted returns an Aborted status (stale lease or fencing token, lost race)
// with a formatted message.
func Aborted(format string, args ...any) error {
	return newf(codes.Aborted, format, args...)
}

// ResourceExhausted returns a ResourceExhausted status (a budget or limit was
// hit) with a formatted message.
func ResourceExhausted(format string, args ...any) error {
	return newf(codes.ResourceExhausted, format, args...)
}

// Unavailable returns an Unavailable status (a dependency cannot be reached;
// the client may retry) with a formatted message.
func Unavailable(format string, args ...any) error {
	return newf(codes.Unavailable, format, args...)
}

// PermissionDenied returns a PermissionDenied status (the authenticated caller
// may not do this, e.g. act as an identity another principal owns) with a
// formatted message.
func PermissionDenied(format string, args ...any) error {
	return newf(codes.PermissionDenied, format, args...)
}

// Unimplemented returns an Unimplemented status with a formatted message.
func Unimplemented(format string, args ...any) error {
	return newf(codes.Unimplemented, format, args...)
}

func newf(code codes.Code, format string, args ...any) error {
	if len(args) == 0 {
		// Do not interpret '%' in a message that has no arguments.
		return status.Error(code, format)
	}
	return status.Error(code, fmt.Sprintf(format, args...))
}

// Outcome says what [Resolve] made of an error, so the caller can log it.
type Outcome int

const (
	// Passed: a status error or the caller's context; nothing to log.
	Passed Outcome = iota
	// StoreUnavailable: the store could not answer; the client was told Unavailable.
	StoreUnavailable
	// Unexpected: a bug; the client was told Internal with the request id only.
	Unexpected
)

// UnavailableMessage is the message of the Unavailable status [Resolve] answers for a store
// that cannot answer.
const UnavailableMessage = "the store cannot answer now: retry later"

// Resolve answers what err, an error a handler returned, was and the status a client gets for
// it (see the package doc). requestID is the call's request id, quoted in the Internal message
// so an operator finds the log line.
func Resolve(err error, requestID string) (Outcome, error) {
	if err == nil {
		return Passed, nil
	}
	if st, ok := status.FromError(err); ok {
		if st.Code() != codes.Unknown {
			return Passed, err
		}
		// grpc-go's Unknown is a status made from an error that was not one: unexpected.
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if !database.IsUnavailable(err) {
			return Passed, status.FromContextError(err).Err()
		}
	}
	if database.IsUnavailable(err) {
		return StoreUnavailable, status.Error(codes.Unavailable, UnavailableMessage)
	}
	return Unexpected, InternalError(requestID)
}

// InternalError is the Internal status of an unexpected error or a panic: the request id and
// nothing of the error itself.
func InternalError(requestID string) error {
	if requestID == "" {
		return status.Error(codes.Internal, "internal error")
	}
	return status.Errorf(codes.Internal, "internal error (request id %s)", requestID)
}
