// Command events is the SQS consumer of the events and delay queues: worker
// completions, process leases and precise timers, with partial batch
// failures for transient errors only. Wiring only.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/runledger/runledger/shared/scheduler"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	ctx := context.Background()
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Error("load AWS config", "error", err.Error())
		os.Exit(1)
	}
	svc, err := scheduler.FromEnv(ctx, awsCfg, log)
	if err != nil {
		log.Error("configure", "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(svc.HandleEvents)
}
