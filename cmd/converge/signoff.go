package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// signOffWait is how long `converge signoff` waits for the Scheduler to move the execution on.
const signOffWait = 30 * time.Second

// signoffCommand is `converge signoff EXECUTION CRITERION --pass|--fail --note ...`: a person's
// decision on a HUMAN_VERIFY criterion of an execution that ended CONVERGED_PENDING_HUMAN. It
// records it with the Verifier (RecordHumanVerdict, the execution's Verify Done report) and waits
// until the Scheduler has moved the execution on: CONVERGED once every pending criterion passed,
// FAILED on a FAIL. Given a gate (GATE-P1) of an execution paused at it, it is the gate's sign-off
// instead (the Scheduler's SignOffGate): PASS starts the next phase, FAIL ends the run FAILED.
func signoffCommand() *cobra.Command {
	var (
		c          clientFlags
		pass, fail bool
		note, who  string
	)
	cmd := &cobra.Command{
		Use:   "signoff <execution> <criterion|gate> --pass|--fail [--note TEXT]",
		Short: "Sign a HUMAN_VERIFY criterion or a milestone/phase gate of an execution off (PASS or FAIL) and show where the execution goes",
		Long: "converge signoff records a person's decision on a HUMAN_VERIFY done-criterion of an execution " +
			"that ended CONVERGED_PENDING_HUMAN (the Verifier's RecordHumanVerdict on the execution's report), " +
			"then waits for the Scheduler to move the execution on: once every pending criterion has a PASS " +
			"the execution's outcome is CONVERGED; a FAIL ends it FAILED. A FAIL needs --note (what is wrong). " +
			"Given a gate (GATE-P1, GATE-M1) of an execution paused at it (an execution plan's **Sign-off:** required), " +
			"it signs the gate off (the Scheduler's SignOffGate): PASS starts the next phase's waves, FAIL ends the " +
			"execution FAILED naming the gate. " +
			"Exit status: 0 when the execution CONVERGED (or goes on past the gate), 1 when it did not (or an error), 2 for a usage error.",
		Example: "  converge signoff ex_01J... U1 --pass --note 'checked the page by hand'\n" +
			"  converge signoff ex_01J... U2 --fail --note 'the export misses the header row'\n" +
			"  converge signoff ex_01J... GATE-P1 --pass --note 'phase 1 reviewed'",
		Args: exactArgs(2, "an execution id and a criterion or gate id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if pass == fail {
				return usagef("give one of --pass and --fail")
			}
			if fail && strings.TrimSpace(note) == "" {
				return usagef("--fail needs --note saying what is wrong")
			}
			if who == "" {
				who = os.Getenv("USER")
			}
			if who == "" {
				who = "converge signoff"
			}
			decision := verifierv1.HumanDecision_HUMAN_DECISION_PASS
			if fail {
				decision = verifierv1.HumanDecision_HUMAN_DECISION_FAIL
			}
			ctx := cmd.Context()
			conn, err := c.connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			return signOff(ctx, schedulerv1.NewSchedulerServiceClient(conn), verifierv1.NewVerifierServiceClient(conn),
				args[0], args[1], decision, who, note, cmd)
		},
	}
	c.bind(cmd, defaultServer, "converge server (the Scheduler and the Verifier) to ask")
	fs := cmd.Flags()
	fs.BoolVar(&pass, "pass", false, "the criterion holds")
	fs.BoolVar(&fail, "fail", false, "the criterion does not hold (give --note)")
	fs.StringVar(&note, "note", "", "why: what was checked, or what is wrong")
	fs.StringVar(&who, "who", "", "who decides (default: $USER)")
	return cmd
}

func signOff(ctx context.Context, sched schedulerv1.SchedulerServiceClient, ver verifierv1.VerifierServiceClient,
	id, criterion string, decision verifierv1.HumanDecision, who, note string, cmd *cobra.Command) error {
	got, err := sched.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
	if err != nil {
		return rpcError("execution "+id, err)
	}
	ex := got.GetExecution()
	if strings.HasPrefix(criterion, "GATE-") || (ex.GetAwaitingSignoffGate() != "" && ex.GetOutcome() != commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN) {
		return signOffGate(ctx, sched, ex, criterion, decision, who, note, cmd)
	}
	if ex.GetOutcome() != commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN {
		return usagef("execution %s is %s, outcome %s: only an execution that ended CONVERGED_PENDING_HUMAN waits for a sign-off",
			id, statusWord(ex), strings.TrimPrefix(ex.GetOutcome().String(), "OUTCOME_"))
	}
	res, err := ver.RecordHumanVerdict(ctx, &verifierv1.RecordHumanVerdictRequest{LoopKey: id, CriterionId: criterion,
		Decision: decision, Who: who, Note: note, ReportId: ex.GetVerification().GetReportId()})
	if err != nil {
		return rpcError("sign-off of "+criterion, err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "Recorded: %s %s by %s\n", criterion, strings.TrimPrefix(decision.String(), "HUMAN_DECISION_"), res.GetHumanVerdict().GetWho())
	if n := res.GetLoop().GetPendingHumanCount(); n > 0 && decision == verifierv1.HumanDecision_HUMAN_DECISION_PASS {
		fmt.Fprintf(out, "Still waiting for a person: %s\n", strings.Join(res.GetLoop().GetPendingHumanIds(), ", "))
		return exitError{code: exitFailure}
	}
	deadline := time.Now().Add(signOffWait)
	for {
		got, err := sched.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
		if err != nil {
			return rpcError("execution "+id, err)
		}
		ex = got.GetExecution()
		if ex.GetOutcome() != commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN {
			fmt.Fprintf(out, "Execution %s: %s, outcome %s — %s\n", id, statusWord(ex), strings.TrimPrefix(ex.GetOutcome().String(), "OUTCOME_"), ex.GetStatusMessage())
			if ex.GetOutcome() == commonv1.Outcome_OUTCOME_CONVERGED {
				return nil
			}
			return exitError{code: exitFailure}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sign-off is recorded, but the Scheduler has not moved execution %s on within %s (is its leader running?)", id, signOffWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// signOffGate signs gate off at the execution paused at it (SignOffGate) and says where the
// execution goes: on past the gate (exit 0) or FAILED (exit 1).
func signOffGate(ctx context.Context, sched schedulerv1.SchedulerServiceClient, ex *schedulerv1.Execution,
	gate string, decision verifierv1.HumanDecision, who, note string, cmd *cobra.Command) error {
	d := schedulerv1.GateDecision_GATE_DECISION_PASS
	if decision == verifierv1.HumanDecision_HUMAN_DECISION_FAIL {
		d = schedulerv1.GateDecision_GATE_DECISION_FAIL
	}
	res, err := sched.SignOffGate(ctx, &schedulerv1.SignOffGateRequest{ExecutionId: ex.GetId(), GateId: gate, Decision: d, Who: who, Note: note})
	if err != nil {
		return rpcError("sign-off of gate "+gate, err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "Recorded: gate %s %s by %s\n", gate, strings.TrimPrefix(d.String(), "GATE_DECISION_"), res.GetSignoff().GetWho())
	ex = res.GetExecution()
	line := fmt.Sprintf("Execution %s: %s", ex.GetId(), statusWord(ex))
	if ex.GetOutcome() != commonv1.Outcome_OUTCOME_UNSPECIFIED {
		line += ", outcome " + strings.TrimPrefix(ex.GetOutcome().String(), "OUTCOME_")
	}
	if m := ex.GetStatusMessage(); m != "" {
		line += " — " + m
	} else if !ended(ex) {
		line += fmt.Sprintf(" — past gate %s (wave %d/%d)", gate, ex.GetCurrentWave(), ex.GetWaveCount())
	}
	fmt.Fprintln(out, line)
	if ex.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED {
		return exitError{code: exitFailure}
	}
	return nil
}
