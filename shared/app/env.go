package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/runledger/runledger/shared/api"
	"github.com/runledger/runledger/shared/lambdaexec"
	"github.com/runledger/runledger/shared/notice"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/tracing"
	"github.com/runledger/runledger/shared/worker"
)

// FromEnv reads the scheduler functions' environment (docs/wiring.md:
// RUNLEDGER_TABLE, RUNLEDGER_POOL_QUEUES, RUNLEDGER_EVENTS_QUEUE_URL,
// RUNLEDGER_DELAY_QUEUE_URL, RUNLEDGER_HISTORY_RETENTION,
// RUNLEDGER_MAX_CLOCK_SKEW, RUNLEDGER_TICKER_PERIOD,
// RUNLEDGER_EXECUTORS_ALLOWED, RUNLEDGER_AUTH, RUNLEDGER_API_KEY,
// RUNLEDGER_EVENT_BUS, RUNLEDGER_TRIGGER_QUEUE_ARN) into a
// Config; Clients, Logger and Metrics are the caller's. getenv is
// os.Getenv outside tests.
func FromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{
		Table:          getenv("RUNLEDGER_TABLE"),
		EventsQueueURL: getenv("RUNLEDGER_EVENTS_QUEUE_URL"),
		DelayQueueURL:  getenv("RUNLEDGER_DELAY_QUEUE_URL"),
		Auth:           api.Auth(getenv("RUNLEDGER_AUTH")),
		APIKey:         getenv("RUNLEDGER_API_KEY"),
		NoticeBus:      getenv("RUNLEDGER_EVENT_BUS"),
		// Only the events function gets it (with EventTriggers).
		TriggerQueueARN: getenv("RUNLEDGER_TRIGGER_QUEUE_ARN"),
		OTLPEndpoint:    getenv(tracing.EnvEndpoint),
	}
	if cfg.Table == "" {
		return cfg, fmt.Errorf("environment: RUNLEDGER_TABLE is empty")
	}
	if v := getenv("RUNLEDGER_POOL_QUEUES"); v != "" {
		if err := json.Unmarshal([]byte(v), &cfg.Pools); err != nil {
			return cfg, fmt.Errorf("environment: RUNLEDGER_POOL_QUEUES is not a JSON object of pool -> queue URL: %w", err)
		}
	}
	if v := getenv("RUNLEDGER_HISTORY_RETENTION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("environment: RUNLEDGER_HISTORY_RETENTION %q is not a positive duration", v)
		}
		cfg.Retention = d
	}
	if v := getenv("RUNLEDGER_EXECUTORS_ALLOWED"); v != "" {
		if err := json.Unmarshal([]byte(v), &cfg.Allowed); err != nil {
			return cfg, fmt.Errorf(`environment: RUNLEDGER_EXECUTORS_ALLOWED is not a JSON object {"lambda_functions": [...], "ecs_clusters": [...], "ecs_task_definitions": [...]}: %w`, err)
		}
	}
	if v := getenv("RUNLEDGER_TICKER_PERIOD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			return cfg, fmt.Errorf("environment: RUNLEDGER_TICKER_PERIOD %q is not a duration of at least 1s", v)
		}
		cfg.TickerPeriod = d
	}
	var err error
	cfg.MaxClockSkew, err = MaxClockSkewFromEnv(getenv)
	return cfg, err
}

// MaxClockSkewFromEnv reads RUNLEDGER_MAX_CLOCK_SKEW (a Go duration, at
// least 1ms); unset, it is scheduler.DefaultMaxClockSkew. The local stack
// reads it too.
func MaxClockSkewFromEnv(getenv func(string) string) (time.Duration, error) {
	v := getenv("RUNLEDGER_MAX_CLOCK_SKEW")
	if v == "" {
		return scheduler.DefaultMaxClockSkew, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Millisecond {
		return 0, fmt.Errorf("environment: RUNLEDGER_MAX_CLOCK_SKEW %q is not a duration of at least 1ms", v)
	}
	return d, nil
}

// lambdaLogger is every Lambda entry's logger: JSON on stdout.
func lambdaLogger() *slog.Logger { return slog.New(slog.NewJSONHandler(os.Stdout, nil)) }

// Boot is what every scheduler Lambda entry (api, events, ticker,
// reconciler) does once per execution environment: a JSON logger on
// stdout, the SDK configuration, and the graph from the environment and
// parts, with the scheduler's metrics on stdout. An error is a deployment
// mistake: the entry exits, and Lambda reports the failed init.
func Boot(ctx context.Context, parts ...Part) (*App, *slog.Logger, error) {
	log := lambdaLogger()
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, log, fmt.Errorf("load AWS config: %w", err)
	}
	cfg, err := FromEnv(os.Getenv)
	if err != nil {
		return nil, log, err
	}
	cfg.Clients, cfg.Logger, cfg.Metrics, cfg.Parts = SDK{Config: awsCfg}, log, os.Stdout, parts
	if len(cfg.Allowed.LambdaFunctions) > 0 {
		// The stack lets jobs invoke functions: the lambda executor.
		cfg.Executors = append(cfg.Executors, lambdaexec.Executor{Invoker: lambdaexec.Client{API: lambda.NewFromConfig(awsCfg)}})
	}
	ecsExecutors, err := awsECS(awsCfg, cfg.Allowed, os.Getenv)
	if err != nil {
		return nil, log, err
	}
	cfg.Executors = append(cfg.Executors, ecsExecutors...)
	if cfg.NoticeBus != "" {
		cfg.Parts = append(cfg.Parts, NoticeBusPart(eventbridge.NewFromConfig(awsCfg), cfg.NoticeBus, log))
	}
	a, err := New(ctx, cfg)
	if err == nil && a.Spans != nil {
		// The process is frozen between invocations: each one sends the
		// spans it ended before it returns, as it does its notices.
		a.Config.Parts = append(a.Config.Parts, Part{Name: "spans", Flush: a.Spans.Flush})
	}
	return a, log, err
}

// NoticeBusPart publishes the scheduler's notices to an EventBridge bus
// through a bounded asynchronous publisher (notice.Publisher): a
// transition never waits on EventBridge, and each invocation flushes what
// it raised before it returns.
func NoticeBusPart(client notice.PutEventsAPI, bus string, log *slog.Logger) Part {
	pub := notice.NewPublisher(notice.EventBridge{Client: client, Bus: bus}, notice.Options{Logger: log})
	return Part{Name: "eventbridge", Notices: pub, Flush: pub.Flush}
}

// lambdaBatchConcurrency lets every record of the largest SQS batch run at
// once: each attempt mostly waits on I/O (claim, heartbeats, the handler).
const lambdaBatchConcurrency = 10

// BootWorker is what a worker Lambda entry does once per execution
// environment: a JSON logger on stdout (also slog's default), the SDK
// configuration, and a worker of RUNLEDGER_POOL that calls the API at
// RUNLEDGER_API_URL and reports to RUNLEDGER_EVENTS_QUEUE_URL, running h.
// The Lambda's event source receives the pool's messages, so the worker
// only handles batches (Worker.HandleSQS).
func BootWorker(ctx context.Context, h worker.Handler) (*worker.Worker, *slog.Logger, error) {
	log := lambdaLogger()
	slog.SetDefault(log)
	env := map[string]string{}
	for _, k := range []string{"RUNLEDGER_API_URL", "RUNLEDGER_POOL", "RUNLEDGER_EVENTS_QUEUE_URL"} {
		v := os.Getenv(k)
		if v == "" {
			return nil, log, fmt.Errorf("environment variable %s is empty", k)
		}
		env[k] = v
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, log, fmt.Errorf("load AWS SDK config: %w", err)
	}
	pool := env["RUNLEDGER_POOL"]
	// The Lambda's event source receives the pool's messages: the worker
	// needs no pool queue URL, and polls nothing.
	w := Worker{Pool: pool, Name: lambdaWorkerName(pool, os.Getenv), Concurrency: lambdaBatchConcurrency, Handler: h}
	wk, err := w.New(Local{
		APIURL: env["RUNLEDGER_API_URL"], Queues: map[string]string{QueueEvents: env["RUNLEDGER_EVENTS_QUEUE_URL"]},
		Queue: queue.New(SDK{Config: awsCfg}.SQSClient()), Logger: log.With("pool", pool),
	})
	return wk, log, err
}

// lambdaWorkerName must be unique among live processes: the reconciler
// keeps one lease per name. Concurrent Lambda execution environments share
// the function name, so the name adds the environment's own log stream id.
func lambdaWorkerName(pool string, getenv func(string) string) string {
	fn := getenv("AWS_LAMBDA_FUNCTION_NAME")
	if fn == "" {
		host, _ := os.Hostname()
		return "worker-" + pool + "-" + host
	}
	stream := getenv("AWS_LAMBDA_LOG_STREAM_NAME") // "2026/01/02/[$LATEST]0123abcd..."
	if i := strings.LastIndexByte(stream, ']'); i >= 0 {
		stream = stream[i+1:]
	}
	if stream == "" {
		return fn
	}
	return fn + "/" + stream
}
