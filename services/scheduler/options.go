package scheduler

import (
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The options of an execution: StartExecution stores them resolved (every default filled in, once),
// GetExecution shows them so, and ClaimTask hands them to the agent as they are stored.

// Defaults of ExecutionOptions, filled in once by resolved when an execution is created.
const (
	defaultMaxParallel    = 4
	defaultMaxRetries     = 3
	defaultMaxFailedTasks = 3
	defaultTaskTimeout    = 300 * time.Second
	defaultHeartbeat      = 30 * time.Second
	defaultValidation     = 120 * time.Second
	defaultWallTime       = 24 * time.Hour
	defaultMinConfidence  = 0.6
	defaultCriticalPhase  = "database"
)

// executorCapabilityOf prefixes the executor kind in the capability an agent announces.
const executorCapabilityOf = "executor:"

// resolved returns o with every default filled in (GetExecution shows them).
func resolved(o *schedulerv1.ExecutionOptions) *schedulerv1.ExecutionOptions {
	r := proto.Clone(o).(*schedulerv1.ExecutionOptions)
	if o == nil {
		r = &schedulerv1.ExecutionOptions{}
	}
	ac := r.GetAgentConfig()
	if ac == nil {
		ac = &commonv1.AgentConfig{}
		r.AgentConfig = ac
	}
	if r.MaxParallel == 0 {
		r.MaxParallel = defaultMaxParallel
	}
	if r.MaxRetries == nil {
		n := int32(defaultMaxRetries)
		if ac.MaxRetries != nil {
			n = ac.GetMaxRetries()
		}
		r.MaxRetries = &n
	}
	ac.MaxRetries = proto.Int32(r.GetMaxRetries())
	if r.Executor == nil {
		r.Executor = &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Command{Command: &commonv1.CommandExecutor{}}}
	}
	if r.TaskTimeout == nil {
		r.TaskTimeout = ac.GetTaskTimeout()
		if r.TaskTimeout == nil {
			r.TaskTimeout = durationpb.New(defaultTaskTimeout)
		}
	}
	ac.TaskTimeout = r.TaskTimeout
	if ac.HeartbeatInterval == nil {
		ac.HeartbeatInterval = durationpb.New(defaultHeartbeat)
	}
	if ac.ValidationTimeout == nil {
		ac.ValidationTimeout = durationpb.New(defaultValidation)
	}
	if r.MaxWallTime == nil {
		r.MaxWallTime = durationpb.New(defaultWallTime)
	}
	if r.CriticalPhases == nil {
		r.CriticalPhases = &schedulerv1.CriticalPhases{Phases: []string{defaultCriticalPhase}}
	}
	if r.MaxFailedTasks == nil {
		r.MaxFailedTasks = proto.Int32(defaultMaxFailedTasks)
	}
	if r.KnowledgeMinConfidence == nil {
		r.KnowledgeMinConfidence = proto.Float64(defaultMinConfidence)
	}
	if r.Dispatch == schedulerv1.DispatchMode_DISPATCH_MODE_UNSPECIFIED {
		r.Dispatch = defaultDispatch
	}
	r.DryRun = false
	return r
}

// executorCapability is the capability an agent announces for the executor of o.
func executorCapability(o *schedulerv1.ExecutionOptions) string {
	switch o.GetExecutor().GetKind().(type) {
	case *commonv1.ExecutorSpec_AgentCli:
		return executorCapabilityOf + "agent-cli"
	case *commonv1.ExecutorSpec_Openai:
		return executorCapabilityOf + "openai"
	default:
		return executorCapabilityOf + "command"
	}
}
