package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// buildOptions configure `converge build`.
type buildOptions struct {
	run               runOptions
	Feature           string
	MaxIterations     int
	Autonomy          string
	DryRun            bool
	SkipVerify        bool
	Resume            bool
	AllowPendingHuman bool
	// AgentCLI is the coding-agent command line every task runs through (the agent-cli executor,
	// prompt on stdin); empty = each task's own command.
	AgentCLI   string
	AppStart   string
	AppReady   string
	AppTimeout time.Duration
	// Scope guards (seed §15); unset = the Scheduler's defaults.
	ConfirmRequired, Confirmed []string
	MaxFiles, MaxLines         int
	// Budgets of the model usage the agents report (0 = none): tokens, and cost in US dollars.
	MaxTokens int64
	MaxCost   float64
}

func buildCommand() *cobra.Command {
	var o buildOptions
	cmd := &cobra.Command{
		Use:   "build <feature> [tasks.md]",
		Short: "Build a feature until Verify Done answers CONVERGED: build → verify → fix → repeat (exit 0 only when CONVERGED)",
		Long: "converge build runs the build-feature loop: iteration 1 builds the task list as an execution, then " +
			"Verify Done checks the done-criteria (--criteria) on the run branch; while criteria fail, each next " +
			"iteration runs the tasks not yet completed plus one fix task per failed criterion, built from the " +
			"verifier's failure details, on the same run branch. It stops CONVERGED, or BLOCKED / ESCALATED " +
			"(max iterations, the same failure twice or A → B → A, a regression) with the escalation report. " +
			"--resume continues the latest build of the feature after a person removed the blocker (with " +
			"--server or --data-dir, where the build was kept). Without --server the whole suite runs in this " +
			"process with --agents local agents, as for converge run.\n\n" +
			"--agent-cli names the coding agent's command line (it gets each task's prompt on stdin, fix tasks " +
			"included); without it each task runs its own command, and fix tasks cannot change anything.\n\n" +
			"Exit status: 0 when the build CONVERGED (and CONVERGED_PENDING_HUMAN with --allow-pending-human), 1 " +
			"when it did not (or an error), 2 for a usage error, 130 when interrupted (the build is cancelled).",
		Example: "  converge build inventory-export tasks.md --criteria done-criteria.md --repo . --agents 3\n" +
			"  converge build inventory-export tasks.md --criteria done-criteria.md --agent-cli 'claude -p' --max-iterations 8\n" +
			"  converge build inventory-export --resume --data-dir .converge/state --repo .\n" +
			"  converge build status inventory-export --server scheduler:7070\n" +
			"  converge build cancel fb_01J... --server scheduler:7070",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("want a feature name and a task list file, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Feature = args[0]
			if len(args) == 2 {
				o.run.TasksFile = args[1]
			}
			fs := cmd.Flags()
			return runBuild(cmd.Context(), o, runEnv{stdout: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr(),
				agentsSet: fs.Changed("agents"), dataDirSet: fs.Changed("data-dir"), inMemorySet: fs.Changed("in-memory")})
		},
	}
	o.run.client.bind(cmd, "", "build on the converge deployment at this address instead of starting one in-process")
	fs := cmd.Flags()
	fs.StringVar(&o.run.Repo, "repo", "", "local git repository to build in (overrides the list's repository)")
	fs.StringVar(&o.run.Criteria, "criteria", "", "done-criteria.md the loop verifies (overrides the list's)")
	fs.IntVar(&o.run.Agents, "agents", 3, "local agents of the in-process suite (not with --server)")
	fs.IntVar(&o.run.MaxParallel, "max-parallel", 0, "most tasks per wave (0 = the Scheduler's default, 4)")
	fs.StringVar(&o.run.DataDir, "data-dir", "", "keep the in-process suite's databases here, so that --resume finds the build (default: in memory)")
	fs.BoolVar(&o.run.InMemory, "in-memory", false, "keep nothing (the default without --data-dir)")
	fs.StringVar(&o.run.Format, "format", "", "task list format: tasks-md, plan, json or yaml (default: from the extension)")
	fs.IntVar(&o.MaxIterations, "max-iterations", 5, "most build → verify cycles, 1 to 50")
	fs.StringVar(&o.Autonomy, "autonomy", "default", "default (recover, then block), autonomous (block only for credentials or destructive actions) or cautious (block at the first failure, no retries)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "plan the waves and parse the criteria; build and store nothing")
	fs.BoolVar(&o.SkipVerify, "skip-verify", false, "build once without verifying (debugging); the build ends VERIFY_SKIPPED, never converged")
	fs.BoolVar(&o.Resume, "resume", false, "continue the latest build of the feature from its last iteration")
	fs.BoolVar(&o.AllowPendingHuman, "allow-pending-human", false, "exit 0 also when the build converged with HUMAN_VERIFY criteria waiting for sign-off")
	fs.StringVar(&o.AgentCLI, "agent-cli", os.Getenv("CONVERGE_AGENT_CLI"), "coding-agent command line each task runs through, prompt on stdin, e.g. 'claude -p' [CONVERGE_AGENT_CLI]")
	fs.StringVar(&o.AppStart, "app-start", "", "shell command that starts the app under test in a checkout of the run branch before each Verify Done (stopped after), e.g. 'go run ./cmd/server'")
	fs.StringVar(&o.AppReady, "app-ready", "", "URL polled until the app answers 2xx, e.g. http://127.0.0.1:8080/healthz (its host is the base URL of http checks), or grpc://host:port polled with grpc.health.v1 until SERVING (the address of grpc checks)")
	fs.DurationVar(&o.AppTimeout, "app-timeout", 60*time.Second, "how long one start of the app may take to become ready (3 attempts), 1s to 10m")
	fs.StringSliceVar(&o.ConfirmRequired, "confirm-required", nil, "scope guard: repository globs whose change needs a person's confirmation (the build stops BLOCKED)")
	fs.StringSliceVar(&o.Confirmed, "confirm", nil, "scope guard: paths a person confirmed (with --resume after a confirm-required stop)")
	fs.IntVar(&o.MaxFiles, "max-files", 10, "scope guard: most files one iteration may change (0 = no limit)")
	fs.IntVar(&o.MaxLines, "max-lines", 500, "scope guard: most lines one iteration may change (0 = no limit)")
	fs.Int64Var(&o.MaxTokens, "max-tokens", 0, "budget: the build ends ESCALATED (exit reason BUDGET) once its agents reported more input plus output tokens after an iteration (0 = none)")
	fs.Float64Var(&o.MaxCost, "max-cost", 0, "budget in US dollars, like --max-tokens for the cost the agents reported, e.g. 2.50 (0 = none)")
	cmd.AddCommand(buildStatusCommand(), buildCancelCommand())
	return cmd
}

// autonomyOf parses --autonomy.
func autonomyOf(s string) (schedulerv1.Autonomy, error) {
	switch s {
	case "", "default":
		return schedulerv1.Autonomy_AUTONOMY_DEFAULT, nil
	case "autonomous":
		return schedulerv1.Autonomy_AUTONOMY_AUTONOMOUS, nil
	case "cautious":
		return schedulerv1.Autonomy_AUTONOMY_CAUTIOUS, nil
	}
	return 0, usagef("--autonomy %q: want default, autonomous or cautious", s)
}

// runBuild is `converge build`.
func runBuild(parent context.Context, o buildOptions, env runEnv) error {
	inProcess := o.run.client.Server == ""
	autonomy, err := autonomyOf(o.Autonomy)
	switch {
	case err != nil:
		return err
	case o.MaxIterations < 1 || o.MaxIterations > 50:
		return usagef("--max-iterations %d: want 1 to 50", o.MaxIterations)
	case o.run.TasksFile == "" && !o.Resume:
		return usagef("want a task list file (or --resume)")
	case o.Resume && inProcess && o.run.DataDir == "":
		return usagef("--resume needs the build's state: give --data-dir (where the build ran) or --server")
	case (o.AppStart == "") != (o.AppReady == ""):
		return usagef("--app-start and --app-ready go together: the command that starts the app and the URL that says it is ready")
	case o.AppTimeout < time.Second || o.AppTimeout > 10*time.Minute:
		return usagef("--app-timeout %s: want 1s to 10m", o.AppTimeout)
	case !inProcess && (env.agentsSet || env.dataDirSet || env.inMemorySet):
		return usagef("--agents, --data-dir and --in-memory configure the in-process suite: not with --server")
	case o.MaxTokens < 0:
		return usagef("--max-tokens %d: want 0 (none) or more", o.MaxTokens)
	case o.MaxCost < 0 || o.MaxCost > 1e9 || math.IsNaN(o.MaxCost):
		return usagef("--max-cost %g: want 0 (none) to 1e9 US dollars", o.MaxCost)
	case inProcess && (o.run.Agents < 1 || o.run.Agents > 64):
		return usagef("--agents %d: want 1 to 64", o.run.Agents)
	}
	req := &schedulerv1.StartFeatureBuildRequest{Feature: o.Feature, Resume: o.Resume, DryRun: o.DryRun, SkipVerify: o.SkipVerify,
		Autonomy: autonomy, Options: executionOptions(o.run), MaxTokens: o.MaxTokens, MaxCostUsdMicros: int64(math.Round(o.MaxCost * 1e6))}
	if o.run.client.Server == "" || o.MaxIterations != 5 {
		n := int32(o.MaxIterations)
		req.MaxIterations = &n
	}
	if len(o.ConfirmRequired) > 0 || len(o.Confirmed) > 0 || o.MaxFiles != 10 || o.MaxLines != 500 {
		req.ScopeGuards = &schedulerv1.ScopeGuards{BlocklistGlobs: []string{".env*", "**/.env*", ".git/**"},
			MaxFilesPerIteration: int32(o.MaxFiles), MaxLinesPerIteration: int32(o.MaxLines), ConfirmRequiredGlobs: o.ConfirmRequired, ConfirmedPaths: o.Confirmed}
	}
	if o.AppStart != "" {
		req.App = &schedulerv1.AppUnderTest{StartCommand: o.AppStart, ReadyUrl: o.AppReady, ReadyTimeout: durationpb.New(o.AppTimeout)}
	}
	if o.AgentCLI != "" {
		argv := strings.Fields(o.AgentCLI)
		req.Options.Executor = &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{Argv: argv}}}
	}
	var (
		format  schedulerv1.ImportFormat
		content []byte
		base    = &schedulerv1.TaskListSpec{}
	)
	if o.run.TasksFile != "" {
		if format, err = importFormat(o.run.TasksFile, o.run.Format); err != nil {
			return err
		}
		if content, err = os.ReadFile(o.run.TasksFile); err != nil {
			return usageError{err}
		}
		doc, err := tasklist.Parse(format, content)
		if err != nil {
			return usagef("%s: %v", o.run.TasksFile, err)
		}
		if doc.Spec.GetName() == "" {
			base.Name = strings.TrimSuffix(filepath.Base(o.run.TasksFile), filepath.Ext(o.run.TasksFile))
		}
		if o.run.Repo != "" {
			dir, err := checkGitRepo(o.run.Repo)
			if err != nil {
				return err
			}
			base.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: dir}, BaseRef: doc.Spec.GetRepository().GetBaseRef()}
			warnUncommitted(env.stderr, dir, base.GetRepository().GetBaseRef())
		}
	}
	if o.run.TasksFile == "" && o.run.Repo != "" { // --resume: the agents build in this repository
		dir, err := checkGitRepo(o.run.Repo)
		if err != nil {
			return err
		}
		base.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: dir}}
	}
	if o.run.Criteria != "" {
		md, err := os.ReadFile(o.run.Criteria)
		if err != nil {
			return usageError{fmt.Errorf("--criteria: %w", err)}
		}
		req.DoneCriteria = string(md)
	}

	sigCtx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var conn *grpc.ClientConn
	if inProcess {
		o.run.repoDir = base.GetRepository().GetPath()
		s, err := startSuite(sigCtx, o.run, env)
		if err != nil {
			return err
		}
		defer s.stop()
		conn = s.conn
	} else {
		if conn, err = o.run.client.connect(sigCtx); err != nil {
			return err
		}
		defer conn.Close()
	}
	client := schedulerv1.NewSchedulerServiceClient(conn)
	if content != nil && !o.Resume {
		if o.DryRun {
			req.TaskListSource = &schedulerv1.StartFeatureBuildRequest_TaskList{TaskList: mergeBase(format, content, base)}
		} else {
			imported, err := client.ImportTaskList(sigCtx, &schedulerv1.ImportTaskListRequest{Format: format, Content: content, Base: base})
			if err != nil {
				return rpcError("import "+o.run.TasksFile, err)
			}
			req.TaskListSource = &schedulerv1.StartFeatureBuildRequest_TaskListId{TaskListId: imported.GetTaskList().GetId()}
		}
	}
	res, err := client.StartFeatureBuild(sigCtx, req)
	if err != nil {
		return rpcError("start the feature build", err)
	}
	if o.DryRun {
		printDryRun(env.stdout, res)
		return nil
	}
	fb, err := followBuild(sigCtx, conn, res.GetFeatureBuild().GetId(), env.stdout)
	if sigCtx.Err() != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), time.Minute)
		defer cancel()
		fmt.Fprintf(env.stdout, "\n🛑 Interrupted: cancelling %s\n", res.GetFeatureBuild().GetId())
		_, _ = client.CancelFeatureBuild(ctx, &schedulerv1.CancelFeatureBuildRequest{FeatureBuildId: res.GetFeatureBuild().GetId(), Reason: "interrupted in converge build (Ctrl-C)"})
		return exitError{code: exitInterrupted}
	}
	if err != nil {
		return err
	}
	return buildExit(fb, o.AllowPendingHuman)
}

// buildExit is the exit status of an ended build: 0 only for CONVERGED (and pending human sign-off
// when allowed).
func buildExit(fb *schedulerv1.FeatureBuild, allowPendingHuman bool) error {
	switch {
	case fb.GetOutcome() == commonv1.Outcome_OUTCOME_CONVERGED:
		return nil
	case fb.GetOutcome() == commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN && allowPendingHuman:
		return nil
	}
	return exitError{code: exitFailure}
}

// mergeBase parses the list document for a dry run and applies base's name and repository.
func mergeBase(format schedulerv1.ImportFormat, content []byte, base *schedulerv1.TaskListSpec) *schedulerv1.TaskListSpec {
	doc, err := tasklist.Parse(format, content)
	if err != nil {
		return base
	}
	spec := doc.Spec
	if base.GetName() != "" {
		spec.Name = base.GetName()
	}
	if base.GetRepository() != nil {
		spec.Repository = base.GetRepository()
	}
	return spec
}

// printDryRun shows the plan of a dry run: the criteria and the waves of iteration 1.
func printDryRun(w io.Writer, res *schedulerv1.StartFeatureBuildResponse) {
	c := res.GetCriteria()
	fb := res.GetFeatureBuild()
	fmt.Fprintf(w, "## Build Feature - dry run\n\n**Feature:** %s\n**Max iterations:** %d\n**Criteria loaded:** %d total\n- AUTO_VERIFY: %d\n- HUMAN_VERIFY: %d\n- TOOL_VERIFY: %d\n\n### Iteration 1 plan\n",
		fb.GetFeature(), fb.GetMaxIterations(), c.GetTotal(), c.GetAutoVerify(), c.GetHumanVerify(), c.GetToolVerify())
	for _, wv := range res.GetPlannedWaves() {
		ids := make([]string, len(wv.GetPlacements()))
		for i, p := range wv.GetPlacements() {
			ids[i] = p.GetTaskId()
		}
		fmt.Fprintf(w, "- wave %d: %s\n", wv.GetWaveNumber(), strings.Join(ids, ", "))
	}
	fmt.Fprintln(w, "\nNothing was built or stored (--dry-run).")
}

func buildStatusCommand() *cobra.Command {
	var c clientFlags
	cmd := &cobra.Command{
		Use:   "status <feature|fb_id>",
		Short: "Show a feature build: iterations, criteria progress, exit",
		Args:  exactArgs(1, "a feature name or a feature build id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			conn, err := c.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer conn.Close()
			fb, err := getBuild(cmd.Context(), schedulerv1.NewSchedulerServiceClient(conn), args[0])
			if err != nil {
				return err
			}
			renderBuildStatus(cmd.OutOrStdout(), fb)
			return nil
		},
	}
	c.bind(cmd, "127.0.0.1:7070", "the Scheduler's address")
	return cmd
}

func buildCancelCommand() *cobra.Command {
	var (
		c      clientFlags
		reason string
	)
	cmd := &cobra.Command{
		Use:   "cancel <fb_id>",
		Short: "Cancel a feature build and its current execution",
		Args:  exactArgs(1, "a feature build id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			conn, err := c.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer conn.Close()
			res, err := schedulerv1.NewSchedulerServiceClient(conn).CancelFeatureBuild(cmd.Context(),
				&schedulerv1.CancelFeatureBuildRequest{FeatureBuildId: args[0], Reason: reason})
			if err != nil {
				return rpcError("cancel "+args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", res.GetFeatureBuild().GetId(), buildStatusName(res.GetFeatureBuild()))
			return nil
		},
	}
	c.bind(cmd, "127.0.0.1:7070", "the Scheduler's address")
	cmd.Flags().StringVar(&reason, "reason", "", "why (shown in the build's exit message)")
	return cmd
}

// getBuild reads a build by id ("fb_...") or the latest of a feature.
func getBuild(ctx context.Context, client schedulerv1.SchedulerServiceClient, key string) (*schedulerv1.FeatureBuild, error) {
	req := &schedulerv1.GetFeatureBuildRequest{Key: &schedulerv1.GetFeatureBuildRequest_Feature{Feature: key}}
	if strings.HasPrefix(key, "fb_") {
		req.Key = &schedulerv1.GetFeatureBuildRequest_FeatureBuildId{FeatureBuildId: key}
	}
	res, err := client.GetFeatureBuild(ctx, req)
	if err != nil {
		return nil, rpcError("feature build "+key, err)
	}
	return res.GetFeatureBuild(), nil
}
