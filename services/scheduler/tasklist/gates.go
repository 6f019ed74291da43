package tasklist

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
)

// Milestone and phase gates (seed 004, 07-build: "Run the gate check at milestone and phase
// boundaries"). In an execution plan, a field line under a phase or a milestone heading
//
//	## Phase 1: Foundation
//	**Gate:** `go test ./...`
//
// gives that phase (or milestone) a gate: a task with id GATE-P<n> (phase n) or GATE-<milestone>
// (GATE-M1), action RUN and the gate's command, that depends on every task of its phase or
// milestone, and on which every task defined after them depends. So the next phase's waves start
// only once the gate passed; the gate declares no files, so it runs alone in its wave on the
// integrated work of everything before it. The Scheduler ends the run FAILED, naming the gate, when
// a gate task fails (IsGate).
//
// A gate may also need a person's sign-off (seed 004: the phase gate check, recorded in the Phase
// Gate Log with its date, result and notes). A field line in the same phase or milestone
//
//	**Sign-off:** required
//
// sets the gate task's requires_signoff: once its command passed, the run pauses until someone
// signs the gate off (SignOffGate, `converge signoff EXECUTION GATE-P1 --pass|--fail`). "required",
// "yes" and "true" ask for it; "no", "false", "not required" and "none" do not (the default).

// GatePrefix starts the id of every gate task.
const GatePrefix = "GATE-"

// IsGate reports whether a task is a milestone or phase gate.
func IsGate(t *commonv1.Task) bool {
	return strings.HasPrefix(t.GetId(), GatePrefix) && t.GetAction() == commonv1.TaskAction_TASK_ACTION_RUN
}

// planGate is a gate line of an execution plan.
type planGate struct {
	line             int
	phase, milestone string
	phaseNumber      int
	command          string
	signoff          bool
}

// planSignoff is a sign-off line of an execution plan: it applies to the gate of its phase (and
// milestone).
type planSignoff struct {
	line        int
	milestone   string
	phaseNumber int
	required    bool
}

// gateIDPart keeps the characters of a task id.
var gateIDPart = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// gateOf reads a "**Gate:** value" line; "" when l is not one.
func gateOf(text string) (string, bool) {
	m := fieldLine.FindStringSubmatch(text)
	if m == nil || !strings.EqualFold(strings.TrimSpace(m[1]), "gate") {
		return "", false
	}
	if spans := codeSpans(m[2]); len(spans) > 0 {
		return spans[0], true
	}
	return strings.TrimSpace(m[2]), true
}

// signoffOf reads a "**Sign-off:** value" line (also "Signoff", "Sign off", "Gate sign-off"):
// whether it is one, whether it asks for a sign-off, and a message when its value is neither.
func signoffOf(text string) (isLine, required bool, msg string) {
	m := fieldLine.FindStringSubmatch(text)
	if m == nil {
		return false, false, ""
	}
	label := strings.NewReplacer(" ", "", "-", "", "_", "").Replace(strings.ToLower(strings.TrimSpace(m[1])))
	if label != "signoff" && label != "gatesignoff" {
		return false, false, ""
	}
	v := strings.ToLower(strings.TrimSpace(stripMarkup(m[2])))
	switch v {
	case "required", "yes", "true", "human", "person":
		return true, true, ""
	case "no", "false", "not required", "optional":
		return true, false, ""
	}
	if isNone(v) {
		return true, false, ""
	}
	return true, false, fmt.Sprintf("sign-off %q: want required (a person signs the gate off) or no", truncate(m[2], 64))
}

// applySignoffs marks the gates the sign-off lines ask for; a sign-off line whose phase (and
// milestone) has no gate is an error.
func applySignoffs(gates []planGate, signoffs []planSignoff) error {
	for _, so := range signoffs {
		i := slices.IndexFunc(gates, func(g planGate) bool {
			return g.phaseNumber == so.phaseNumber && g.milestone == so.milestone
		})
		if i < 0 {
			return errorf(so.line, "sign-off without a gate: add a **Gate:** `command` line to the same phase or milestone")
		}
		gates[i].signoff = so.required
	}
	return nil
}

// addGates makes the gate tasks of gates: each goes after the last task of its phase or milestone
// (defs and lines are the tasks in document order, rows their rows).
func addGates(tasks []*commonv1.Task, lines []int, rows []planRow, gates []planGate, warnings *[]Warning) ([]*commonv1.Task, []int, error) {
	for _, g := range gates {
		if g.command == "" {
			return nil, nil, errorf(g.line, "gate without a command: want **Gate:** `command`")
		}
		id, scope := fmt.Sprintf("%sP%d", GatePrefix, g.phaseNumber), "Phase "+fmt.Sprint(g.phaseNumber)
		if g.phase != "" && g.phase != scope {
			scope += ": " + g.phase
		}
		if g.milestone != "" {
			key, _, _ := strings.Cut(g.milestone, ":")
			id, scope = GatePrefix+gateIDPart.ReplaceAllString(strings.TrimSpace(key), "-"), "milestone "+g.milestone
		}
		var members []string
		last := -1
		for i, r := range rows {
			if r.phaseNumber == g.phaseNumber && (g.milestone == "" || r.milestone == g.milestone) {
				members = append(members, tasks[i].GetId())
				last = i
			}
		}
		if last < 0 {
			*warnings = append(*warnings, Warning{Line: g.line, Message: fmt.Sprintf("gate of %s has no task before it: ignored", scope)})
			continue
		}
		if !taskIDPattern.MatchString(id) || slices.ContainsFunc(tasks, func(t *commonv1.Task) bool { return t.GetId() == id }) {
			return nil, nil, errorf(g.line, "gate of %s: its task id %q is not a free task id", scope, id)
		}
		gate := &commonv1.Task{Id: id, Title: "Gate of " + scope, Phase: tasks[last].GetPhase(), Action: commonv1.TaskAction_TASK_ACTION_RUN,
			Command: g.command, DependsOn: members, Status: commonv1.TaskStatus_TASK_STATUS_PENDING, RequiresSignoff: g.signoff,
			Description: fmt.Sprintf("The gate check of %s (seed 07-build): the next tasks start only once it passes; a failed gate stops the run.", scope)}
		if g.signoff {
			gate.Description += " Once its command passes, a person signs it off (converge signoff EXECUTION " + id + " --pass|--fail) before the next tasks start."
		}
		for i := last + 1; i < len(tasks); i++ {
			if !slices.Contains(members, tasks[i].GetId()) {
				tasks[i].DependsOn = append([]string{id}, tasks[i].DependsOn...)
			}
		}
		tasks = slices.Insert(tasks, last+1, gate)
		lines = slices.Insert(lines, last+1, g.line)
		rows = slices.Insert(rows, last+1, planRow{line: g.line, phase: g.phase, phaseNumber: -1})
	}
	return tasks, lines, nil
}
