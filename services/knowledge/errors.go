package knowledge

import (
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"

	"github.com/converge-dev/converge/platform/grpcerr"
)

// This file is the one place the Knowledge service turns its errors into gRPC status.

// unimplemented answers an RPC whose behaviour a later issue builds, naming what is missing.
func unimplemented(method, what string) error {
	return grpcerr.Unimplemented("%s/%s is not implemented yet: %s (the Knowledge issue, #3)",
		knowledgev1.KnowledgeService_ServiceDesc.ServiceName, method, what)
}
