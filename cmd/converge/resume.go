package main

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// runResume is `converge run --resume EXECUTION [tasks.md]`: a PAUSED execution is resumed, a
// RUNNING one followed, a FAILED or CANCELLED one (or one COMPLETED without converging) run again
// as a RETRY of its list, which does not run its completed tasks again and starts from its last
// integration. The optional tasks.md is written back as with a new run.
func runResume(parent context.Context, o runOptions, env runEnv) error {
	writeBackTo := ""
	if o.TasksFile != "" && !o.NoWriteBack {
		format, err := importFormat(o.TasksFile, o.Format)
		if err != nil {
			return err
		}
		if format != schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD {
			return usagef("--resume %s %s: only a tasks.md is written back; give the tasks.md the execution ran, or none", o.Resume, o.TasksFile)
		}
		writeBackTo = o.TasksFile
	}
	if o.client.Server == "" && o.DataDir == "" {
		return usagef("--resume %s: the execution is in a store: give --server (a deployment) or the --data-dir it ran with", o.Resume)
	}
	if o.client.Server == "" {
		// The in-process agents build in the run's repository and nowhere else: name it.
		if o.Repo == "" {
			return usagef("--resume %s --data-dir: give --repo, the local repository the execution builds in", o.Resume)
		}
		dir, err := checkGitRepo(o.Repo)
		if err != nil {
			return err
		}
		o.repoDir = dir
	}
	return runAndFollow(parent, o, env, writeBackTo, func(ctx context.Context, _ *grpc.ClientConn, client schedulerv1.SchedulerServiceClient) (string, error) {
		got, err := client.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: o.Resume})
		if err != nil {
			return "", rpcError("execution "+o.Resume, err)
		}
		ex := got.GetExecution()
		switch ex.GetStatus() {
		case schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED:
			if _, err := client.ResumeExecution(ctx, &schedulerv1.ResumeExecutionRequest{ExecutionId: ex.GetId(), Reason: "converge run --resume"}); err != nil {
				return "", rpcError("resume "+ex.GetId(), err)
			}
			fmt.Fprintf(env.stderr, "resumed %s\n", ex.GetId())
			return ex.GetId(), nil
		case schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING, schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING:
			fmt.Fprintf(env.stderr, "%s is %s: following it\n", ex.GetId(), statusWord(ex))
			return ex.GetId(), nil
		case schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED:
			if ex.GetOutcome() == commonv1.Outcome_OUTCOME_CONVERGED {
				return "", usagef("--resume %s: it already CONVERGED: nothing to continue", ex.GetId())
			}
		}
		res, err := client.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: ex.GetTaskListId(), Options: resumeOptions(o, ex.GetOptions()),
			TriggeredBy: schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_RETRY, PreviousExecutionId: ex.GetId(), RequestId: "resume-" + randomHex(8)})
		if err != nil {
			return "", rpcError("start a retry of "+ex.GetId(), err)
		}
		fmt.Fprintf(env.stderr, "%s ended %s: %s runs its list again from where it stopped\n", ex.GetId(), statusWord(ex), res.GetExecution().GetId())
		return res.GetExecution().GetId(), nil
	})
}

// resumeOptions are the options of a RETRY run: the previous run's, with the flags given now.
func resumeOptions(o runOptions, prev *schedulerv1.ExecutionOptions) *schedulerv1.ExecutionOptions {
	opts := executionOptions(o)
	if o.MaxParallel == 0 {
		opts.MaxParallel = prev.GetMaxParallel()
	}
	if o.MaxRetries == nil {
		opts.MaxRetries = prev.MaxRetries
	}
	if o.Dispatch == "" {
		opts.Dispatch = prev.GetDispatch()
	}
	if o.Heartbeat == 0 {
		opts.AgentConfig = nil
		if hb := prev.GetAgentConfig().GetHeartbeatInterval(); hb != nil {
			opts.AgentConfig = &commonv1.AgentConfig{HeartbeatInterval: hb}
		}
	}
	if o.MaxFailedTasks == nil {
		opts.MaxFailedTasks = prev.MaxFailedTasks
	}
	if o.CriticalPhases == nil {
		opts.CriticalPhases = prev.GetCriticalPhases()
	}
	opts.AllowUndeclaredFiles = opts.GetAllowUndeclaredFiles() || prev.GetAllowUndeclaredFiles()
	opts.Executor = prev.GetExecutor()
	return opts
}

func statusWord(ex *schedulerv1.Execution) string {
	return fmt.Sprint(ex.GetStatus().String()[len("EXECUTION_STATUS_"):])
}
