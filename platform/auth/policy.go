package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Role sets the policy table is written with. Operators may call every RPC; the other roles get
// what their callers need and nothing more.
var (
	operatorOnly = []Role{RoleOperator}
	// worker: what an agent process calls on its own behalf (the services bind the instance_id /
	// holder of these calls to the principal; see each service).
	worker = []Role{RoleOperator, RoleAgent}
	// readAll: reads of state that is not secret to anyone allowed in.
	readAll = []Role{RoleOperator, RoleAgent, RoleReadOnly}
	// readOps: reads of the Scheduler's and Agent's state (task lists, executions, logs).
	readOps = []Role{RoleOperator, RoleReadOnly}
	// verifyRun: running verifications (which run the caller's commands on the Verifier's host).
	verifyRun = []Role{RoleOperator, RoleVerifyClient}
	// verifyRead: reading verification reports and verdicts, and pure parsing.
	verifyRead = []Role{RoleOperator, RoleVerifyClient, RoleReadOnly}
	// knowledgeWrite: recording and voting on knowledge items.
	knowledgeWrite = []Role{RoleOperator, RoleAgent, RoleKnowledgeClient}
	// knowledgeRead: querying knowledge.
	knowledgeRead = []Role{RoleOperator, RoleAgent, RoleKnowledgeClient, RoleReadOnly}
)

// Policy is the one per-method policy table: every RPC of every converge service (full method
// name, as gRPC names it) → the roles that may call it. A server that authenticates refuses a
// call whose principal holds none of them with PermissionDenied (see Authorize); health and
// reflection are not in it because they stay open to everyone. TestPolicyCoversEveryRPC fails
// when a contract gains an RPC this table does not list.
//
// Service-to-service calls go through the same table: the Scheduler calls the Verifier
// (Verify: verify-client), the Registry (ListStaleAgents, GetAgent, and ReleaseLock of a stale
// agent's locks, which needs operator) and nothing else, so its principal is an operator; an
// agent process calls the Scheduler (ClaimTask…CompleteTask), the Registry (RegisterAgent,
// Heartbeat, locks) and Knowledge (QueryItems, RecordItem) with the agent role.
var Policy = map[string][]Role{
	// SchedulerService: operators run the system, read-only callers (dashboards) watch it, agents
	// claim and report their assignments.
	"/converge.scheduler.v1.SchedulerService/CreateTaskList":     operatorOnly,
	"/converge.scheduler.v1.SchedulerService/ImportTaskList":     operatorOnly,
	"/converge.scheduler.v1.SchedulerService/GetTaskList":        readOps,
	"/converge.scheduler.v1.SchedulerService/ListTaskLists":      readOps,
	"/converge.scheduler.v1.SchedulerService/DeleteTaskList":     operatorOnly,
	"/converge.scheduler.v1.SchedulerService/PlanWaves":          operatorOnly,
	"/converge.scheduler.v1.SchedulerService/StartExecution":     operatorOnly,
	"/converge.scheduler.v1.SchedulerService/GetExecution":       readOps,
	"/converge.scheduler.v1.SchedulerService/ListExecutions":     readOps,
	"/converge.scheduler.v1.SchedulerService/ListAssignments":    readOps,
	"/converge.scheduler.v1.SchedulerService/WatchExecution":     readOps,
	"/converge.scheduler.v1.SchedulerService/PauseExecution":     operatorOnly,
	"/converge.scheduler.v1.SchedulerService/ResumeExecution":    operatorOnly,
	"/converge.scheduler.v1.SchedulerService/CancelExecution":    operatorOnly,
	"/converge.scheduler.v1.SchedulerService/RetryTask":          operatorOnly,
	"/converge.scheduler.v1.SchedulerService/SkipTask":           operatorOnly,
	"/converge.scheduler.v1.SchedulerService/SignOffGate":        operatorOnly,
	"/converge.scheduler.v1.SchedulerService/GetExecutionLog":    readOps,
	"/converge.scheduler.v1.SchedulerService/GetHandoffContext":  readOps,
	"/converge.scheduler.v1.SchedulerService/GetTaskDiff":        readOps,
	"/converge.scheduler.v1.SchedulerService/ClaimTask":          worker,
	"/converge.scheduler.v1.SchedulerService/ReportProgress":     worker,
	"/converge.scheduler.v1.SchedulerService/RecordCheckpoint":   worker,
	"/converge.scheduler.v1.SchedulerService/CompleteTask":       worker,
	"/converge.scheduler.v1.SchedulerService/StartFeatureBuild":  operatorOnly,
	"/converge.scheduler.v1.SchedulerService/GetFeatureBuild":    readOps,
	"/converge.scheduler.v1.SchedulerService/ListFeatureBuilds":  readOps,
	"/converge.scheduler.v1.SchedulerService/CancelFeatureBuild": operatorOnly,

	// AgentService: a worker's control surface. RunTask runs a task on the worker's host.
	"/converge.agent.v1.AgentService/GetStatus": readOps,
	"/converge.agent.v1.AgentService/Drain":     operatorOnly,
	"/converge.agent.v1.AgentService/RunTask":   operatorOnly,

	// VerifierService: other teams reuse it with verify-client; human sign-off is operators'.
	"/converge.verifier.v1.VerifierService/ParseCriteria":      verifyRead,
	"/converge.verifier.v1.VerifierService/Verify":             verifyRun,
	"/converge.verifier.v1.VerifierService/VerifyStream":       verifyRun,
	"/converge.verifier.v1.VerifierService/GetReport":          verifyRead,
	"/converge.verifier.v1.VerifierService/ListReports":        verifyRead,
	"/converge.verifier.v1.VerifierService/AnalyzeThrashing":   verifyRead,
	"/converge.verifier.v1.VerifierService/RecordHumanVerdict": operatorOnly,
	"/converge.verifier.v1.VerifierService/ListHumanVerdicts":  verifyRead,

	// KnowledgeService: agents and other teams record and vote; only operators delete.
	"/converge.knowledge.v1.KnowledgeService/RecordItem":  knowledgeWrite,
	"/converge.knowledge.v1.KnowledgeService/QueryItems":  knowledgeRead,
	"/converge.knowledge.v1.KnowledgeService/GetItem":     knowledgeRead,
	"/converge.knowledge.v1.KnowledgeService/ListItems":   knowledgeRead,
	"/converge.knowledge.v1.KnowledgeService/ConfirmItem": knowledgeWrite,
	"/converge.knowledge.v1.KnowledgeService/RefuteItem":  knowledgeWrite,
	"/converge.knowledge.v1.KnowledgeService/DeleteItem":  operatorOnly,

	// RegistryService: agents lock, own paths, register and heartbeat as themselves.
	"/converge.registry.v1.RegistryService/AcquireLock":     worker,
	"/converge.registry.v1.RegistryService/RenewLock":       worker,
	"/converge.registry.v1.RegistryService/ReleaseLock":     worker,
	"/converge.registry.v1.RegistryService/AcquireLocks":    worker,
	"/converge.registry.v1.RegistryService/ReleaseLocks":    worker,
	"/converge.registry.v1.RegistryService/GetLock":         readAll,
	"/converge.registry.v1.RegistryService/ListLocks":       readAll,
	"/converge.registry.v1.RegistryService/SetOwner":        operatorOnly,
	"/converge.registry.v1.RegistryService/GetOwner":        readAll,
	"/converge.registry.v1.RegistryService/ReleaseOwner":    operatorOnly,
	"/converge.registry.v1.RegistryService/ListOwners":      readAll,
	"/converge.registry.v1.RegistryService/RegisterAgent":   worker,
	"/converge.registry.v1.RegistryService/Heartbeat":       worker,
	"/converge.registry.v1.RegistryService/GetAgent":        readAll,
	"/converge.registry.v1.RegistryService/ListAgents":      readAll,
	"/converge.registry.v1.RegistryService/ListStaleAgents": readAll,
}

// AllowedRoles answers the roles that may call fullMethod ("/pkg.Service/Method"). A method the
// table does not list (a service outside converge's contracts, e.g. a test's) is operators' only.
func AllowedRoles(fullMethod string) []Role {
	if roles, ok := Policy[fullMethod]; ok {
		return roles
	}
	return operatorOnly
}

// Allowed reports whether p may call fullMethod.
func Allowed(fullMethod string, p Principal) bool {
	return slices.ContainsFunc(AllowedRoles(fullMethod), p.Has)
}

// Authorize answers nil when p may call fullMethod, else an error whose text names the method,
// the principal and the roles that may call it (the server answers it as PermissionDenied).
func Authorize(fullMethod string, p Principal) error {
	if Allowed(fullMethod, p) {
		return nil
	}
	return &DeniedError{Method: fullMethod, Principal: p.Name, Allowed: AllowedRoles(fullMethod)}
}

// DeniedError is a refused call: the principal holds none of the roles the method needs.
type DeniedError struct {
	// Method is the full gRPC method name.
	Method string
	// Principal is the caller's name.
	Principal string
	// Allowed are the roles that may call Method.
	Allowed []Role
}

func (e *DeniedError) Error() string {
	names := make([]string, len(e.Allowed))
	for i, r := range e.Allowed {
		names[i] = string(r)
	}
	return fmt.Sprintf("principal %q may not call %s: it needs one of the roles %s",
		e.Principal, e.Method, strings.Join(names, ", "))
}

// ActsFor reports whether the caller of ctx may act as the identity owned by owner (the principal
// recorded when an agent instance registered, a lock was taken, an assignment was claimed):
// always when the server authenticates nobody or the owner is unknown (""), when the caller is
// that principal, and for operators (who may act for anyone, e.g. the Scheduler releasing a dead
// agent's locks).
func ActsFor(p Principal, authenticated bool, owner string) bool {
	return !authenticated || owner == "" || p.Name == owner || p.Has(RoleOperator)
}

// NotYoursError is a caller acting as an identity another principal owns: an agent instance, a
// lock holder, an assignment. Services map it to PermissionDenied.
type NotYoursError struct {
	// Principal is the caller.
	Principal string
	// What names the identity, e.g. `agent instance "agent-1"`.
	What string
	// Owner is the principal that owns it.
	Owner string
}

func (e *NotYoursError) Error() string {
	return fmt.Sprintf("principal %q may not act as %s: it belongs to principal %q (only it, or an operator, may)",
		e.Principal, e.What, e.Owner)
}

// CheckActsFor answers nil when the caller of ctx may act as what, owned by owner (see ActsFor),
// else a *NotYoursError.
func CheckActsFor(ctx context.Context, what, owner string) error {
	p, ok := FromContext(ctx)
	if ActsFor(p, ok, owner) {
		return nil
	}
	return &NotYoursError{Principal: p.Name, What: what, Owner: owner}
}

// Name answers the name of the caller of ctx, "" when the server authenticates nobody: what a
// service records as the owner of what the caller creates.
func Name(ctx context.Context) string {
	p, _ := FromContext(ctx)
	return p.Name
}
