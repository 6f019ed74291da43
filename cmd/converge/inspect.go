package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// `converge watch`, `converge status` and `converge logs`: looking at executions of a running
// deployment (`converge dev` or the services).

func watchCommand() *cobra.Command {
	var (
		c        clientFlags
		afterSeq int64
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "watch <execution|fb_id>",
		Short: "Follow an execution's progress until it ends; exit 0 only when it CONVERGED",
		Long: "converge watch shows an execution the way converge run does: its log from the start (or after " +
			"--after-seq), then live until it ends, then the summary. A dropped stream is resumed from the last " +
			"entry seen. Ctrl-C stops watching; the execution goes on.\n\n" +
			"Exit status: 0 when the execution CONVERGED, 1 when it did not (or an error), 2 for a usage error, " +
			"130 when interrupted.",
		Args: exactArgs(1, "one execution id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if afterSeq < 0 {
				return usagef("--after-seq %d: want 0 or more", afterSeq)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			conn, err := c.connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			client := schedulerv1.NewSchedulerServiceClient(conn)
			out := cmd.OutOrStdout()
			progressOut := out
			if asJSON {
				progressOut = cmd.ErrOrStderr()
			}
			if strings.HasPrefix(args[0], "fb_") { // a feature build: follow it across its executions
				fb, err := followBuild(ctx, conn, args[0], progressOut)
				if err != nil {
					return err
				}
				return buildExit(fb, false)
			}
			_, err = follow(ctx, client, args[0], followOptions{out: progressOut, live: !asJSON && isTerminalWriter(out), afterSeq: afterSeq})
			if ctx.Err() != nil {
				return exitError{code: exitInterrupted}
			}
			if err != nil {
				return err
			}
			sum, err := gatherSummary(ctx, client, args[0], 0, followUp{server: c.Server, rerun: "converge run <tasks file> --server " + c.Server})
			if err != nil {
				return err
			}
			if asJSON {
				if err := sum.writeJSON(out); err != nil {
					return err
				}
			} else {
				sum.render(out)
			}
			if !sum.converged() {
				return exitError{code: exitFailure}
			}
			return nil
		},
	}
	c.bind(cmd, defaultServer, "converge server (the Scheduler) to ask")
	cmd.Flags().Int64Var(&afterSeq, "after-seq", 0, "continue after this log entry (a cursor) instead of replaying the log from its start")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the summary as JSON on stdout; progress goes to stderr")
	return cmd
}

func statusCommand() *cobra.Command {
	var (
		c      clientFlags
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status [execution]",
		Short: "Show one execution (waves, running tasks, verdict, the tracking table of its tasks), or a table of recent executions",
		Args:  maxArgs(1, "one execution id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 1000 {
				return usagef("--limit %d: want 1 to 1000", limit)
			}
			ctx := cmd.Context()
			conn, err := c.connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			client := schedulerv1.NewSchedulerServiceClient(conn)
			if len(args) == 1 {
				return showExecution(ctx, client, args[0], cmd.OutOrStdout(), asJSON, time.Now())
			}
			return listExecutions(ctx, client, limit, cmd.OutOrStdout(), asJSON, time.Now())
		},
	}
	c.bind(cmd, defaultServer, "converge server (the Scheduler) to ask")
	cmd.Flags().IntVar(&limit, "limit", 20, "how many recent executions the table shows")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's answer as JSON")
	return cmd
}

// showExecution prints one execution.
func showExecution(ctx context.Context, client schedulerv1.SchedulerServiceClient, id string, w io.Writer, asJSON bool, now time.Time) error {
	got, err := client.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
	if err != nil {
		return rpcError("execution "+id, err)
	}
	if asJSON {
		return writeProtoJSON(w, got)
	}
	ex := got.GetExecution()
	name := ex.GetTaskListId()
	if list, err := client.GetTaskList(ctx, &schedulerv1.GetTaskListRequest{TaskListId: ex.GetTaskListId(), View: schedulerv1.TaskListView_TASK_LIST_VIEW_BASIC}); err == nil {
		name = fmt.Sprintf("%q (%s)", list.GetTaskList().GetSpec().GetName(), ex.GetTaskListId())
	}
	var running []*schedulerv1.Assignment
	if !ended(ex) {
		res, err := client.ListAssignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: id, PageSize: 1000,
			Statuses: []schedulerv1.AssignmentStatus{schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING}})
		if err != nil {
			return rpcError("assignments of "+id, err)
		}
		running = res.GetAssignments()
	}
	renderExecution(w, ex, got.GetWaves(), name, running, now)
	// The tracking table: every task of the list with its state (as write-back marks tasks.md).
	states, err := readStates(ctx, client, ex)
	if err != nil {
		return err
	}
	renderTaskStates(w, states)
	return nil
}

// renderExecution prints an execution for `converge status <execution>`.
func renderExecution(w io.Writer, ex *schedulerv1.Execution, waves []*schedulerv1.Wave, listName string, running []*schedulerv1.Assignment, now time.Time) {
	fmt.Fprintf(w, "Execution %s — run %d of %s\n", ex.GetId(), ex.GetRunNumber(), listName)
	state := strings.TrimPrefix(ex.GetStatus().String(), "EXECUTION_STATUS_")
	if !ended(ex) && ex.GetWaveCount() > 0 {
		state += fmt.Sprintf(" (wave %d/%d)", ex.GetCurrentWave(), ex.GetWaveCount())
	}
	fmt.Fprintf(w, "Status:     %s\n", state)
	if ex.GetOutcome() != commonv1.Outcome_OUTCOME_UNSPECIFIED {
		fmt.Fprintf(w, "Outcome:    %s\n", strings.TrimPrefix(ex.GetOutcome().String(), "OUTCOME_"))
	}
	if m := ex.GetStatusMessage(); m != "" {
		fmt.Fprintf(w, "Message:    %s\n", firstLine(m))
	}
	if g := ex.GetAwaitingSignoffGate(); g != "" {
		fmt.Fprintf(w, "Awaiting:   the sign-off of gate %s (converge signoff %s %s --pass|--fail)\n", g, ex.GetId(), g)
	}
	for _, so := range ex.GetGateSignoffs() {
		line := fmt.Sprintf("Sign-off:   gate %s %s by %s", so.GetGateId(), strings.TrimPrefix(so.GetDecision().String(), "GATE_DECISION_"), so.GetWho())
		if n := firstLine(so.GetNote()); n != "" {
			line += ": " + n
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "Tasks:      %d/%d completed | %d skipped | %d failed | %d running\n", ex.GetCompletedTasks(), ex.GetTotalTasks(),
		ex.GetSkippedTasks(), ex.GetFailedTasks(), ex.GetRunningTasks())
	if v := ex.GetVerification(); v != nil {
		s := &runSummary{ex: ex}
		fmt.Fprintf(w, "Verdict:    %s\n", s.verdict())
	}
	if st := ex.GetStartTime(); st != nil {
		line := fmt.Sprintf("Started:    %s (%s ago)", st.AsTime().Local().Format(time.DateTime), formatDuration(now.Sub(st.AsTime())))
		if en := ex.GetEndTime(); en != nil {
			line += fmt.Sprintf(", ended after %s", formatDuration(en.AsTime().Sub(st.AsTime())))
		}
		fmt.Fprintln(w, line)
	}
	if repo := ex.GetRepository(); repo != nil {
		fmt.Fprintf(w, "Repository: %s at %s, run branch %s\n", repoSource(repo), short(ex.GetBaseCommit()), ex.GetRunBranch())
	}
	if ex.GetEscalatedTaskId() != "" || ex.GetEscalatedInstanceId() != "" {
		fmt.Fprintf(w, "Escalated:  task %s, agent %s (GetHandoffContext has the handoff)\n", ex.GetEscalatedTaskId(), ex.GetEscalatedInstanceId())
	}
	if len(waves) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "WAVE\tSTATUS\tTASKS\tDONE\tFAILED\tSKIPPED\tINTEGRATION")
		for _, wv := range waves {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%s\n", wv.GetWaveNumber(), strings.TrimPrefix(wv.GetStatus().String(), "WAVE_STATUS_"),
				wv.GetTaskCount(), wv.GetCompletedCount(), wv.GetFailedCount(), wv.GetSkippedCount(), short(wv.GetIntegrationCommit()))
		}
		_ = tw.Flush()
	}
	if len(running) > 0 {
		fmt.Fprintf(w, "\nRunning:\n")
		for _, a := range running {
			what := "Task " + a.GetTaskId()
			if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION {
				what = fmt.Sprintf("Wave %d integration", a.GetWaveNumber())
			}
			line := fmt.Sprintf("  🔄 %s on %s (attempt %d, %s)", what, a.GetInstanceId(), a.GetAttempt(), formatDuration(now.Sub(a.GetAssignTime().AsTime())))
			if m := a.GetProgressMessage(); m != "" {
				line += " · " + firstLine(m)
			}
			fmt.Fprintln(w, line)
		}
	}
}

// listExecutions prints the recent executions as a table.
func listExecutions(ctx context.Context, client schedulerv1.SchedulerServiceClient, limit int, w io.Writer, asJSON bool, now time.Time) error {
	res, err := client.ListExecutions(ctx, &schedulerv1.ListExecutionsRequest{PageSize: int32(limit)})
	if err != nil {
		return rpcError("list executions", err)
	}
	if asJSON {
		return writeProtoJSON(w, res)
	}
	if len(res.GetExecutions()) == 0 {
		fmt.Fprintln(w, "No executions yet: start one with converge run <tasks file>")
		return nil
	}
	names := map[string]string{}
	for _, ex := range res.GetExecutions() {
		id := ex.GetTaskListId()
		if _, ok := names[id]; ok {
			continue
		}
		names[id] = id
		if l, err := client.GetTaskList(ctx, &schedulerv1.GetTaskListRequest{TaskListId: id, View: schedulerv1.TaskListView_TASK_LIST_VIEW_BASIC}); err == nil {
			names[id] = l.GetTaskList().GetSpec().GetName()
		}
	}
	renderExecutions(w, res.GetExecutions(), names, now)
	return nil
}

// renderExecutions is the table of `converge status`.
func renderExecutions(w io.Writer, exs []*schedulerv1.Execution, names map[string]string, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EXECUTION\tLIST\tRUN\tSTATUS\tOUTCOME\tTASKS\tWAVE\tCREATED")
	for _, ex := range exs {
		outcome := "-"
		if ex.GetOutcome() != commonv1.Outcome_OUTCOME_UNSPECIFIED {
			outcome = strings.TrimPrefix(ex.GetOutcome().String(), "OUTCOME_")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d/%d\t%d/%d\t%s ago\n", ex.GetId(), truncateRunes(names[ex.GetTaskListId()], 32), ex.GetRunNumber(),
			strings.TrimPrefix(ex.GetStatus().String(), "EXECUTION_STATUS_"), outcome, ex.GetCompletedTasks(), ex.GetTotalTasks(),
			ex.GetCurrentWave(), ex.GetWaveCount(), formatDuration(now.Sub(ex.GetCreateTime().AsTime())))
	}
	_ = tw.Flush()
}

func logsCommand() *cobra.Command {
	var (
		c      clientFlags
		task   string
		types  []string
		tail   int
		follow bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "logs <execution>",
		Short: "Print an execution's log, filtered by task and event type; --follow streams new entries",
		Long: "converge logs prints an execution's log in order, one entry a line: seq, time, event type, task, " +
			"agent and message. --type takes event types as the API names them, with or without the " +
			"EVENT_TYPE_ prefix, in any case (task_failed, VERDICT), repeated or comma-separated.",
		Example: "  converge logs ex_01J... --type task_failed,integration_failed,verdict\n" +
			"  converge logs ex_01J... --task 1.3 --tail 20",
		Args: exactArgs(1, "one execution id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			eventTypes, err := parseEventTypes(types)
			if err != nil {
				return err
			}
			if tail < 0 || tail > 500 {
				return usagef("--tail %d: want 1 to 500 (0 = the whole log)", tail)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			conn, err := c.connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			err = printLogs(ctx, schedulerv1.NewSchedulerServiceClient(conn), args[0], logQuery{task: task, types: eventTypes, tail: tail, follow: follow, json: asJSON}, cmd.OutOrStdout())
			if ctx.Err() != nil {
				return exitError{code: exitInterrupted}
			}
			return err
		},
	}
	c.bind(cmd, defaultServer, "converge server (the Scheduler) to ask")
	fs := cmd.Flags()
	fs.StringVar(&task, "task", "", "only this task's entries")
	fs.StringSliceVar(&types, "type", nil, "only these event types, repeatable or comma-separated (e.g. task_failed,verdict)")
	fs.IntVar(&tail, "tail", 0, "only the last N matching entries (at most 500)")
	fs.BoolVarP(&follow, "follow", "f", false, "then stream new entries until the execution ends")
	fs.BoolVar(&asJSON, "json", false, "one JSON log entry a line")
	return cmd
}

// logQuery is what `converge logs` asks.
type logQuery struct {
	task   string
	types  []commonv1.EventType
	tail   int
	follow bool
	json   bool
}

// printLogs prints the log entries q selects.
func printLogs(ctx context.Context, client schedulerv1.SchedulerServiceClient, id string, q logQuery, w io.Writer) error {
	var after int64
	for {
		req := &schedulerv1.GetExecutionLogRequest{ExecutionId: id, TaskId: q.task, EventTypes: q.types, AfterSeq: after, Limit: 500}
		if q.tail > 0 {
			req.Limit, req.Tail = int32(q.tail), true
		}
		res, err := client.GetExecutionLog(ctx, req)
		if err != nil {
			return rpcError("log of "+id, err)
		}
		for _, en := range res.GetEntries() {
			if err := printEntry(w, en, q.json); err != nil {
				return err
			}
			after = en.GetSeq()
		}
		if q.tail > 0 || !res.GetHasMore() {
			after = max(after, res.GetLastSeq())
			break
		}
	}
	if !q.follow {
		return nil
	}
	s, err := client.WatchExecution(ctx, &schedulerv1.WatchExecutionRequest{ExecutionId: id, AfterSeq: after, TaskId: q.task, EventTypes: q.types,
		MaxEntriesPerMessage: followBatch})
	if err != nil {
		return rpcError("follow "+id, err)
	}
	for {
		msg, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return rpcError("follow "+id, err)
		}
		for _, en := range msg.GetEntries() {
			if err := printEntry(w, en, q.json); err != nil {
				return err
			}
		}
	}
}

// followBatch is how many log entries a followed log takes per message: a burst arrives in a
// few messages instead of one per entry.
const followBatch = 100

// printEntry prints one log entry: "#12  15:04:05  TASK_COMPLETED  1.1  agent-1  message".
func printEntry(w io.Writer, en *commonv1.LogEntry, asJSON bool) error {
	if asJSON {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(en)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintln(w, formatEntry(en))
	return err
}

// formatEntry is one log entry on one line.
func formatEntry(en *commonv1.LogEntry) string {
	task := en.GetTaskId()
	if task == "" {
		task = "-"
	}
	inst := en.GetInstanceId()
	if inst == "" {
		inst = "-"
	}
	msg := strings.ReplaceAll(strings.TrimSpace(en.GetMessage()), "\n", " ⏎ ")
	return fmt.Sprintf("#%-4d %s  %-22s %-6s %-14s %s", en.GetSeq(), en.GetTime().AsTime().Local().Format("2006-01-02 15:04:05"),
		strings.TrimPrefix(en.GetEventType().String(), "EVENT_TYPE_"), task, inst, msg)
}

// parseEventTypes reads --type values.
func parseEventTypes(in []string) ([]commonv1.EventType, error) {
	var out []commonv1.EventType
	seen := map[commonv1.EventType]bool{}
	for _, s := range in {
		name := strings.ToUpper(strings.TrimSpace(s))
		if name == "" {
			continue
		}
		if !strings.HasPrefix(name, "EVENT_TYPE_") {
			name = "EVENT_TYPE_" + name
		}
		v, ok := commonv1.EventType_value[name]
		if !ok || v == 0 {
			return nil, usagef("--type %q: not an event type; want one of %s", s, strings.Join(eventTypeNames(), ", "))
		}
		if t := commonv1.EventType(v); !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out, nil
}

func eventTypeNames() []string {
	var names []string
	for v, n := range commonv1.EventType_name {
		if v != 0 {
			names = append(names, strings.ToLower(strings.TrimPrefix(n, "EVENT_TYPE_")))
		}
	}
	sort.Strings(names)
	return names
}

// writeProtoJSON prints an API answer as indented JSON.
func writeProtoJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
