// Command converge is converge's CLI: `converge run` builds a task list with local agents (or on a
// running deployment) and exits 0 only when Verify Done answers CONVERGED; `converge watch`,
// `converge status` and `converge logs` look at executions; `converge dev` runs all five services in
// one process on the embedded default (SQLite, in-process locks) with an optional local agent pool;
// `converge migrate` applies the services' schema migrations to Postgres or to the dev data
// directory.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

func main() { os.Exit(execute(rootCommand(), os.Stderr)) }

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "converge",
		Short: "converge runs coding-agent builds and calls them done only when Verify Done says so",
		Long: "converge runs autonomous coding-agent builds as parallel waves of tasks in git worktrees, " +
			"and calls work done only when an independent verifier answers CONVERGED.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(runCommand(), buildCommand(), watchCommand(), statusCommand(), logsCommand(), signoffCommand(), knowledgeCommand(), devCommand(), migrateCommand(), authCommand())
	// A flag that does not parse is a usage error (exit 2), like a wrong number of arguments.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return root
}

// Exit codes of converge.
const (
	exitOK          = 0   // success; for run and watch: the execution CONVERGED
	exitFailure     = 1   // an error, or an execution that did not converge
	exitUsage       = 2   // bad arguments or flags: nothing was started
	exitInterrupted = 130 // interrupted (Ctrl-C); run cancelled its execution first
)

// usageError is a mistake in the command line: exit 2, nothing was started.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef answers a usageError.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitError ends the command with code; err (optional) is printed.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e exitError) Unwrap() error { return e.err }

// execute runs cmd and answers the process exit code, printing the error (once) to errOut.
func execute(cmd *cobra.Command, errOut io.Writer) int {
	c, err := cmd.ExecuteC()
	if err == nil {
		return exitOK
	}
	code := exitFailure
	var (
		ue usageError
		ee exitError
	)
	switch {
	case errors.As(err, &ee):
		code = ee.code
		if ee.err == nil {
			return code // the command has said everything already
		}
	case errors.As(err, &ue), strings.HasPrefix(err.Error(), "unknown command"):
		code = exitUsage
	}
	name := "converge"
	if c != nil && c != cmd {
		name = c.CommandPath()
	}
	fmt.Fprintf(errOut, "%s: %v\n", name, err)
	if code == exitUsage && c != nil {
		fmt.Fprintf(errOut, "Run '%s --help' for usage.\n", c.CommandPath())
	}
	return code
}

// exactArgs is cobra.ExactArgs as a usage error, naming what is missing.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("want %s, got %d arguments", what, len(args))
		}
		return nil
	}
}

// maxArgs is cobra.MaximumNArgs as a usage error.
func maxArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) > n {
			return usagef("want at most %s, got %d arguments", what, len(args))
		}
		return nil
	}
}

// noArgs is cobra.NoArgs as a usage error.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments %q", args)
	}
	return nil
}
