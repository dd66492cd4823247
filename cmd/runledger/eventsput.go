package main

import (
	"github.com/spf13/cobra"

	"github.com/runledger/runledger/client"
)

func newEventsPutCmd() *cobra.Command {
	var api apiFlags
	var e client.PutEventsEntry
	cmd := &cobra.Command{
		Use:   "put",
		Short: "Deliver a trigger event: each job whose on_event matches it gets a run",
		Long: `events put delivers one trigger event as EventBridge's PutEvents would
(POST /v1/events/put). Each job with an on_event entry matching it gets
one run (trigger event) whose params are rendered from the event; the
event's id is printed. It is the local stack's ingress: a deployed stack
takes trigger events from the buses its stack listens to.`,
		Example: `  runledger events put --source shop --detail-type "Order Placed" --detail '{"order_id": "o-42"}'
  runledger events put --source shop --detail-type "Order Placed" --detail '{}' --time 2026-12-01T00:00:00Z -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if e.Source == "" || e.DetailType == "" {
				return usageErrorf("--source and --detail-type are required")
			}
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			answer, err := c.PutEvents(cmd.Context(), e)
			if err != nil {
				return err
			}
			if api.json() {
				return printJSON(cmd.OutOrStdout(), answer)
			}
			t := newTable(cmd.OutOrStdout(), "EVENT ID")
			for _, a := range answer.Entries {
				t.row(a.EventID)
			}
			return t.flush()
		},
	}
	api.register(cmd.Flags())
	cmd.Flags().StringVar(&e.Source, "source", "", "the event's source (required)")
	cmd.Flags().StringVar(&e.DetailType, "detail-type", "", "the event's detail-type (required)")
	cmd.Flags().StringVar(&e.Detail, "detail", "{}", "the event's detail: a JSON object")
	cmd.Flags().StringArrayVar(&e.Resources, "resource", nil, "a resource ARN of the event (repeatable)")
	cmd.Flags().StringVar(&e.Time, "time", "", "the event's time, RFC 3339 (default: now); it is the runs' logical time")
	return cmd
}
