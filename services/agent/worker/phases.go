package worker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Phases of a TASK assignment, in order, as converge_agent_task_phase_seconds names them: where
// one task's wall time goes in the agent (issue 17). A phase a task does not reach is not
// observed.
const (
	// phaseClaimHeartbeat: waiting, before the executor runs, for the Registry to be told the
	// agent is RUNNING the task (sent at the claim, concurrently with prime and workspace).
	phaseClaimHeartbeat = "claim_heartbeat"
	// phasePrime: ownership (GetOwner), the file locks (AcquireLocks) and, for an executor that
	// reads a prompt, the Knowledge gotchas, concurrently.
	phasePrime = "prime"
	// phaseWorkspace: the worktree or scratch directory, the checkpoint, the executor and the
	// project's files.
	phaseWorkspace = "workspace"
	// phaseExecute: the executor's run (the task's command; for a command, fork+exec to exit).
	phaseExecute = "execute"
	// phaseValidate: the task's validation command and the project's levels.
	phaseValidate = "validate"
	// phaseFinish: the fence check, the commit and push of the task's files, discoveries.
	phaseFinish = "finish"
	// phaseCleanup: removing the worktree and releasing the file locks (ReleaseLocks).
	phaseCleanup = "cleanup"
	// phaseComplete: the CompleteTask round trip (with the next assignment when fused).
	phaseComplete = "complete"
)

// phaseSeconds is the histogram of the phases, registered by Config.Metrics, with each phase's
// series looked up once (WithLabelValues hashes the label per call: 3 % of a no-op task's CPU).
type phaseSeconds struct {
	h   *prometheus.HistogramVec
	obs map[string]prometheus.Observer
}

func newPhaseSeconds(reg prometheus.Registerer) (*phaseSeconds, error) {
	if reg == nil {
		return &phaseSeconds{}, nil
	}
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "converge_agent_task_phase_seconds",
		Help:    "Wall time of each phase of a task assignment in the agent: claim_heartbeat (waiting for the Registry to learn the claim), prime (ownership, locks, gotchas), workspace, execute, validate, finish (fence, commit, push), cleanup (worktree, lock release), complete (CompleteTask).",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"phase"})
	if err := reg.Register(h); err != nil {
		return nil, err
	}
	p := &phaseSeconds{h: h, obs: map[string]prometheus.Observer{}}
	for _, phase := range []string{phaseClaimHeartbeat, phasePrime, phaseWorkspace, phaseExecute, phaseValidate, phaseFinish, phaseCleanup, phaseComplete} {
		p.obs[phase] = h.WithLabelValues(phase)
	}
	return p, nil
}

func (p *phaseSeconds) observe(phase string, d time.Duration) {
	if p == nil || p.h == nil {
		return
	}
	o := p.obs[phase]
	if o == nil {
		o = p.h.WithLabelValues(phase)
	}
	o.Observe(d.Seconds())
}

// phaseClock times consecutive phases of one assignment: each mark observes the time since the
// previous mark under the phase just ended.
type phaseClock struct {
	p    *phaseSeconds
	last time.Time
}

func (w *Worker) phaseClock() *phaseClock { return &phaseClock{p: w.phases, last: time.Now()} }

// mark ends phase now.
func (c *phaseClock) mark(phase string) {
	if c == nil {
		return
	}
	now := time.Now()
	c.p.observe(phase, now.Sub(c.last))
	c.last = now
}
