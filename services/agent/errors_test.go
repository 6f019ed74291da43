package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
)

// TestUnexpectedErrorIsInternal: an error of the worker the service does not know is answered
// Internal with the request id and none of its text (the Agent used to send the text), through
// the platform server's one error path; the context's end keeps its own code.
func TestUnexpectedErrorIsInternal(t *testing.T) {
	t.Parallel()
	outcome, out := grpcerr.Resolve(toStatus(fmt.Errorf("worktree: %w", errors.New("open /var/lib/converge/x: permission denied"))), "req-9")
	require.Equal(t, codes.Internal, status.Code(out))
	require.Equal(t, "internal error (request id req-9)", status.Convert(out).Message())
	require.Equal(t, grpcerr.Unexpected, outcome)

	_, out = grpcerr.Resolve(toStatus(context.Canceled), "req-9")
	require.Equal(t, codes.Canceled, status.Code(out))
}

// TestDomainErrorsPassTheErrorPath: the Agent's own answers reach the client unchanged through
// the real platform server.
func TestDomainErrorsPassTheErrorPath(t *testing.T) {
	t.Parallel()
	conn := servertest.Serve(t, server.Config{
		Name:     "agent-test",
		Services: []server.Service{{Desc: &agentv1.AgentService_ServiceDesc, Impl: New()}},
	})
	_, err := agentv1.NewAgentServiceClient(conn).GetStatus(t.Context(), &agentv1.GetStatusRequest{})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "runs no agent worker")
}
