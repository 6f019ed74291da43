// Package grpcerrtest checks, in services' tests, the answers of the platform's one error path
// (grpcerr.Resolve): a bug is Internal with a request id and none of its text, a store outage is
// Unavailable.
package grpcerrtest

import (
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/grpcerr"
)

// internalMessage is the whole message of an unexpected error's status.
var internalMessage = regexp.MustCompile(`^internal error \(request id [0-9A-Za-z_.:-]+\)$`)

// leaks are pieces of internal text that must never reach a client: SQL, driver and file names.
var leaks = []string{"relation", "table", "column", "SELECT", "INSERT", "SQLSTATE", "sqlite", "pgx", "/", ".go", "dial", "redis"}

// RequireInternal checks that err is Internal, says "internal error (request id X)" and
// nothing else: no SQL, no driver text, no file path.
func RequireInternal(t testing.TB, err error) {
	t.Helper()
	if got := status.Code(err); got != codes.Internal {
		t.Fatalf("code %s, want Internal: %v", got, err)
	}
	msg := status.Convert(err).Message()
	if !internalMessage.MatchString(msg) {
		t.Fatalf("message %q, want \"internal error (request id X)\"", msg)
	}
	for _, leak := range leaks {
		if strings.Contains(msg, leak) {
			t.Fatalf("message %q leaks %q", msg, leak)
		}
	}
}

// RequireUnavailable checks that err is the Unavailable of a store that cannot answer, without
// the driver's text.
func RequireUnavailable(t testing.TB, err error) {
	t.Helper()
	if got := status.Code(err); got != codes.Unavailable {
		t.Fatalf("code %s, want Unavailable: %v", got, err)
	}
	if msg := status.Convert(err).Message(); msg != grpcerr.UnavailableMessage {
		t.Fatalf("message %q, want %q", msg, grpcerr.UnavailableMessage)
	}
}
