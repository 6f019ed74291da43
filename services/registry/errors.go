package registry

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/services/registry/hot"
	"github.com/converge-dev/converge/services/registry/paths"
	"github.com/converge-dev/converge/services/registry/store"
)

// This file is the one place the Registry service turns its errors into gRPC status.

// toStatus maps a domain error of the store or the hot state to its status (DESIGN §3). An error
// it does not know is a bug: logged, and answered Internal without its details.
func (s *Server) toStatus(ctx context.Context, err error) error {
	var (
		notFound    *store.NotFoundError
		exists      *store.AlreadyExistsError
		wrongOwner  *store.WrongOwnerError
		transition  *store.TransitionError
		replaced    *store.SessionReplacedError
		unavailable *store.UnavailableError
		free        *hot.FreeError
		notHeld     *hot.NotHeldError
		stale       *hot.StaleTokenError
		wrongToken  *hot.WrongTokenError
		other       *hot.HeldByOtherError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &notFound):
		return grpcerr.NotFound("%s", notFound.Error())
	case errors.As(err, &free):
		return grpcerr.NotFound("%s", free.Error())
	case errors.As(err, &exists):
		return grpcerr.AlreadyExists("%s", exists.Error())
	case errors.As(err, &wrongOwner):
		return grpcerr.FailedPrecondition("%s", wrongOwner.Error())
	case errors.As(err, &transition):
		return grpcerr.FailedPrecondition("%s", transition.Error())
	case errors.As(err, &notHeld):
		return grpcerr.FailedPrecondition("%s", notHeld.Error())
	case errors.As(err, &other):
		return grpcerr.FailedPrecondition("%s", other.Error())
	case errors.As(err, &wrongToken):
		return grpcerr.FailedPrecondition("%s", wrongToken.Error())
	case errors.As(err, &replaced):
		return grpcerr.Aborted("%s", replaced.Error())
	case errors.As(err, &stale):
		return grpcerr.Aborted("%s", stale.Error())
	case errors.As(err, &unavailable):
		return grpcerr.Unavailable("registry store unavailable, retry: %v", unavailable.Err)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	id := server.RequestID(ctx)
	s.logger.ErrorContext(ctx, "registry: unexpected error", slog.String("request_id", id), slog.Any("error", err))
	return status.Errorf(codes.Internal, "internal error (request id %s): see the registry's log", id)
}

// invalid answers InvalidArgument for field of request msg, with one field violation.
func invalid(msg, field, description string) error {
	return grpcerr.InvalidArgument("invalid "+msg+": "+field+": "+description,
		grpcerr.FieldViolation{Field: field, Description: description})
}

// invalidPath answers InvalidArgument for a path or pattern refused by package paths.
func invalidPath(msg, field string, err error) error {
	for _, known := range []error{paths.ErrEmpty, paths.ErrAbsolute, paths.ErrDotDot, paths.ErrTooLong, paths.ErrInvalidChar, paths.ErrBadPattern} {
		if errors.Is(err, known) {
			return invalid(msg, field, known.Error())
		}
	}
	return invalid(msg, field, err.Error())
}

// invalidPageToken answers InvalidArgument for a page token this server did not issue for the
// request's query.
func invalidPageToken(msg string) error {
	return invalid(msg, "page_token", "is not a page token of this query: start again without one")
}
