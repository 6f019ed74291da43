package grpcerr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/grpcerr"
)

func TestInvalidArgument(t *testing.T) {
	t.Parallel()

	t.Run("WithViolations", func(t *testing.T) {
		t.Parallel()

		violations := []grpcerr.FieldViolation{
			{Field: "tasks[1].id", Description: "duplicate task id \"a\""},
			{Field: "tasks[2].depends_on[0]", Description: "unknown task \"zz\""},
		}
		err := grpcerr.InvalidArgument("invalid task list", violations...)

		st, ok := status.FromError(err)
		require.True(t, ok)
		require.Equal(t, codes.InvalidArgument, st.Code())
		require.Equal(t, "invalid task list", st.Message())

		// The detail is a plain errdetails.BadRequest, readable by any client.
		require.Len(t, st.Details(), 1)
		br, ok := st.Details()[0].(*errdetails.BadRequest)
		require.True(t, ok)
		require.Len(t, br.GetFieldViolations(), 2)
		require.Equal(t, "tasks[1].id", br.GetFieldViolations()[0].GetField())

		require.Equal(t, violations, grpcerr.Violations(err))
	})

	t.Run("WithoutViolations", func(t *testing.T) {
		t.Parallel()

		err := grpcerr.InvalidArgument("page_token is not valid")
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.Empty(t, status.Convert(err).Details())
		require.Nil(t, grpcerr.Violations(err))
	})
}

func TestViolations(t *testing.T) {
	t.Parallel()

	require.Nil(t, grpcerr.Violations(nil))
	require.Nil(t, grpcerr.Violations(errors.New("plain")))
	require.Nil(t, grpcerr.Violations(grpcerr.NotFound("x")))

	// A wrapped status error is still read.
	wrapped := fmt.Errorf("create task list: %w",
		grpcerr.InvalidArgument("bad", grpcerr.FieldViolation{Field: "name", Description: "required"}))
	require.Equal(t, []grpcerr.FieldViolation{{Field: "name", Description: "required"}}, grpcerr.Violations(wrapped))
}

func TestConstructors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		fn   func(string, ...any) error
		code codes.Code
	}{
		{"NotFound", grpcerr.NotFound, codes.NotFound},
		{"AlreadyExists", grpcerr.AlreadyExists, codes.AlreadyExists},
		{"FailedPrecondition", grpcerr.FailedPrecondition, codes.FailedPrecondition},
		{"Aborted", grpcerr.Aborted, codes.Aborted},
		{"ResourceExhausted", grpcerr.ResourceExhausted, codes.ResourceExhausted},
		{"Unavailable", grpcerr.Unavailable, codes.Unavailable},
		{"Unimplemented", grpcerr.Unimplemented, codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			err := tt.fn("task %q in run %d", "t1", 3)
			st := status.Convert(err)
			require.Equal(t, tt.code, st.Code())
			require.Equal(t, `task "t1" in run 3`, st.Message())

			// Without arguments the message is taken literally.
			require.Equal(t, "100% done", status.Convert(tt.fn("100% done")).Message())
		})
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	o, out := grpcerr.Resolve(nil, "r1")
	require.NoError(t, out)
	require.Equal(t, grpcerr.Passed, o)

	nf := grpcerr.NotFound("lock %q not found", "a")
	o, out = grpcerr.Resolve(fmt.Errorf("get: %w", nf), "r1")
	require.Equal(t, codes.NotFound, status.Code(out))
	require.Equal(t, grpcerr.Passed, o)

	o, out = grpcerr.Resolve(fmt.Errorf("query: %w", context.Canceled), "r1")
	require.Equal(t, codes.Canceled, status.Code(out))
	require.Equal(t, grpcerr.Passed, o)

	o, out = grpcerr.Resolve(fmt.Errorf("query: %w", &database.UnavailableError{Err: errors.New("dial tcp 10.1.2.3:5432")}), "r1")
	require.Equal(t, codes.Unavailable, status.Code(out))
	require.Equal(t, grpcerr.StoreUnavailable, o)
	require.NotContains(t, status.Convert(out).Message(), "10.1.2.3")

	for _, bug := range []error{
		errors.New(`ERROR: relation "x" does not exist (SQLSTATE 42P01)`),
		status.Error(codes.Unknown, "open /var/lib/x: permission denied"),
	} {
		o, out = grpcerr.Resolve(bug, "r1")
		require.Equal(t, codes.Internal, status.Code(out))
		require.Equal(t, "internal error (request id r1)", status.Convert(out).Message())
		require.Equal(t, grpcerr.Unexpected, o)
	}
}
