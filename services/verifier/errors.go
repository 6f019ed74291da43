package verifier

import (
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"

	"github.com/converge-dev/converge/platform/grpcerr"
)

// This file is the one place the Verifier service turns its errors into gRPC status.

// unimplemented answers an RPC whose behaviour a later issue builds, naming what is missing.
func unimplemented(method, what string) error {
	return grpcerr.Unimplemented("%s/%s is not implemented yet: %s (the Verifier issue, #4)",
		verifierv1.VerifierService_ServiceDesc.ServiceName, method, what)
}
