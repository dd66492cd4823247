package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
)

func newJobsCmd() *cobra.Command {
	var api apiFlags
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List, read, pause, resume, delete, trigger and backfill jobs",
		Example: `  runledger jobs list
  runledger jobs trigger nightly-report --param day=2026-01-02 --wait
  runledger jobs backfill nightly-report --from 2026-01-01T00:00:00Z --to 2026-02-01T00:00:00Z --max-active 3`,
		Args: noArgs,
		RunE: showHelp,
	}
	api.register(cmd.PersistentFlags())
	cmd.AddCommand(
		newJobsListCmd(&api), newJobsGetCmd(&api), newJobsDeleteCmd(&api),
		newJobsPauseResumeCmd(&api, "pause"), newJobsPauseResumeCmd(&api, "resume"),
		newJobsTriggerCmd(&api), newJobsBackfillCmd(&api),
	)
	return cmd
}

func newJobsListCmd(api *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List the jobs",
		Example: "  runledger jobs list\n  runledger jobs list -o json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			jobs, err := allJobs(cmd, c)
			if err != nil {
				return err
			}
			if api.json() {
				return printJSON(cmd.OutOrStdout(), map[string]any{"jobs": jobs})
			}
			t := newTable(cmd.OutOrStdout(), "NAME", "SCHEDULE", "POOL", "TASKS", "PAUSED", "NEXT FIRE", "MISSED", "VERSION")
			for _, j := range jobs {
				t.row(j.Job.Name, scheduleText(j.Job.Schedule), j.Job.Pool, fmt.Sprint(len(j.Job.Tasks())),
					fmt.Sprint(j.Paused), when(j.NextFireTime), fmt.Sprint(j.MissedSlots), fmt.Sprint(j.Version))
			}
			return t.flush()
		},
	}
}

// allJobs follows the pages of the job list.
func allJobs(cmd *cobra.Command, c *client.Client) ([]client.Job, error) {
	var all []client.Job
	page := client.Page{}
	for {
		p, err := c.ListJobs(cmd.Context(), page)
		if err != nil {
			return nil, err
		}
		all = append(all, p.Jobs...)
		if p.NextToken == "" {
			return all, nil
		}
		page.NextToken = p.NextToken
	}
}

func scheduleText(s jobspec.Schedule) string {
	switch s.Kind {
	case jobspec.ScheduleCron:
		if s.Location != nil && s.Location != time.UTC {
			return fmt.Sprintf("cron %q %s", s.Cron, s.Location)
		}
		return fmt.Sprintf("cron %q", s.Cron)
	case jobspec.ScheduleRate:
		return "every " + jobspec.FormatDuration(s.Rate)
	case jobspec.ScheduleAt:
		return "at " + when(s.At)
	}
	return "manual"
}

func newJobsGetCmd(api *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "get JOB",
		Short:   "Show a job's definition (the API's canonical JSON, every default explicit)",
		Example: "  runledger jobs get nightly-report",
		Args:    exactArgs("JOB"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			j, err := c.GetJob(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			// The definition is JSON in both modes: it is what apply takes.
			return printJSON(cmd.OutOrStdout(), j)
		},
	}
}

func newJobsDeleteCmd(api *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "delete JOB",
		Short:   "Delete a job (its past runs stay readable; refused while it has unfinished runs)",
		Example: "  runledger jobs delete nightly-report",
		Args:    exactArgs("JOB"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			if err := c.DeleteJob(cmd.Context(), args[0]); err != nil {
				return err
			}
			if api.json() {
				return printJSON(cmd.OutOrStdout(), map[string]any{"deleted": args[0]})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %s deleted\n", args[0])
			return nil
		},
	}
}

func newJobsPauseResumeCmd(api *apiFlags, verb string) *cobra.Command {
	short := "Pause a job's schedule (no run starts on schedule while paused)"
	if verb == "resume" {
		short = "Resume a paused job's schedule; the slots missed meanwhile are caught up by its catchup policy"
	}
	return &cobra.Command{
		Use:     verb + " JOB",
		Short:   short,
		Example: "  runledger jobs " + verb + " nightly-report",
		Args:    exactArgs("JOB"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			do := c.PauseJob
			if verb == "resume" {
				do = c.ResumeJob
			}
			j, err := do(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if api.json() {
				return printJSON(cmd.OutOrStdout(), map[string]any{"job": j})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %s: paused %v, next fire %s, missed slots %d\n", j.Job.Name, j.Paused, when(j.NextFireTime), j.MissedSlots)
			return nil
		},
	}
}

type triggerFlags struct {
	params      []string
	paramsJSON  string
	logicalTime string
	key         string
	wait        bool
	follow      followFlags
}

func newJobsTriggerCmd(api *apiFlags) *cobra.Command {
	var f triggerFlags
	cmd := &cobra.Command{
		Use:   "trigger JOB",
		Short: "Start a run of a job; with --wait, follow it until it ends",
		Long: `trigger starts a manual run of a job. With --wait it follows the run, one
line per task that changes state, and exits 0 when the run SUCCEEDED and 1
when it ended otherwise.`,
		Example: `  runledger jobs trigger hello
  runledger jobs trigger etl --param day=2026-01-02 --param region=eu --wait
  runledger jobs trigger etl --params '{"day": "2026-01-02"}' --logical-time 2026-01-02T00:00:00Z`,
		Args: exactArgs("JOB"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			t, err := f.trigger()
			if err != nil {
				return err
			}
			if f.wait {
				if err := f.follow.check(); err != nil {
					return err
				}
			}
			d, _, err := c.TriggerRun(cmd.Context(), args[0], t)
			if err != nil {
				return err
			}
			if f.wait {
				return follow(cmd, c, api, d.Run.ID, f.follow)
			}
			if api.json() {
				return printJSON(cmd.OutOrStdout(), d)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s of job %s started (logical time %s)\n", d.Run.ID, d.Run.Job, when(d.Run.LogicalTime))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.params, "param", nil, "a run parameter KEY=VALUE (a string); repeatable")
	fl.StringVar(&f.paramsJSON, "params", "", "the run's parameters as a JSON object")
	fl.StringVar(&f.logicalTime, "logical-time", "", "the run's logical time, RFC 3339 (default: now)")
	fl.StringVar(&f.key, "idempotency-key", "", "the same key again answers the same run instead of starting another")
	fl.BoolVar(&f.wait, "wait", false, "follow the run until it ends; exit 1 unless it SUCCEEDED")
	f.follow.register(fl)
	return cmd
}

// trigger builds the client's Trigger from the flags.
func (f triggerFlags) trigger() (client.Trigger, error) {
	t := client.Trigger{IdempotencyKey: f.key}
	if f.paramsJSON != "" && len(f.params) > 0 {
		return t, usageErrorf("give --params or --param, not both")
	}
	if f.paramsJSON != "" {
		var obj map[string]any
		if err := json.Unmarshal([]byte(f.paramsJSON), &obj); err != nil {
			return t, usageErrorf("--params: not a JSON object: %v", err)
		}
		t.Params = json.RawMessage(f.paramsJSON)
	}
	if len(f.params) > 0 {
		m := map[string]string{}
		for _, p := range f.params {
			k, v, ok := strings.Cut(p, "=")
			if !ok || k == "" {
				return t, usageErrorf("--param %q: want KEY=VALUE", p)
			}
			m[k] = v
		}
		t.Params = m
	}
	if f.logicalTime != "" {
		lt, err := protocol.ParseTime(f.logicalTime)
		if err != nil {
			return t, usageErrorf("--logical-time %q: want an RFC 3339 time", f.logicalTime)
		}
		t.LogicalTime = lt
	}
	return t, nil
}
