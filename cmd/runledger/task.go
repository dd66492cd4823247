package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/runledger/runledger/shared/execworker"
	"github.com/runledger/runledger/shared/worker"
)

func newTaskCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "task",
		Short:   "Run one attempt that an executor started this process for",
		Example: `  runledger task run -- python3 etl.py --day '{{.LogicalDate}}'`,
		Args:    noArgs,
		RunE:    showHelp,
	}
	cmd.AddCommand(newTaskRunCmd())
	return cmd
}

type taskRunFlags struct {
	killGrace time.Duration
	verbose   bool
}

func newTaskRunCmd() *cobra.Command {
	var f taskRunFlags
	cmd := &cobra.Command{
		Use:   "run [--kill-grace D] -- CMD [ARGS...]",
		Short: "Claim the attempt named by the environment, run a command for it, and report how it ended",
		Long: `run is the entry point of a container that the ecs executor starts: the
container's environment names one attempt (RUNLEDGER_RUN, RUNLEDGER_TASK,
RUNLEDGER_ATTEMPT, RUNLEDGER_CLAIM_NONCE, RUNLEDGER_API_URL). run claims it
with the one-time claim nonce, which answers with the attempt's payload,
params and token, runs CMD while heartbeating, and completes the attempt
over HTTP with that token (the nonce is refused after the claim).

CMD and its arguments are Go templates as in 'runledger worker exec' (.Job,
.Run, .Task, .Attempt, .LogicalTime, .LogicalDate, .Params); the process
gets the container's environment without its RUNLEDGER_* variables (this
process claims, heartbeats and completes; the command needs no token), the
task's payload and the run's params as JSON in RUNLEDGER_PAYLOAD and
RUNLEDGER_PARAMS, and the RUNLEDGER_* variables 'worker exec' gives. Exit 0
succeeds; another status fails the attempt with that exit_code (retried by
the job's policy), with the tail of stderr as the reason. A cancel request,
the run timeout or a lost lease send SIGTERM to the command's process group,
then SIGKILL after --kill-grace.

run exits with CMD's status (1 when the attempt failed without one, when
the claim was refused, or when nothing could be reported): what ECS shows
as the container's exit code, which the scheduler reads if it loses track
of the attempt.`,
		Example: `  # the container's command in its task definition
  runledger task run -- python3 /app/etl.py --day '{{.LogicalDate}}'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s wants the command to run after --", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runTask(cmd.Context(), f, args) },
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.killGrace, "kill-grace", execworker.DefaultKillGrace, "time between SIGTERM and SIGKILL when the command must stop")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log at debug level")
	return cmd
}

func runTask(ctx context.Context, f taskRunFlags, argv []string) error {
	if f.killGrace <= 0 {
		return usageErrorf("--kill-grace %s: want a positive duration", f.killGrace)
	}
	// The image fixes the command: it needs no allowlist beyond itself.
	allow, err := execworker.NewAllowlist(nil, true)
	if err != nil {
		return err
	}
	// The container's environment is the operator's (the task definition's):
	// the command gets it, but for the RUNLEDGER_* variables that name the
	// attempt to claim.
	h, err := execworker.New(execworker.Config{Allow: allow, KillGrace: f.killGrace, InheritEnv: true})
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	err = worker.RunFromEnv(ctx, h.Fixed(argv))
	if err == nil {
		return nil
	}
	var failed *worker.AttemptError
	if errors.As(err, &failed) {
		fmt.Fprintf(os.Stderr, "runledger: %s\n", failed)
		if c := failed.Completion.ExitCode; c != nil && *c > 0 && *c < 256 {
			return &exitError{code: *c}
		}
		return &exitError{code: exitFailure}
	}
	return err
}
