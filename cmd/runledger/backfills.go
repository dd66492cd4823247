package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

type backfillFlags struct {
	from, to   string
	maxActive  int
	params     []string
	paramsJSON string
	wait       bool
	follow     followFlags
}

func newJobsBackfillCmd(api *apiFlags) *cobra.Command {
	var f backfillFlags
	cmd := &cobra.Command{
		Use:   "backfill JOB --from TIME --to TIME",
		Short: "Run a job once per slot of its schedule in [from, to), at most --max-active at once",
		Long: `backfill starts a backfill: one run per fire time of the job's schedule in
[--from, --to) (at most 1,000), oldest first, at most --max-active unfinished
at once. A slot the job already has a run for (any trigger) is counted as
existing and not run again. With --wait it follows the backfill, one line
each time its counts change, and exits 0 when it SUCCEEDED and 1 when it
ended otherwise.`,
		Example: `  runledger jobs backfill nightly-report --from 2026-01-01T00:00:00Z --to 2026-02-01T00:00:00Z
  runledger jobs backfill etl --from 2026-01-01T00:00:00Z --to 2026-01-08T00:00:00Z --max-active 3 --param mode=replay --wait`,
		Args: exactArgs("JOB"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := f.request()
			if err != nil {
				return err
			}
			if f.wait {
				if err := f.follow.check(); err != nil {
					return err
				}
			}
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			b, err := c.Backfill(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if f.wait {
				return followBackfill(cmd, c, api, b, f.follow)
			}
			return printBackfills(cmd.OutOrStdout(), api, b)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "the range's start, RFC 3339, included (required)")
	fl.StringVar(&f.to, "to", "", "the range's end, RFC 3339, excluded (required)")
	fl.IntVar(&f.maxActive, "max-active", 1, "at most this many of the backfill's runs unfinished at once (1..100)")
	fl.StringArrayVar(&f.params, "param", nil, "a run parameter KEY=VALUE (a string); repeatable")
	fl.StringVar(&f.paramsJSON, "params", "", "the runs' parameters as a JSON object")
	fl.BoolVar(&f.wait, "wait", false, "follow the backfill until it ends; exit 1 unless it SUCCEEDED")
	f.follow.register(fl)
	return cmd
}

// request builds the client's BackfillRequest from the flags.
func (f backfillFlags) request() (client.BackfillRequest, error) {
	var req client.BackfillRequest
	for _, t := range []struct {
		flag, v string
		out     *time.Time
	}{{"--from", f.from, &req.From}, {"--to", f.to, &req.To}} {
		if t.v == "" {
			return req, usageErrorf("%s is required", t.flag)
		}
		v, err := protocol.ParseTime(t.v)
		if err != nil {
			return req, usageErrorf("%s %q: want an RFC 3339 time", t.flag, t.v)
		}
		*t.out = v
	}
	if f.maxActive < 1 || f.maxActive > 100 {
		return req, usageErrorf("--max-active %d: want 1..100", f.maxActive)
	}
	req.MaxActive = f.maxActive
	// The params flags mean what they mean for trigger.
	t, err := triggerFlags{params: f.params, paramsJSON: f.paramsJSON}.trigger()
	if err != nil {
		return req, err
	}
	req.Params = t.Params
	return req, nil
}

// followBackfill polls a backfill until it ends, a line each time its
// counts change, and exits 1 unless it SUCCEEDED.
func followBackfill(cmd *cobra.Command, c *client.Client, api *apiFlags, b client.Backfill, f followFlags) error {
	ctx, cancel := f.context(cmd)
	defer cancel()
	out := cmd.OutOrStdout()
	last := ""
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		if line := progress(b); line != last && !api.json() {
			fmt.Fprintln(out, line)
			last = line
		}
		if !b.EndedAt.IsZero() {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("follow backfill %s: %w", b.ID, context.Cause(ctx))
		case <-t.C:
		}
		next, err := c.GetBackfill(ctx, b.ID)
		if err != nil {
			return err
		}
		b = next
	}
	if api.json() {
		if err := printJSON(out, map[string]any{"backfill": b}); err != nil {
			return err
		}
	}
	if b.State != statemodel.BackfillSucceeded {
		return &exitError{code: exitFailure}
	}
	return nil
}

func progress(b client.Backfill) string {
	n := b.Counts
	return fmt.Sprintf("backfill %s of job %s: %s, %d slots (%d existing): pending %d, running %d, succeeded %d, failed %d, cancelled %d",
		b.ID, b.Job, b.State, b.Slots, b.Existing, n.Pending, n.Running, n.Succeeded, n.Failed, n.Cancelled)
}

// printBackfills writes backfills as a table, or one as {"backfill": ...}
// and several as {"backfills": [...]} in JSON.
func printBackfills(w io.Writer, api *apiFlags, bs ...client.Backfill) error {
	if api.json() {
		if len(bs) == 1 {
			return printJSON(w, map[string]any{"backfill": bs[0]})
		}
		return printJSON(w, map[string]any{"backfills": bs})
	}
	t := newTable(w, "BACKFILL", "JOB", "STATE", "FROM", "TO", "SLOTS", "EXISTING", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "MAX ACTIVE")
	for _, b := range bs {
		n := b.Counts
		t.row(b.ID, b.Job, string(b.State), when(b.From), when(b.To), fmt.Sprint(b.Slots), fmt.Sprint(b.Existing),
			fmt.Sprint(n.Pending), fmt.Sprint(n.Running), fmt.Sprint(n.Succeeded), fmt.Sprint(n.Failed), fmt.Sprint(n.Cancelled), fmt.Sprint(b.MaxActive))
	}
	return t.flush()
}

func newBackfillsCmd() *cobra.Command {
	var api apiFlags
	cmd := &cobra.Command{
		Use:   "backfills",
		Short: "Read, list and cancel backfills",
		Example: `  runledger backfills list nightly-report
  runledger backfills get 01JH2Z3ZKX8Q6S1M4T7V9W0ABC
  runledger backfills cancel 01JH2Z3ZKX8Q6S1M4T7V9W0ABC`,
		Args: noArgs,
		RunE: showHelp,
	}
	api.register(cmd.PersistentFlags())
	cmd.AddCommand(newBackfillsGetCmd(&api), newBackfillsListCmd(&api), newBackfillsCancelCmd(&api))
	return cmd
}

func newBackfillsGetCmd(api *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "get BACKFILL",
		Short:   "Show a backfill's state and counts",
		Example: "  runledger backfills get 01JH2Z3ZKX8Q6S1M4T7V9W0ABC\n  runledger backfills get 01JH2Z3ZKX8Q6S1M4T7V9W0ABC -o json",
		Args:    exactArgs("BACKFILL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			b, err := c.GetBackfill(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printBackfills(cmd.OutOrStdout(), api, b)
		},
	}
}

func newBackfillsListCmd(api *apiFlags) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:     "list JOB",
		Short:   "List a job's backfills, newest first",
		Example: "  runledger backfills list nightly-report\n  runledger backfills list nightly-report --limit 5 -o json",
		Args:    exactArgs("JOB"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 500 {
				return usageErrorf("--limit %d: want 1..500", limit)
			}
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			page, err := c.ListBackfills(cmd.Context(), args[0], client.Page{Limit: limit})
			if err != nil {
				return err
			}
			if api.json() {
				return printJSON(cmd.OutOrStdout(), page)
			}
			return printBackfills(cmd.OutOrStdout(), api, page.Backfills...)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many backfills")
	return cmd
}

func newBackfillsCancelCmd(api *apiFlags) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:     "cancel BACKFILL",
		Short:   "Cancel a backfill: its unreleased slots are dropped and its unfinished runs cancelled",
		Example: `  runledger backfills cancel 01JH2Z3ZKX8Q6S1M4T7V9W0ABC --reason "wrong range"`,
		Args:    exactArgs("BACKFILL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			b, err := c.CancelBackfill(cmd.Context(), args[0], reason)
			if err != nil {
				return err
			}
			return printBackfills(cmd.OutOrStdout(), api, b)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why; kept in the history of the runs it cancels")
	return cmd
}
