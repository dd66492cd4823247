package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/store"
)

// FromEnv builds the Service a Lambda function runs, from the environment
// that docs/wiring.md names (RUNLEDGER_TABLE, RUNLEDGER_POOL_QUEUES,
// RUNLEDGER_EVENTS_QUEUE_URL, RUNLEDGER_DELAY_QUEUE_URL,
// RUNLEDGER_HISTORY_RETENTION) and the SDK configuration. Endpoints come from
// the SDK's own settings (AWS_ENDPOINT_URL and its per-service forms).
func FromEnv(ctx context.Context, awsCfg aws.Config, logger *slog.Logger) (*Service, error) {
	table := os.Getenv("RUNLEDGER_TABLE")
	if table == "" {
		return nil, fmt.Errorf("environment: RUNLEDGER_TABLE is empty")
	}
	pools := map[string]string{}
	if v := os.Getenv("RUNLEDGER_POOL_QUEUES"); v != "" {
		if err := json.Unmarshal([]byte(v), &pools); err != nil {
			return nil, fmt.Errorf("environment: RUNLEDGER_POOL_QUEUES is not a JSON object of pool -> queue URL: %w", err)
		}
	}
	opts := []store.Option{store.WithLogger(logger)}
	if v := os.Getenv("RUNLEDGER_HISTORY_RETENTION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("environment: RUNLEDGER_HISTORY_RETENTION %q is not a positive duration", v)
		}
		opts = append(opts, store.WithHistoryRetention(d))
	}
	st := store.New(dynamodb.NewFromConfig(awsCfg), table, opts...)
	return New(st, queue.New(sqs.NewFromConfig(awsCfg)), Config{
		Pools:          pools,
		EventsQueueURL: os.Getenv("RUNLEDGER_EVENTS_QUEUE_URL"),
		DelayQueueURL:  os.Getenv("RUNLEDGER_DELAY_QUEUE_URL"),
		Evidence:       []EvidenceProvider{WorkerLeaseEvidence{Store: st, Now: time.Now}},
		Metrics:        os.Stdout,
		Logger:         logger,
	}), nil
}
