package agent

import (
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

// toStatus maps a worker error to a status: the worker's domain errors have none today, so every
// error is returned as it is, for the platform server's one error path (grpcerr.Resolve): the
// context's end is Canceled or DeadlineExceeded, anything else a bug, logged with the request id
// and answered Internal without its text (it used to be sent as Internal with the text).
func toStatus(err error) error {
	return err
}
