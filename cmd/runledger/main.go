// Command runledger is the command line of runledger: `runledger local`
// (what `make run` runs) starts the embedded local stack, `runledger worker
// exec` runs commands as a worker pool, and the other commands drive the
// API.
//
// Exit status: 0 on success, 1 when the work failed (an API error, a run
// that ended FAILED), 2 on a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(singleDashLongFlags(root, args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var usage *usageError
	var exit *exitError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "runledger: %s\nRun '%s --help' for usage.\n", usage.msg, cmd.CommandPath())
		return exitUsage
	case errors.As(err, &exit):
		return exit.code
	default:
		fmt.Fprintf(stderr, "runledger: %s\n", describe(err))
		return exitFailure
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "runledger",
		Short: "Schedule jobs and workflows on AWS, or locally",
		Long: `runledger schedules jobs (cron, rate, one-off or manual) whose tasks form a
DAG, runs them on worker pools, and keeps every state change of every task.

The API commands find the API from --api-url or a CDK stack's outputs
(--stack), else RUNLEDGER_API_URL or RUNLEDGER_STACK, else the
.runledger/local.json that 'runledger local' writes (here or in a parent
folder). They send the local stack's API key, else sign with SigV4. Long
flags may also be written with one dash (-addr).`,
		Example: `  runledger local
  runledger apply -f jobs/
  runledger jobs trigger nightly-report --wait
  runledger runs show 01JH2Z3ZKX8Q6S1M4T7V9W0ABC`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE:          showHelp,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErrorf("%s", err) })
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newLocalCmd(), newWorkerCmd(), newTaskCmd(), newJobsCmd(), newRunsCmd(), newBackfillsCmd(), newApplyCmd(), newEventsCmd())
	return root
}

// usageError is a command line the command cannot run: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// exitError ends the command with a status and nothing more to print (the
// command has said it: a run that ended FAILED).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// noArgs is the Args check of commands that take none, and of command
// groups, where an argument is an unknown subcommand.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.HasSubCommands() {
		return usageErrorf("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
}

// exactArgs wants n arguments, named in the message.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usageErrorf("%s wants %s, got %d argument(s)", cmd.CommandPath(), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// showHelp is what a command group does without a subcommand.
func showHelp(cmd *cobra.Command, _ []string) error {
	_ = cmd.Help()
	if cmd.HasParent() {
		return usageErrorf("%s needs a subcommand", cmd.CommandPath())
	}
	return nil
}

// singleDashLongFlags rewrites "-name" and "-name=value" to "--name..."
// when name is a long flag of the command the line runs, as Go's flag
// package (which `runledger local` used) accepts them; pflag would read
// "-addr" as the shorthands -a -d -d -r. Arguments after "--" stay as they
// are.
func singleDashLongFlags(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		return args
	}
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if len(name) > 1 && lookupFlag(cmd, name) != nil {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}

func lookupFlag(cmd *cobra.Command, name string) *pflag.Flag {
	if f := cmd.Flags().Lookup(name); f != nil {
		return f
	}
	return cmd.InheritedFlags().Lookup(name)
}
