package main

import (
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/runledger/runledger/client"
)

func newEventsCmd() *cobra.Command {
	var api apiFlags
	var since string
	var limit int
	cmd := &cobra.Command{
		Use:   "events",
		Short: "List the local stack's notices (runs ended, tasks failed or lost, deadlines missed), oldest first",
		Long: `events lists what the local stack keeps of its notices (GET /v1/events,
the last 1,000): runs that ended, tasks that failed or went LOST, runs
unfinished at their deadline. A deployed stack publishes them to its
EventBridge bus instead (docs/deploy.md shows a rule that sends "run
failed" to SNS). "events put" delivers trigger events, which start runs.`,
		Example: "  runledger events\n  runledger events --since 10m\n  runledger events --since 2026-12-01T00:00:00Z -o json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usageErrorf("--limit %d: want 1..1000", limit)
			}
			from, err := sinceFlag(since, time.Now())
			if err != nil {
				return err
			}
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			page, err := c.ListNotices(cmd.Context(), client.NoticeFilter{Since: from, Page: client.Page{Limit: limit}})
			if err != nil {
				return err
			}
			if api.json() {
				return printJSON(cmd.OutOrStdout(), page)
			}
			t := newTable(cmd.OutOrStdout(), "TIME", "TYPE", "JOB", "RUN", "TASK", "ATTEMPT", "STATE", "REASON")
			for _, n := range page.Notices {
				attempt := ""
				if n.Attempt > 0 {
					attempt = strconv.Itoa(n.Attempt)
				}
				t.row(when(n.Time), string(n.Type), n.Job, n.Run, n.Task, attempt, n.State, n.Reason)
			}
			return t.flush()
		},
	}
	api.register(cmd.Flags())
	cmd.Flags().StringVar(&since, "since", "", "only notices at or after this time: RFC 3339, or a duration back from now (10m)")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many notices")
	cmd.AddCommand(newEventsPutCmd())
	return cmd
}

// sinceFlag reads --since: an RFC 3339 time, or a Go duration counted back
// from now; "" is every kept notice.
func sinceFlag(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usageErrorf("--since %q: want an RFC 3339 time or a duration such as 10m", s)
	}
	return t, nil
}
