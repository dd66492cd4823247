package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/store"
)

// FromEnv builds the Service a Lambda function runs, from the environment
// that docs/wiring.md names (RUNLEDGER_TABLE, RUNLEDGER_POOL_QUEUES,
// RUNLEDGER_EVENTS_QUEUE_URL, RUNLEDGER_DELAY_QUEUE_URL,
// RUNLEDGER_HISTORY_RETENTION, RUNLEDGER_MAX_CLOCK_SKEW) and the SDK
// configuration. Endpoints come from
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
	skew, err := MaxClockSkewFromEnv()
	if err != nil {
		return nil, err
	}
	st := store.New(dynamodb.NewFromConfig(awsCfg), table, opts...)
	return New(st, queue.New(sqs.NewFromConfig(awsCfg)), Config{
		Pools:          pools,
		EventsQueueURL: os.Getenv("RUNLEDGER_EVENTS_QUEUE_URL"),
		DelayQueueURL:  os.Getenv("RUNLEDGER_DELAY_QUEUE_URL"),
		Evidence:       []EvidenceProvider{WorkerLeaseEvidence{Store: st, Now: time.Now}},
		MaxClockSkew:   skew,
		Metrics:        os.Stdout,
		Logger:         logger,
	}), nil
}

// MaxClockSkewFromEnv reads RUNLEDGER_MAX_CLOCK_SKEW (a Go duration,
// at least 1ms); unset, it is DefaultMaxClockSkew.
func MaxClockSkewFromEnv() (time.Duration, error) {
	v := os.Getenv("RUNLEDGER_MAX_CLOCK_SKEW")
	if v == "" {
		return DefaultMaxClockSkew, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Millisecond {
		return 0, fmt.Errorf("environment: RUNLEDGER_MAX_CLOCK_SKEW %q is not a duration of at least 1ms", v)
	}
	return d, nil
}

// Boot is what every scheduler Lambda entry does once per execution
// environment: a JSON logger on stdout, the SDK configuration, and the
// Service from the environment. An error is a deployment mistake: the
// entry exits, and Lambda reports the failed init.
func Boot(ctx context.Context) (*Service, *slog.Logger, error) {
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, log, fmt.Errorf("load AWS config: %w", err)
	}
	svc, err := FromEnv(ctx, awsCfg, log)
	return svc, log, err
}
