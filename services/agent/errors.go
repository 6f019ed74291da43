package agent

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/grpcerr"
)

// This file is the one place the Agent service turns its errors into gRPC status.

// noWorker: this process serves the Agent API without a worker.
func noWorker() error {
	return grpcerr.FailedPrecondition("this process runs no agent worker: start `converge dev --agents N` or `converge-agent --scheduler ADDR --registry ADDR`")
}

// draining: the worker takes no new work.
func draining() error {
	return grpcerr.FailedPrecondition("the worker is draining: it takes no new work")
}

// toStatus maps a worker error to a status.
func toStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}
