package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/grpcerr"
)

// A store that cannot be reached or answer now (Postgres down, restarting, a connection cut
// mid-request) is Unavailable, which clients retry, not Internal, which says a bug.
func TestToStatusStoreUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, refused := pgconn.Connect(ctx, "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
	require.Error(t, refused)
	for name, err := range map[string]error{
		"connection refused": fmt.Errorf("scheduler store: claimable executions: %w", refused),
		"cut mid-request":    fmt.Errorf("scheduler store: expired leases: %w", io.ErrUnexpectedEOF),
		"admin shutdown":     fmt.Errorf("update: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}),
		"starting up":        &pgconn.PgError{Code: "57P03", Message: "the database system is not yet accepting connections"},
		"too many clients":   &pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"},
		"conn closed":        errors.New("scheduler store: read log: conn closed"),
	} {
		_, out := grpcerr.Resolve(toStatus(err), "req-1")
		require.Equal(t, codes.Unavailable, status.Code(out), name)
	}
	_, out := grpcerr.Resolve(toStatus(&pgconn.PgError{Code: "42P01", Message: "relation does not exist"}), "req-1")
	require.Equal(t, codes.Internal, status.Code(out), "a missing table is a bug")
	require.Equal(t, "internal error (request id req-1)", status.Convert(out).Message(), "no raw error text")
}
