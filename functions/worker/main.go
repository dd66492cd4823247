// Command worker is the example worker Lambda of a pool's dispatch queue,
// built with the worker SDK around worker.DemoHandler. Wiring only: the
// configuration comes from the environment (docs/wiring.md) through the
// composition root (shared/app), the SDK clients are built once per
// execution environment, and every invocation goes to Worker.HandleSQS.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/worker"
)

func main() {
	w, log, err := app.BootWorker(context.Background(), worker.DemoHandler)
	if err != nil {
		log.Error("worker setup failed", "err", err)
		os.Exit(1)
	}
	lambda.Start(w.HandleSQS)
}
