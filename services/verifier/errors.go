package verifier

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/services/verifier/criteria"
	"github.com/converge-dev/converge/services/verifier/store"
)

// This file is the one place the Verifier service turns its errors into gRPC status. Handlers
// return the domain errors below (and the store's); toStatus maps them.

// badRequestError is a request that breaks a rule only code can check (InvalidArgument).
type badRequestError struct {
	// request is the request message's name, e.g. "VerifyRequest".
	request    string
	violations []grpcerr.FieldViolation
}

func (e *badRequestError) Error() string {
	parts := make([]string, len(e.violations))
	for i, v := range e.violations {
		parts[i] = v.Field + ": " + v.Description
	}
	return fmt.Sprintf("invalid %s: %s", e.request, strings.Join(parts, "; "))
}

// withField turns a criteria parse error into a badRequestError whose violations name the lines
// of field: "markdown:L12". Other errors are answered as they are.
func withField(request, field string, err error) error {
	var perr *criteria.Error
	if !errors.As(err, &perr) {
		return err
	}
	out := &badRequestError{request: request}
	for _, p := range perr.Problems {
		out.violations = append(out.violations, grpcerr.FieldViolation{
			Field:       fmt.Sprintf("%s:L%d", field, p.Line),
			Description: p.Message,
		})
	}
	return out
}

// errBusy is the answer when MaxVerifications verifications already run (ResourceExhausted).
var errBusy = errors.New("busy")

// notFoundError is a report or loop that does not exist (NotFound).
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

// reportNotFound maps store.ErrNotFound of report id to a notFoundError.
func reportNotFound(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &notFoundError{msg: fmt.Sprintf("no report has id %q", id)}
	}
	return err
}

// noCompleteReportError is a loop without a complete report (NotFound).
type noCompleteReportError struct{ loopKey string }

func (e *noCompleteReportError) Error() string {
	return fmt.Sprintf("loop %q has no complete report: run Verify for it first", e.loopKey)
}

// reportOfOtherLoopError is a reviewed report that belongs to another loop (NotFound).
type reportOfOtherLoopError struct{ id, loopKey string }

func (e *reportOfOtherLoopError) Error() string {
	return fmt.Sprintf("report %q does not belong to loop %q", e.id, e.loopKey)
}

// preconditionError is a request that does not fit the state it acts on (FailedPrecondition).
type preconditionError struct{ msg string }

func (e *preconditionError) Error() string { return e.msg }

func preconditionf(format string, args ...any) error {
	return &preconditionError{msg: fmt.Sprintf(format, args...)}
}

// wallTimeError is a verification that ran past the verifier's cap (DeadlineExceeded).
type wallTimeError struct{ max time.Duration }

func (e *wallTimeError) Error() string {
	return fmt.Sprintf("the verification ran past this verifier's limit of %s (--max-verification-time): its checks were stopped; "+
		"verify fewer or faster criteria, or ask its operator for a longer limit", e.max)
}

// toStatus maps a domain error of a handler to the status the client gets. Any other error is
// returned as it is, for the platform server's one error path (grpcerr.Resolve): a store that
// cannot answer is Unavailable, a bug Internal with the request id and none of its text.
func (s *Server) toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var (
		bad      *badRequestError
		nf       *notFoundError
		noReport *noCompleteReportError
		other    *reportOfOtherLoopError
		pre      *preconditionError
		perm     *permissionError
		wall     *wallTimeError
		exists   *store.IterationExistsError
		behind   *store.IterationBehindError
	)
	switch {
	case errors.As(err, &bad):
		return grpcerr.InvalidArgument(bad.Error(), bad.violations...)
	case errors.As(err, &nf):
		return grpcerr.NotFound("%s", nf.Error())
	case errors.As(err, &noReport):
		return grpcerr.NotFound("%s", noReport.Error())
	case errors.As(err, &other):
		return grpcerr.NotFound("%s", other.Error())
	case errors.Is(err, store.ErrNotFound):
		return grpcerr.NotFound("not found")
	case errors.As(err, &exists):
		return grpcerr.AlreadyExists("%s: verify iteration %d or later, or leave iteration unset for the next one",
			exists.Error(), exists.Iteration+1)
	case errors.As(err, &behind):
		return grpcerr.FailedPrecondition("%s: iterations only move forward", behind.Error())
	case errors.As(err, &pre):
		return grpcerr.FailedPrecondition("%s", pre.Error())
	case errors.As(err, &wall):
		return status.Error(codes.DeadlineExceeded, wall.Error())
	case errors.As(err, &perm):
		return status.Error(codes.PermissionDenied, perm.Error())
	case errors.Is(err, errBusy):
		return grpcerr.ResourceExhausted("the verifier already runs its maximum of %d verifications: retry later", s.cfg.maxVerifications)
	}
	return err
}
