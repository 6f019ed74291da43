package agent

import (
	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"

	"github.com/converge-dev/converge/platform/grpcerr"
)

// This file is the one place the Agent service turns its errors into gRPC status.

// unimplemented answers an RPC whose behaviour a later issue builds, naming what is missing.
func unimplemented(method, what string) error {
	return grpcerr.Unimplemented("%s/%s is not implemented yet: %s (the Agent issue, #5)",
		agentv1.AgentService_ServiceDesc.ServiceName, method, what)
}
