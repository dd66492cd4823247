// Command reconciler is the EventBridge-scheduled Lambda of the reconciler: lease expiry, queue and cancel timeouts, LOST resolution on evidence.
// One pass per invocation; it stops before the Lambda deadline. Wiring only.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/runledger/runledger/shared/scheduler"
)

func main() {
	svc, log, err := scheduler.Boot(context.Background())
	if err != nil {
		log.Error("configure", "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(func(ctx context.Context, _ events.EventBridgeEvent) error {
		st, err := svc.Reconcile(ctx)
		log.InfoContext(ctx, "pass", "function", "reconciler", "due", st.Due, "handled", st.Handled, "errors", st.Errors, "stopped", st.Stopped, "duration_ms", st.Duration.Milliseconds())
		return err
	})
}
