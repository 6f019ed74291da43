package registry

import (
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"

	"github.com/converge-dev/converge/platform/grpcerr"
)

// This file is the one place the Registry service turns its errors into gRPC status.

// unimplemented answers an RPC whose behaviour a later issue builds, naming what is missing.
func unimplemented(method, what string) error {
	return grpcerr.Unimplemented("%s/%s is not implemented yet: %s (the Registry issue, #3)",
		registryv1.RegistryService_ServiceDesc.ServiceName, method, what)
}
