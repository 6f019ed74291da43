package knowledge

import (
	"errors"
	"fmt"
	"strings"

	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/services/knowledge/store"
)

// This file is the one place the Knowledge service turns its domain errors into gRPC status.
// Handlers return toStatus(err) for every error; anything not recognised here is returned as it
// is, for the platform server's one error path (grpcerr.Resolve): a store that cannot answer is
// Unavailable, anything else a bug, logged with the request id and answered Internal without its
// text (it used to reach the client as Unknown, with its text).

// badRequest is a request that breaks the service's own rules (those protovalidate cannot check,
// such as a glob that does not parse), one fieldError per broken rule.
type badRequest struct {
	// request is the request message's name, e.g. "RecordItemRequest".
	request string
	fields  []fieldError
}

// fieldError is one invalid field and why.
type fieldError struct {
	field string
	err   error
}

// add records that field is invalid because of err.
func (b *badRequest) add(field string, err error) {
	b.fields = append(b.fields, fieldError{field, err})
}

// addf records that field is invalid, with a formatted reason.
func (b *badRequest) addf(field, format string, args ...any) {
	b.add(field, fmt.Errorf(format, args...))
}

// orNil returns b as an error if it holds a field error, else nil.
func (b *badRequest) orNil() error {
	if len(b.fields) == 0 {
		return nil
	}
	return b
}

func (b *badRequest) Error() string {
	parts := make([]string, len(b.fields))
	for i, f := range b.fields {
		parts[i] = f.field + ": " + f.err.Error()
	}
	return "invalid " + b.request + ": " + strings.Join(parts, "; ")
}

// itemNotFound says no item has the id a request named (or the id is not one this service
// issues).
type itemNotFound struct{ id string }

func (e *itemNotFound) Error() string { return fmt.Sprintf("knowledge item %q not found", e.id) }

// notFoundAs turns the store's ErrNotFound into itemNotFound for the id the request named.
func notFoundAs(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &itemNotFound{id: id}
	}
	return err
}

// toStatus maps err to the status the client gets: InvalidArgument with one field violation per
// broken rule, NotFound; anything else is returned as is, for grpcerr.Resolve.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var (
		bad      *badRequest
		notFound *itemNotFound
	)
	switch {
	case errors.As(err, &bad):
		violations := make([]grpcerr.FieldViolation, len(bad.fields))
		for i, f := range bad.fields {
			violations[i] = grpcerr.FieldViolation{Field: f.field, Description: f.err.Error()}
		}
		return grpcerr.InvalidArgument(bad.Error(), violations...)
	case errors.As(err, &notFound):
		return grpcerr.NotFound("%s", notFound.Error())
	}
	return err
}
