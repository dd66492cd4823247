package main

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/statemodel"
)

func newRunsCmd() *cobra.Command {
	var api apiFlags
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List, show, follow and act on runs",
		Example: `  runledger runs list --job nightly-report
  runledger runs show 01JH2Z3ZKX8Q6S1M4T7V9W0ABC
  runledger runs watch 01JH2Z3ZKX8Q6S1M4T7V9W0ABC`,
		Args: noArgs,
		RunE: showHelp,
	}
	api.register(cmd.PersistentFlags())
	cmd.AddCommand(
		newRunsListCmd(&api), newRunsShowCmd(&api), newRunsHistoryCmd(&api), newRunsCancelCmd(&api),
		newRunsRetryCmd(&api), newRunsMarkCmd(&api, "mark-succeeded"), newRunsMarkCmd(&api, "mark-failed"),
		newRunsWatchCmd(&api), newRunsSignalCmd(&api),
	)
	return cmd
}

func newRunsListCmd(api *apiFlags) *cobra.Command {
	var job, status string
	var limit int
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List runs, newest first",
		Example: "  runledger runs list\n  runledger runs list --job etl --status FAILED --limit 10",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 500 {
				return usageErrorf("--limit %d: want 1..500", limit)
			}
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			page, err := c.ListRuns(cmd.Context(), client.RunFilter{Job: job, Status: statemodel.Status(status), Page: client.Page{Limit: limit}})
			if err != nil {
				return err
			}
			if api.json() {
				return printJSON(cmd.OutOrStdout(), page)
			}
			t := newTable(cmd.OutOrStdout(), "RUN", "JOB", "STATUS", "STATE", "TRIGGER", "LOGICAL TIME", "CREATED", "ENDED")
			for _, r := range page.Runs {
				t.row(r.ID, r.Job, string(r.Status), string(r.ExecutionState), string(r.Trigger), when(r.LogicalTime), when(r.CreatedAt), when(r.EndedAt))
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&job, "job", "", "only this job's runs")
	cmd.Flags().StringVar(&status, "status", "", "only runs of this status: PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many runs")
	return cmd
}

func newRunsShowCmd(api *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show RUN",
		Short: "Show a run's tasks as a DAG with state, attempt and durations",
		Long: `show draws the run's tasks as a tree of their dependencies (a task with
several upstream tasks appears under the last of them and names the others),
each with its state, current attempt and the latest attempt's durations:
dependency wait (created until it could be scheduled), queue wait (queued
until a worker claimed it) and run time.`,
		Example: "  runledger runs show 01JH2Z3ZKX8Q6S1M4T7V9W0ABC\n  runledger runs show 01JH2Z3ZKX8Q6S1M4T7V9W0ABC -o json",
		Args:    exactArgs("RUN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			d, err := c.GetRun(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if api.json() {
				return printJSON(cmd.OutOrStdout(), d)
			}
			return drawRun(cmd.OutOrStdout(), d)
		},
	}
}

func newRunsHistoryCmd(api *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "history RUN TASK",
		Short:   "Show every state change of a task, oldest first",
		Example: "  runledger runs history 01JH2Z3ZKX8Q6S1M4T7V9W0ABC extract",
		Args:    exactArgs("RUN", "TASK"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			var all []client.Transition
			page := client.Page{}
			for {
				p, err := c.History(cmd.Context(), args[0], args[1], page)
				if err != nil {
					return err
				}
				all = append(all, p.Transitions...)
				if p.NextToken == "" {
					break
				}
				page.NextToken = p.NextToken
			}
			if api.json() {
				return printJSON(cmd.OutOrStdout(), map[string]any{"transitions": all})
			}
			t := newTable(cmd.OutOrStdout(), "SEQ", "OBSERVED", "FROM", "TO", "EVENT", "ACTOR", "ATTEMPT", "REASON")
			for _, tr := range all {
				from := string(tr.From)
				if from == "" {
					from = "-"
				}
				t.row(fmt.Sprint(tr.Seq), when(tr.ObservedAt), from, string(tr.To), string(tr.Event), string(tr.Actor), fmt.Sprint(tr.Attempt), oneLine(tr.Reason))
			}
			return t.flush()
		},
	}
}

// oneLine keeps a reason on its table row: the last line of it.
func oneLine(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			return "..." + s[i+1:]
		}
	}
	return s
}

func newRunsCancelCmd(api *apiFlags) *cobra.Command {
	var task, reason string
	cmd := &cobra.Command{
		Use:     "cancel RUN",
		Short:   "Cancel a run, or one of its tasks",
		Example: "  runledger runs cancel 01JH2Z3ZKX8Q6S1M4T7V9W0ABC --reason 'wrong day'\n  runledger runs cancel 01JH2Z3ZKX8Q6S1M4T7V9W0ABC --task load",
		Args:    exactArgs("RUN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			var d client.RunDetail
			if task != "" {
				d, err = c.CancelTask(cmd.Context(), args[0], task, reason)
			} else {
				d, err = c.CancelRun(cmd.Context(), args[0], reason)
			}
			if err != nil {
				return err
			}
			return printRunResult(cmd, api, d)
		},
	}
	cmd.Flags().StringVar(&task, "task", "", "cancel only this task")
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept in the tasks' history")
	return cmd
}

// operatorFlags are who acts and why, for the operator's overrides.
type operatorFlags struct{ operator, reason string }

func (o *operatorFlags) register(fs *pflag.FlagSet, reasonRequired bool) {
	fs.StringVar(&o.operator, "operator", currentUser(), "who acts, kept in history")
	help := "why, kept in history"
	if reasonRequired {
		help += " (required)"
	}
	fs.StringVar(&o.reason, "reason", "", help)
}

// currentUser is who acts by default: the user name.
func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

func newRunsRetryCmd(api *apiFlags) *cobra.Command {
	var op operatorFlags
	var downstream bool
	cmd := &cobra.Command{
		Use:   "retry RUN TASK",
		Short: "Give a FAILED or CANCELLED task a new attempt",
		Long: "Give a FAILED or CANCELLED task a new attempt with a fresh retry budget.\n" +
			"With --downstream, the tasks below it that ended UPSTREAM_FAILED or SKIPPED\n" +
			"are cleared back to CREATED and run again once it succeeds.",
		Example: "  runledger runs retry 01JH2Z3ZKX8Q6S1M4T7V9W0ABC load --reason 'fixed the input'\n" +
			"  runledger runs retry 01JH2Z3ZKX8Q6S1M4T7V9W0ABC load --downstream --operator ann",
		Args: exactArgs("RUN", "TASK"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			d, err := c.RetryTask(cmd.Context(), args[0], args[1], client.Retry{Operator: op.operator, Reason: op.reason, Downstream: downstream})
			if err != nil {
				return err
			}
			return printRunResult(cmd, api, d)
		},
	}
	op.register(cmd.Flags(), false)
	cmd.Flags().BoolVar(&downstream, "downstream", false, "also rerun the tasks below it that ended UPSTREAM_FAILED or SKIPPED")
	return cmd
}

func newRunsMarkCmd(api *apiFlags, verb string) *cobra.Command {
	var op operatorFlags
	outcome := "SUCCEEDED"
	if verb == "mark-failed" {
		outcome = "FAILED"
	}
	cmd := &cobra.Command{
		Use:     verb + " RUN TASK --reason TEXT",
		Short:   "Override a task's outcome to " + outcome + " (kept in history with operator and reason)",
		Example: "  runledger runs " + verb + " 01JH2Z3ZKX8Q6S1M4T7V9W0ABC load --reason 'loaded by hand'",
		Args:    exactArgs("RUN", "TASK"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if op.reason == "" || op.operator == "" {
				return usageErrorf("%s needs --reason and --operator", verb)
			}
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			mark := c.MarkSucceeded
			if verb == "mark-failed" {
				mark = c.MarkFailed
			}
			d, err := mark(cmd.Context(), args[0], args[1], op.operator, op.reason)
			if err != nil {
				return err
			}
			return printRunResult(cmd, api, d)
		},
	}
	op.register(cmd.Flags(), true)
	return cmd
}

// printRunResult prints the run an action answered with.
func printRunResult(cmd *cobra.Command, api *apiFlags, d client.RunDetail) error {
	if api.json() {
		return printJSON(cmd.OutOrStdout(), d)
	}
	return drawRun(cmd.OutOrStdout(), d)
}

func newRunsWatchCmd(api *apiFlags) *cobra.Command {
	var f followFlags
	cmd := &cobra.Command{
		Use:   "watch RUN",
		Short: "Follow a run until it ends: a line per task that changes state",
		Long: `watch follows a run, printing a line each time one of its tasks changes state
or attempt, and the run's tasks when it ends. It exits 0 when the run
SUCCEEDED and 1 when it ended otherwise (FAILED, CANCELLED).`,
		Example: "  runledger runs watch 01JH2Z3ZKX8Q6S1M4T7V9W0ABC\n  runledger runs watch 01JH2Z3ZKX8Q6S1M4T7V9W0ABC --interval 2s",
		Args:    exactArgs("RUN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			return follow(cmd, c, api, args[0], f)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

// followFlags are the flags of the commands that follow a run.
type followFlags struct {
	interval time.Duration
	timeout  time.Duration
}

func (f *followFlags) register(fs *pflag.FlagSet) {
	fs.DurationVar(&f.interval, "interval", 500*time.Millisecond, "how often to read the run while following it")
	fs.DurationVar(&f.timeout, "timeout", 0, "give up following after this long (exit 1); 0: never")
}

// check refuses follow flags that cannot work, as a usage error; the
// commands that write before they follow call it before writing.
func (f followFlags) check() error {
	if f.interval <= 0 {
		return usageErrorf("--interval %s: want a positive duration", f.interval)
	}
	return nil
}

// context is the command's context, ended after --timeout when one is set.
func (f followFlags) context(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	if f.timeout > 0 {
		return context.WithTimeout(cmd.Context(), f.timeout)
	}
	return context.WithCancel(cmd.Context())
}
