// Command events is the SQS consumer of the events and delay queues: worker
// completions, process leases and precise timers, with partial batch
// failures for transient errors only. Wiring only: the graph comes from the
// composition root (shared/app).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/runledger/runledger/shared/app"
)

func main() {
	a, log, err := app.Boot(context.Background())
	if err != nil {
		log.Error("configure", "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(a.HandleEvents)
}
