package scheduler

import (
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"

	"github.com/converge-dev/converge/platform/grpcerr"
)

// This file is the one place the Scheduler service turns its errors into gRPC status.

// unimplemented answers an RPC whose behaviour a later issue builds, naming what is missing.
func unimplemented(method, what string) error {
	return grpcerr.Unimplemented("%s/%s is not implemented yet: %s (the Scheduler issue, #5)",
		schedulerv1.SchedulerService_ServiceDesc.ServiceName, method, what)
}
