package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/runledger/runledger/client"
)

// newRunsSignalCmd settles a waiting signal task: --approve or --reject.
func newRunsSignalCmd(api *apiFlags) *cobra.Command {
	var by, reason, eventID, output string
	var approve, reject bool
	cmd := &cobra.Command{
		Use:   "signal RUN TASK --approve|--reject [--reason TEXT] [--by NAME]",
		Short: "Approve or reject a signal task that waits for its signal",
		Long: "Settle a task whose executor is signal and that waits for its signal:\n" +
			"--approve makes it SUCCEEDED, --reject FAILED (its retry policy decides what follows).\n" +
			"--by names who decided (default: your user name) and is kept in the task's history.\n" +
			"--output is an approval's task output (JSON, at most 16 KiB): its downstream tasks get it as inputs.",
		Example: "  runledger runs signal 01JH2Z3ZKX8Q6S1M4T7V9W0ABC approve --approve --reason 'numbers checked'\n" +
			"  runledger runs signal 01JH2Z3ZKX8Q6S1M4T7V9W0ABC approve --reject --by ann --reason 'totals are off'",
		Args: exactArgs("RUN", "TASK"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if approve == reject {
				return usageErrorf("signal needs exactly one of --approve and --reject")
			}
			if by == "" {
				return usageErrorf("signal needs --by")
			}
			if output != "" && !json.Valid([]byte(output)) {
				return usageErrorf("signal --output must be one JSON value")
			}
			c, err := api.client(cmd)
			if err != nil {
				return err
			}
			req := client.SignalRequest{Outcome: client.SignalSucceeded, By: by, Reason: reason, EventID: eventID}
			if reject {
				req.Outcome = client.SignalFailed
			}
			if output != "" {
				req.Output = json.RawMessage(output)
			}
			d, err := c.Signal(cmd.Context(), args[0], args[1], req)
			if err != nil {
				return err
			}
			return printRunResult(cmd, api, d)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&by, "by", currentUser(), "who decides, kept in history")
	fl.StringVar(&reason, "reason", "", "why, kept in history")
	fl.BoolVar(&approve, "approve", false, "the task succeeded")
	fl.BoolVar(&reject, "reject", false, "the task failed")
	fl.StringVar(&output, "output", "", "the task's output as JSON, handed to its downstream tasks as inputs")
	fl.StringVar(&eventID, "event-id", "", "an id that makes the signal idempotent: the same id again keeps the first outcome")
	return cmd
}
