package registry

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/services/registry/hot"
	"github.com/converge-dev/converge/services/registry/store"
)

// Conversions between the contract's messages and the store's and hot state's types.

// timestamp answers t as a Timestamp, nil for the zero time.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func lockProto(l hot.Lock) *registryv1.Lock {
	return &registryv1.Lock{
		Resource:    l.Resource,
		Holder:      l.Holder,
		Token:       l.Token,
		AcquireTime: timestamp(l.AcquiredAt),
		ExpireTime:  timestamp(l.ExpiresAt),
	}
}

func ownershipProto(o store.Ownership) *registryv1.Ownership {
	return &registryv1.Ownership{
		Pattern:    o.Pattern,
		Owner:      o.Owner,
		CreateTime: timestamp(o.CreatedAt),
		UpdateTime: timestamp(o.UpdatedAt),
	}
}

var statusToProto = map[store.AgentStatus]commonv1.AgentStatus{
	store.AgentInitializing: commonv1.AgentStatus_AGENT_STATUS_INITIALIZING,
	store.AgentRunning:      commonv1.AgentStatus_AGENT_STATUS_RUNNING,
	store.AgentIdle:         commonv1.AgentStatus_AGENT_STATUS_IDLE,
	store.AgentCompleted:    commonv1.AgentStatus_AGENT_STATUS_COMPLETED,
	store.AgentFailed:       commonv1.AgentStatus_AGENT_STATUS_FAILED,
	store.AgentStuck:        commonv1.AgentStatus_AGENT_STATUS_STUCK,
	store.AgentStale:        commonv1.AgentStatus_AGENT_STATUS_STALE,
	store.AgentGone:         commonv1.AgentStatus_AGENT_STATUS_GONE,
}

var statusFromProto = func() map[commonv1.AgentStatus]store.AgentStatus {
	m := make(map[commonv1.AgentStatus]store.AgentStatus, len(statusToProto))
	for s, p := range statusToProto {
		m[p] = s
	}
	return m
}()

// configFromProto answers the agent configuration of a registration, defaults filled in.
func configFromProto(c *commonv1.AgentConfig) store.AgentConfig {
	out := store.AgentConfig{MaxRetries: store.DefaultMaxRetries}
	if c != nil && c.MaxRetries != nil {
		out.MaxRetries = c.GetMaxRetries()
	}
	if c.GetHeartbeatInterval() != nil {
		out.HeartbeatInterval = c.GetHeartbeatInterval().AsDuration()
	}
	if c.GetTaskTimeout() != nil {
		out.TaskTimeout = c.GetTaskTimeout().AsDuration()
	}
	if c.GetValidationTimeout() != nil {
		out.ValidationTimeout = c.GetValidationTimeout().AsDuration()
	}
	return out.WithDefaults()
}

func configProto(c store.AgentConfig) *commonv1.AgentConfig {
	retries := c.MaxRetries
	return &commonv1.AgentConfig{
		MaxRetries:        &retries,
		HeartbeatInterval: durationpb.New(c.HeartbeatInterval),
		TaskTimeout:       durationpb.New(c.TaskTimeout),
		ValidationTimeout: durationpb.New(c.ValidationTimeout),
	}
}

func errorContextFromProto(e *commonv1.ErrorContext) *store.ErrorContext {
	if e == nil {
		return nil
	}
	out := &store.ErrorContext{Code: e.GetCode(), Message: e.GetMessage(), TaskID: e.GetTaskId(), StackTrace: e.GetStackTrace()}
	if e.GetTimestamp() != nil {
		out.Timestamp = e.GetTimestamp().AsTime()
	}
	return out
}

func errorContextProto(e *store.ErrorContext) *commonv1.ErrorContext {
	if e == nil {
		return nil
	}
	return &commonv1.ErrorContext{Code: e.Code, Message: e.Message, TaskId: e.TaskID, StackTrace: e.StackTrace, Timestamp: timestamp(e.Timestamp)}
}

func agentProto(a store.Agent) *registryv1.AgentInstance {
	var reported commonv1.AgentStatus
	if a.Status != a.ReportedStatus {
		reported = statusToProto[a.ReportedStatus] // derived STALE or GONE
	}
	return &registryv1.AgentInstance{
		InstanceId:        a.InstanceID,
		ExecutionId:       a.ExecutionID,
		AgentType:         a.AgentType,
		CurrentTaskId:     a.CurrentTaskID,
		WaveNumber:        a.WaveNumber,
		Status:            statusToProto[a.Status],
		SpawnTime:         timestamp(a.SpawnedAt),
		CompleteTime:      timestamp(a.CompletedAt),
		LastHeartbeatTime: timestamp(a.LastHeartbeat),
		Config:            configProto(a.Config),
		ErrorContext:      errorContextProto(a.ErrorContext),
		ProgressPercent:   a.ProgressPercent,
		MemoryUsageMb:     a.MemoryUsageMB,
		CpuPercent:        a.CPUPercent,
		Host:              a.Host,
		SessionId:         a.SessionID,
		ReportedStatus:    reported,
		Principal:         a.Principal,
	}
}
