package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Every server of a process validates with one validator, so a message's rules are compiled once
// per process (not once per server), and a server compiles its services' request rules when it
// is built: its first call of an RPC does not wait for them.
func TestServersShareOneWarmedValidator(t *testing.T) {
	t.Parallel()
	svc := []Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: schedulerv1.UnimplementedSchedulerServiceServer{}}}
	a, err := Config{Name: "a", Services: svc}.complete()
	require.NoError(t, err)
	b, err := Config{Name: "b", Services: svc}.complete()
	require.NoError(t, err)
	require.Same(t, a.validator, b.validator, "each server compiled the same rules again")
	// A warmed request validates as before: violations for a bad one, none for a good one.
	require.Error(t, validate(a.validator, &schedulerv1.GetExecutionRequest{}))
	require.NoError(t, validate(a.validator, &schedulerv1.GetExecutionRequest{ExecutionId: "ex-1"}))
}
