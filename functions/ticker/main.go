// Command ticker is the EventBridge-scheduled Lambda of the ticker: cron and one-off slots, due dispatches and retries, run backstops.
// One pass per invocation; it stops before the Lambda deadline. Wiring only:
// the graph comes from the composition root (shared/app).
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
	lambda.Start(a.Tick)
}
