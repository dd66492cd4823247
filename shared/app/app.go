// Package app is runledger's composition root: the one place that turns a
// Config into the graph every entry runs (SDK clients -> store -> queue
// client -> scheduler service -> the HTTP API and the event, ticker and
// reconciler handlers). The Lambda entries (functions/*/main.go, through
// Boot and BootWorker), the embedded local stack (shared/devstack) and the
// bench (cmd/rlbench, through devstack) all build it here, so a setting or
// an addition reaches all of them at once.
//
// Additions to the stack (exec pools and other in-process workers,
// executors and their evidence providers, metrics, the dashboard and other
// pages) plug in as Parts: one Part value in one place.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/api"
	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/tracing"
)

// Clients builds the SDK clients of the graph. *emulator.Env is one (the
// local stack's emulators or configured endpoints); SDK is the one the
// Lambda entries use.
type Clients interface {
	DynamoDBClient(optFns ...func(*dynamodb.Options)) *dynamodb.Client
	SQSClient(optFns ...func(*sqs.Options)) *sqs.Client
}

// SDK builds clients from an SDK configuration: endpoints, region and
// credentials come from the SDK's own settings (AWS_ENDPOINT_URL and its
// per-service forms, AWS_REGION).
type SDK struct{ Config aws.Config }

// DynamoDBClient returns a DynamoDB client of the configuration.
func (s SDK) DynamoDBClient(optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.NewFromConfig(s.Config, optFns...)
}

// SQSClient returns an SQS client of the configuration.
func (s SDK) SQSClient(optFns ...func(*sqs.Options)) *sqs.Client {
	return sqs.NewFromConfig(s.Config, optFns...)
}

// Config is everything the graph is built from. Clients and Table (or
// Provision) are required; zero values of the rest take the defaults their
// comments name.
type Config struct {
	// Clients builds the DynamoDB and SQS clients.
	Clients Clients
	// DynamoDBOptions and SQSOptions run on every client the graph builds,
	// after the Clients' own settings (the local stack's request
	// counters, the bench's capacity meter).
	DynamoDBOptions []func(*dynamodb.Options)
	SQSOptions      []func(*sqs.Options)

	// Table is the DynamoDB table.
	Table string
	// Pools maps each worker pool to its dispatch queue URL.
	Pools map[string]string
	// EventsQueueURL receives worker completions and process leases.
	EventsQueueURL string
	// DelayQueueURL carries precise short timers ("" leaves timers to the
	// ticker's scan).
	DelayQueueURL string
	// TriggerQueueARN is the queue whose events start runs (the stack's
	// trigger queue, with EventTriggers); a trigger event from any other
	// queue is refused. "": no queue starts runs. TriggerQueueURL is that
	// queue for the local stack's poller; the Lambda entries need none.
	TriggerQueueARN string
	TriggerQueueURL string
	// Executors run tasks outside the queues, beside the Parts'; Allowed
	// is what job definitions may name for them (RUNLEDGER_EXECUTORS_ALLOWED
	// in AWS, from the CDK props), beside the Parts'.
	Executors []scheduler.Executor
	Allowed   jobspec.Allowed
	// Provision, if set, makes New create the table and queues it names
	// when they are missing and fill Table, Pools and the queue settings
	// from them: the local stack provisions, the Lambda entries never do
	// (the CDK stack did).
	Provision *Provision

	// Retention is how long a finished run of a job that sets no
	// retention is kept before TTL removes all of it (default: the
	// store's, ledger.DefaultRunRetention).
	Retention time.Duration
	// CapacityReports receives the capacity of the store's writes (the
	// bench's cost scenario); nil asks for none.
	CapacityReports func(store.CapacityReport)
	// Now is the clock of the store, the scheduler and the worker-lease
	// evidence (default time.Now).
	Now func() time.Time
	// MaxClockSkew is the scheduler's allowance for worker clocks
	// (default scheduler.DefaultMaxClockSkew).
	MaxClockSkew time.Duration
	// TickerPeriod is how often the ticker function runs (default
	// scheduler.DefaultTickerPeriod): a slot it first sees more than two
	// periods (at least 60 s) late is missed and caught up.
	TickerPeriod time.Duration
	// Metrics receives the scheduler's CloudWatch embedded-metric-format
	// lines (default: discarded; the Lambda entries pass stdout).
	Metrics io.Writer
	// NoticeBus is the EventBridge bus the Lambda entries publish the
	// scheduler's notices to (Boot adds the publisher's Part); "" publishes
	// none.
	NoticeBus string
	// NoticeLog, if set, is what GET /v1/events serves (the local stack's
	// kept notices).
	NoticeLog api.NoticeLog
	// Logger (default: discarded).
	Logger *slog.Logger
	// OTLPEndpoint, if set, is the OTLP/HTTP collector the spans of runs
	// and attempts are exported to (RUNLEDGER_OTLP_ENDPOINT,
	// shared/tracing); "": none are.
	OTLPEndpoint string

	// Auth and APIKey configure the HTTP API (default auth: the API key,
	// which is then required).
	Auth   api.Auth
	APIKey string

	// Parts are the additions to the stack, in order.
	Parts []Part
}

// Provision names the resources the local stack creates.
type Provision struct {
	// Name is the table's name and the queues' prefix: <Name>-events,
	// <Name>-delay, <Name>-trigger and <Name>-pool-<pool>.
	Name string
	// Pools get a dispatch queue each, beside those the Parts ask for.
	Pools []string
}

// App is the built graph.
type App struct {
	// Config is the configuration with defaults applied and, under
	// Provision, the created resources filled in.
	Config   Config
	DynamoDB *dynamodb.Client
	SQS      *sqs.Client
	Store    *store.Store
	Queue    *queue.Client
	Service  *scheduler.Service
	// Evidence is what the reconciler consults for LOST instances, in
	// order: the worker leases', then the Parts'.
	Evidence []scheduler.EvidenceProvider
	// Spans exports the spans of runs and attempts (nil without
	// Config.OTLPEndpoint); Flush and Close send what it holds.
	Spans *tracing.Exporter
}

// ErrConfig is wrapped by every error that a missing or malformed setting
// causes.
var ErrConfig = fault.New(fault.Invalid, "app: configuration")

func configErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// New builds the graph. Only under Config.Provision does it call AWS.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.defaults()
	a := &App{
		DynamoDB: cfg.Clients.DynamoDBClient(cfg.DynamoDBOptions...),
		SQS:      cfg.Clients.SQSClient(cfg.SQSOptions...),
	}
	a.Queue = queue.New(a.SQS)
	if cfg.Provision != nil {
		if err := a.provision(ctx, &cfg); err != nil {
			return nil, err
		}
	}
	a.Store = store.New(a.DynamoDB, cfg.Table, cfg.storeOptions()...)
	a.Evidence = []scheduler.EvidenceProvider{scheduler.WorkerLeaseEvidence{Store: a.Store, Now: cfg.Now}}
	for _, p := range cfg.Parts {
		if p.Evidence != nil {
			a.Evidence = append(a.Evidence, p.Evidence(a.Store)...)
		}
	}
	// The composition root builds the one limiter turn registry of this
	// process.
	sc := cfg.scheduler(a.Evidence)
	sc.Turns = ledger.NewTurns()
	if cfg.OTLPEndpoint != "" {
		exp, err := tracing.New(ctx, tracing.Config{Endpoint: cfg.OTLPEndpoint, Runs: a.Store, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		a.Spans, sc.Spans = exp, exp
	}
	svc, err := scheduler.New(a.Store, a.Queue, sc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	a.Service = svc
	a.Config = cfg
	return a, nil
}

// scheduler is the scheduler's configuration of c, consulting evidence.
func (c *Config) scheduler(evidence []scheduler.EvidenceProvider) scheduler.Config {
	executors, allowed := c.executors()
	return scheduler.Config{
		Pools: c.Pools, EventsQueueURL: c.EventsQueueURL, DelayQueueURL: c.DelayQueueURL, TriggerQueueARN: c.TriggerQueueARN,
		Now: c.Now, Evidence: evidence, Executors: executors, Allowed: allowed,
		MaxClockSkew: c.MaxClockSkew, TickerPeriod: c.TickerPeriod, Metrics: c.metrics(), Logger: c.Logger,
		Notices: c.notices(), Moved: c.moved(), RunEnded: c.runEnded(),
	}
}

func (c *Config) check() error {
	if c.Clients == nil {
		return configErrorf("Clients is required (the SDK configuration or the emulators)")
	}
	if c.Provision != nil {
		if c.Provision.Name == "" {
			return configErrorf("Provision.Name is required (it names the table and the queues)")
		}
		if c.Table != "" || len(c.Pools) > 0 || c.EventsQueueURL != "" || c.DelayQueueURL != "" || c.TriggerQueueARN != "" || c.TriggerQueueURL != "" {
			return configErrorf("Provision fills Table, Pools and the queue URLs: set them or Provision, not both")
		}
	} else if c.Table == "" {
		return configErrorf("Table is required")
	}
	if err := ledger.CheckRetention(c.Retention); err != nil {
		return configErrorf("Retention: %s", err)
	}
	seen := map[string]bool{}
	for i, p := range c.Parts {
		if p.Name == "" {
			return configErrorf("Parts[%d] has no name", i)
		}
		if seen[p.Name] {
			return configErrorf("two parts are named %q", p.Name)
		}
		seen[p.Name] = true
	}
	// The scheduler's own settings are its to judge, here before
	// Provision creates anything (the pools and queues it fills are not
	// yet set).
	if err := c.scheduler(nil).Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// executors lists Config's executors and the Parts', and what they allow.
func (c *Config) executors() ([]scheduler.Executor, jobspec.Allowed) {
	out, allowed := slices.Clone(c.Executors), c.Allowed
	for _, p := range c.Parts {
		out = append(out, p.Executors...)
		allowed = allowed.Merge(p.Allowed)
	}
	return out, allowed
}

func (c *Config) defaults() {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = scheduler.DefaultMaxClockSkew
	}
	if c.TickerPeriod == 0 {
		c.TickerPeriod = scheduler.DefaultTickerPeriod
	}
	if c.Metrics == nil {
		c.Metrics = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	if c.Auth == "" {
		c.Auth = api.AuthAPIKey
	}
}

func (c *Config) storeOptions() []store.Option {
	opts := []store.Option{store.WithClock(c.Now), store.WithLogger(c.Logger)}
	if c.Retention > 0 {
		opts = append(opts, store.WithRunRetention(c.Retention))
	}
	if c.CapacityReports != nil {
		opts = append(opts, store.WithCapacityReports(c.CapacityReports))
	}
	if c.DelayQueueURL == "" {
		// No delay message carries a short timer: the index holds them all.
		opts = append(opts, store.WithTimerHorizon(ledger.IndexEveryTimer))
	}
	return opts
}

// Close sends the spans still held and stops their exporter (the local
// stack's Stop); a Lambda entry flushes them before each invocation
// returns instead (Boot).
func (a *App) Close(ctx context.Context) error {
	if a.Spans == nil {
		return nil
	}
	return a.Spans.Shutdown(ctx)
}

// HTTP builds the HTTP API with the Parts' routes beside it. Only the api
// entry and the local stack serve HTTP, so only they need an API key.
func (a *App) HTTP() (http.Handler, error) {
	h, err := api.New(a.Service, api.Config{Auth: a.Config.Auth, APIKey: a.Config.APIKey, Logger: a.Config.Logger, Notices: a.Config.NoticeLog})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	m, err := a.mount(h)
	if err != nil {
		return nil, err
	}
	return a.flushing(m), nil
}

// HandleEvents is the events function: worker completions, process leases
// and precise timers from the events and delay queues, and the trigger
// queue's events. It hands the batch's records to the service as messages
// (scheduler.Service.HandleMessages) and answers the ones the service
// asks to see again as the batch's item failures, which SQS redelivers.
func (a *App) HandleEvents(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	defer a.Flush(ctx)
	return batchItemFailures(a.Service.HandleMessages(ctx, sqsMessages(ev))), nil
}

// sqsMessages are the records of an SQS batch as the service's messages.
func sqsMessages(ev events.SQSEvent) []scheduler.QueueMessage {
	msgs := make([]scheduler.QueueMessage, len(ev.Records))
	for i, rec := range ev.Records {
		msgs[i] = scheduler.QueueMessage{ID: rec.MessageId, QueueARN: rec.EventSourceARN, Body: rec.Body}
	}
	return msgs
}

// batchItemFailures is the answer to an SQS batch that asks for the
// messages of ids again (a Lambda event source mapping's
// ReportBatchItemFailures).
func batchItemFailures(ids []string) events.SQSEventResponse {
	var resp events.SQSEventResponse
	for _, id := range ids {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
	}
	return resp
}

// Tick is the ticker function: one pass over cron and one-off slots, due
// dispatches and retries, run backstops.
func (a *App) Tick(ctx context.Context, _ events.EventBridgeEvent) error {
	st, err := a.Service.Tick(ctx)
	a.logPass(ctx, "ticker", st)
	a.Flush(ctx)
	return err
}

// Reconcile is the reconciler function: one pass over lease expiry, queue
// and cancel timeouts, LOST resolution on evidence.
func (a *App) Reconcile(ctx context.Context, _ events.EventBridgeEvent) error {
	st, err := a.Service.Reconcile(ctx)
	a.logPass(ctx, "reconciler", st)
	a.Flush(ctx)
	return err
}

func (a *App) logPass(ctx context.Context, function string, st scheduler.PassStats) {
	a.Config.Logger.InfoContext(ctx, "pass", "function", function, "due", st.Due, "handled", st.Handled,
		"errors", st.Errors, "stopped", st.Stopped, "duration_ms", st.Duration.Milliseconds())
}
