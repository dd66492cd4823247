// Command worker is the example worker Lambda of a pool's dispatch queue,
// built with the worker SDK around worker.DemoHandler. Wiring only: the
// configuration comes from the environment (docs/wiring.md), the SDK
// clients are built once per execution environment, and every invocation
// goes to Worker.HandleSQS.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/worker"
)

// batchConcurrency lets every record of the largest SQS batch run at once:
// each attempt mostly waits on I/O (claim, heartbeats, the handler).
const batchConcurrency = 10

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	slog.SetDefault(log)
	w, err := setup(context.Background(), log)
	if err != nil {
		log.Error("worker setup failed", "err", err)
		os.Exit(1)
	}
	lambda.Start(w.HandleSQS)
}

func setup(ctx context.Context, log *slog.Logger) (*worker.Worker, error) {
	env := map[string]string{}
	for _, k := range []string{"RUNLEDGER_API_URL", "RUNLEDGER_POOL", "RUNLEDGER_EVENTS_QUEUE_URL"} {
		v := os.Getenv(k)
		if v == "" {
			return nil, fmt.Errorf("environment variable %s is empty", k)
		}
		env[k] = v
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load AWS SDK config: %w", err)
	}
	pool := env["RUNLEDGER_POOL"]
	name := workerName(pool)
	return worker.New(worker.Config{
		APIURL:         env["RUNLEDGER_API_URL"],
		EventsQueueURL: env["RUNLEDGER_EVENTS_QUEUE_URL"],
		Name:           name,
		Concurrency:    batchConcurrency,
		Queue:          queue.New(sqs.NewFromConfig(awsCfg)),
		HTTPClient:     &http.Client{Timeout: 30 * time.Second},
		Logger:         log.With("pool", pool),
	}, worker.DemoHandler)
}

// workerName must be unique among live processes: the reconciler keeps one
// lease per name. Concurrent Lambda execution environments share the
// function name, so the name adds the environment's own log stream id.
func workerName(pool string) string {
	fn := os.Getenv("AWS_LAMBDA_FUNCTION_NAME")
	if fn == "" {
		host, _ := os.Hostname()
		return "worker-" + pool + "-" + host
	}
	stream := os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME") // "2026/01/02/[$LATEST]0123abcd..."
	if i := strings.LastIndexByte(stream, ']'); i >= 0 {
		stream = stream[i+1:]
	}
	if stream == "" {
		return fn
	}
	return fn + "/" + stream
}
