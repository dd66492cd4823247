// Command events is the SQS consumer of the events and delay queues: worker
// completions, process leases and precise timers, with partial batch
// failures for transient errors only. Wiring only.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/runledger/runledger/shared/scheduler"
)

func main() {
	svc, log, err := scheduler.Boot(context.Background())
	if err != nil {
		log.Error("configure", "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(svc.HandleEvents)
}
