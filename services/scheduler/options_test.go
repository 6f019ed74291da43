package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// defaultOptions is what an execution started without options runs with: every option the
// Scheduler or an agent reads, resolved.
func defaultOptions() *schedulerv1.ExecutionOptions {
	return &schedulerv1.ExecutionOptions{
		MaxParallel: 4,
		MaxRetries:  proto.Int32(3),
		Executor:    &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Command{Command: &commonv1.CommandExecutor{}}},
		AgentConfig: &commonv1.AgentConfig{
			MaxRetries:        proto.Int32(3),
			HeartbeatInterval: durationpb.New(30 * time.Second),
			TaskTimeout:       durationpb.New(300 * time.Second),
			ValidationTimeout: durationpb.New(120 * time.Second),
		},
		TaskTimeout:            durationpb.New(300 * time.Second),
		MaxWallTime:            durationpb.New(24 * time.Hour),
		CriticalPhases:         &schedulerv1.CriticalPhases{Phases: []string{"database"}},
		MaxFailedTasks:         proto.Int32(3),
		KnowledgeMinConfidence: proto.Float64(0.6),
		Dispatch:               schedulerv1.DispatchMode_DISPATCH_MODE_EAGER,
	}
}

func TestResolvedFillsEveryDefaultOnce(t *testing.T) {
	t.Parallel()
	opts := func(edit func(o *schedulerv1.ExecutionOptions)) *schedulerv1.ExecutionOptions {
		o := defaultOptions()
		edit(o)
		return o
	}
	for _, c := range []struct {
		name    string
		in, out *schedulerv1.ExecutionOptions
	}{
		{"nil", nil, defaultOptions()},
		{"empty", &schedulerv1.ExecutionOptions{}, defaultOptions()},
		{"dry run is not kept", &schedulerv1.ExecutionOptions{DryRun: true}, defaultOptions()},
		{"agent config retries and task timeout apply where the options leave them unset",
			&schedulerv1.ExecutionOptions{AgentConfig: &commonv1.AgentConfig{MaxRetries: proto.Int32(0), TaskTimeout: durationpb.New(time.Minute)}},
			opts(func(o *schedulerv1.ExecutionOptions) {
				o.MaxRetries, o.AgentConfig.MaxRetries = proto.Int32(0), proto.Int32(0)
				o.TaskTimeout, o.AgentConfig.TaskTimeout = durationpb.New(time.Minute), durationpb.New(time.Minute)
			})},
		{"the options' retries and task timeout override the agent config's",
			&schedulerv1.ExecutionOptions{MaxRetries: proto.Int32(5), TaskTimeout: durationpb.New(2 * time.Minute),
				AgentConfig: &commonv1.AgentConfig{MaxRetries: proto.Int32(1), TaskTimeout: durationpb.New(time.Minute)}},
			opts(func(o *schedulerv1.ExecutionOptions) {
				o.MaxRetries, o.AgentConfig.MaxRetries = proto.Int32(5), proto.Int32(5)
				o.TaskTimeout, o.AgentConfig.TaskTimeout = durationpb.New(2*time.Minute), durationpb.New(2*time.Minute)
			})},
		{"set values stay", &schedulerv1.ExecutionOptions{MaxParallel: 2, MaxFailedTasks: proto.Int32(0),
			CriticalPhases: &schedulerv1.CriticalPhases{}, KnowledgeMinConfidence: proto.Float64(0), Dispatch: schedulerv1.DispatchMode_DISPATCH_MODE_STRICT_WAVES,
			AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(time.Second), ValidationTimeout: durationpb.New(time.Second)}},
			opts(func(o *schedulerv1.ExecutionOptions) {
				o.MaxParallel, o.MaxFailedTasks, o.CriticalPhases, o.KnowledgeMinConfidence = 2, proto.Int32(0), &schedulerv1.CriticalPhases{}, proto.Float64(0)
				o.Dispatch = schedulerv1.DispatchMode_DISPATCH_MODE_STRICT_WAVES
				o.AgentConfig.HeartbeatInterval, o.AgentConfig.ValidationTimeout = durationpb.New(time.Second), durationpb.New(time.Second)
			})},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := resolved(c.in)
			require.Empty(t, cmpDiff(c.out, got))
			require.Empty(t, cmpDiff(got, resolved(got)), "resolving resolved options changes nothing")
		})
	}
}

// The agent works from the ClaimedAssignment alone: its options are the execution's, stored
// resolved when it was created (GetExecution shows the same), and its heartbeat interval and
// lease duration follow from them.
func TestClaimedAssignmentCarriesTheResolvedOptions(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		e := b.start(t, b.createList(t, oneTask("options")), nil)
		require.Empty(t, cmpDiff(defaultOptions(), e.GetOptions()))
		stored, _ := b.execution(t, e.GetId())
		require.Empty(t, cmpDiff(defaultOptions(), stored.GetOptions()))
		c := b.claim(t, "agent-1", 5*time.Second)
		require.NotNil(t, c)
		require.Empty(t, cmpDiff(defaultOptions(), c.GetOptions()))
		require.Equal(t, 30*time.Second, c.GetHeartbeatInterval().AsDuration())
		require.Equal(t, 90*time.Second, c.GetLeaseDuration().AsDuration())
	})
}

func cmpDiff(want, got proto.Message) string {
	if proto.Equal(want, got) {
		return ""
	}
	return "want:\n" + prototext.Format(want) + "\ngot:\n" + prototext.Format(got)
}
