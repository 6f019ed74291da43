package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// runAndFollow connects (or starts the in-process suite), starts the execution with start, keeps
// writeBackTo (a tasks.md; "" for none) current with it, follows it to its end and prints the
// summary. Ctrl-C (or SIGTERM) cancels the execution, then ends with 130.
func runAndFollow(parent context.Context, o runOptions, env runEnv, writeBackTo string,
	start func(ctx context.Context, conn *grpc.ClientConn, client schedulerv1.SchedulerServiceClient) (string, error)) error {
	inProcess := o.client.Server == ""
	sigCtx := env.signals
	if sigCtx == nil {
		var stop context.CancelFunc
		sigCtx, stop = signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}

	progressOut := env.stdout
	if o.JSON {
		progressOut = env.stderr
	}
	started := time.Now()
	f := followUp{server: o.client.Server, rerun: env.rerun}
	var (
		conn      *grpc.ClientConn
		converged bool
		err       error
	)
	if inProcess {
		s, err := startSuite(sigCtx, o, env)
		if err != nil {
			return err
		}
		defer s.stop()
		conn, f.dataDir, f.logFile = s.conn, o.DataDir, s.logPath
		defer func() { s.keepLog = s.keepLog || !converged }() // before stop: the log of a failed run stays
	} else {
		if conn, err = o.client.connect(sigCtx); err != nil {
			return err
		}
		defer conn.Close()
	}
	client := schedulerv1.NewSchedulerServiceClient(conn)
	id, err := start(sigCtx, conn, client)
	if err != nil {
		return err
	}

	var wb *writeBack
	wbDone := make(chan struct{})
	wbCtx, stopWriteBack := context.WithCancel(sigCtx)
	if writeBackTo != "" {
		wb = newWriteBack(writeBackTo, client, env.stderr)
		go func() { defer close(wbDone); wb.run(wbCtx, id) }()
	} else {
		close(wbDone)
	}
	agents := 0
	if inProcess {
		agents = o.Agents
	}
	_, ferr := follow(sigCtx, client, id, followOptions{out: progressOut, live: env.live, agents: agents})
	stopWriteBack()
	<-wbDone
	interrupted := sigCtx.Err() != nil
	// From here on the signal context is spent: the rest gets its own time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), time.Minute)
	defer cancel()
	if interrupted {
		fmt.Fprintf(progressOut, "\n🛑 Interrupted: cancelling %s\n", id)
		if _, err := client.CancelExecution(ctx, &schedulerv1.CancelExecutionRequest{ExecutionId: id, Reason: "interrupted in converge run (Ctrl-C)"}); err != nil &&
			status.Code(err) != codes.FailedPrecondition { // it ended meanwhile
			fmt.Fprintf(env.stderr, "converge run: cancel %s: %v\n", id, rpcError("cancel", err))
		}
	} else if ferr != nil {
		return ferr
	}
	sum, err := gatherSummary(ctx, client, id, time.Since(started), f)
	if err != nil {
		return err
	}
	if wb != nil {
		wb.sync(ctx, sum.ex, true)
	}
	converged = sum.converged()
	if o.JSON {
		if err := sum.writeJSON(env.stdout); err != nil {
			return err
		}
	} else {
		sum.render(env.stdout)
	}
	switch {
	case interrupted:
		return exitError{code: exitInterrupted}
	case !sum.converged():
		return exitError{code: exitFailure}
	}
	return nil
}
