package registry

import (
	"context"
	"errors"

	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/services/registry/hot"
	"github.com/converge-dev/converge/services/registry/store"
)

// This file is the one place the Registry service turns its errors into gRPC status.

// toStatus maps a domain error of the store or the hot state to its status (DESIGN §3). Any other
// error is returned as it is, for the platform server's one error path (grpcerr.Resolve): a
// store outage (store.UnavailableError) is Unavailable, a bug Internal with the request id.
func (s *Server) toStatus(_ context.Context, err error) error {
	var (
		notFound   *store.NotFoundError
		exists     *store.AlreadyExistsError
		wrongOwner *store.WrongOwnerError
		transition *store.TransitionError
		replaced   *store.SessionReplacedError
		free       *hot.FreeError
		notHeld    *hot.NotHeldError
		stale      *hot.StaleTokenError
		wrongToken *hot.WrongTokenError
		other      *hot.HeldByOtherError
		notYours   *auth.NotYoursError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &notYours):
		return grpcerr.PermissionDenied("%s", notYours.Error())
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
	}
	return err
}

// invalid answers InvalidArgument for field of request msg, with one field violation.
func invalid(msg, field, description string) error {
	return grpcerr.InvalidArgument("invalid "+msg+": "+field+": "+description,
		grpcerr.FieldViolation{Field: field, Description: description})
}

// invalidPath answers InvalidArgument for a path or glob refused by package repopath: the
// rule it breaks, never the value.
func invalidPath(msg, field string, err error) error {
	return invalid(msg, field, err.Error())
}
