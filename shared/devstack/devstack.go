// Package devstack is the embedded local stack: the very handlers that run
// in Lambda, run in-process behind local adapters (SQS pollers with
// Lambda's batch semantics, schedule tickers, an HTTP server through the API
// Gateway v2 adapter) against real DynamoDB Local and a real SQS emulator.
// `make run` starts one; the end-to-end tests start and restart them.
// Nothing lives only in memory: a stack started again on the same table and
// queues carries on where the last one stopped.
package devstack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/dashboard"
	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/local"
	"github.com/runledger/runledger/shared/localinfo"
	"github.com/runledger/runledger/shared/metricspage"
	"github.com/runledger/runledger/shared/notice"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/tracing"
	"github.com/runledger/runledger/shared/worker"
)

// Options configure a stack. Zero values take the documented defaults.
type Options struct {
	// Env reaches the emulators (or configured endpoints). Nil: Start
	// starts them and Stop stops them.
	Env *emulator.Env
	// DataDir keeps DynamoDB Local's data on disk when Start starts the
	// emulators ("" keeps it in memory).
	DataDir string
	// Name prefixes the table and queue names (default "runledger").
	Name string
	// Pools are the worker pools (default RUNLEDGER_POOLS, else default,demo).
	Pools []string
	// ListenAddr of the API (default 127.0.0.1:8080; ":0" ports for tests).
	ListenAddr string
	// APIKey for the API (default RUNLEDGER_API_KEY, else a random one).
	APIKey string
	// TickInterval of the ticker and the reconciler (default 2 s). It is
	// the scheduler's ticker period too: a slot the ticker first sees more
	// than two of them (at least 60 s) late is missed and caught up.
	TickInterval time.Duration
	// DemoWorker runs a demo worker pool for DemoPool (default pool "demo").
	DemoWorker bool
	DemoPool   string
	// Parts are the stack's additions (app.Part): in-process workers
	// such as the command-running worker of `runledger local --exec-pool`
	// (app.Worker.Part), evidence providers, routes beside the API. Their
	// pools are created and served like Pools.
	Parts []app.Part
	// Now is the scheduler's clock (default time.Now).
	Now func() time.Time
	// MaxClockSkew is the scheduler's allowance for worker clocks
	// (default RUNLEDGER_MAX_CLOCK_SKEW, else 30 s).
	MaxClockSkew time.Duration
	// Pollers' long-polling wait (default 1 s, so Stop is prompt).
	Wait   time.Duration
	Logger *slog.Logger
	// Counters count invocations and requests (default: a new set).
	Counters *local.Counters
	// DynamoDBOptions and SQSOptions run on the stack's clients after its
	// counters (the bench's capacity meter).
	DynamoDBOptions []func(*dynamodb.Options)
	SQSOptions      []func(*sqs.Options)
	// CapacityReports receives the capacity of the store's writes.
	CapacityReports func(store.CapacityReport)
	// Metrics receives the scheduler's embedded-metric-format lines, as a
	// Lambda entry's stdout does (default: discarded; the bench counts
	// their bytes).
	Metrics io.Writer
	// OTLPEndpoint is the OTLP/HTTP collector the spans of runs and
	// attempts go to (default RUNLEDGER_OTLP_ENDPOINT; "": none).
	OTLPEndpoint string
	// WrapAPI, if set, wraps the API's handler inside the local API
	// Gateway (the end-to-end tests check every answer against the
	// OpenAPI document there).
	WrapAPI func(http.Handler) http.Handler
}

// Stack is a running local stack.
type Stack struct {
	Env     *emulator.Env
	Store   *store.Store
	Queue   *queue.Client
	Service *scheduler.Service
	// App is the graph the composition root built: the same one a
	// Lambda entry builds.
	App      *app.App
	Server   *local.Server
	Counters *local.Counters
	Info     Info
	// Notices keeps the latest notices, which GET /v1/events serves;
	// Metrics counts the transitions GET /metrics serves.
	Notices *notice.Ring
	Metrics *metricspage.Metrics

	loc    app.Local
	ownEnv bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	errs   []error
}

// Info is what .runledger/local.json holds for tools outside the process.
type Info = localinfo.Info

func (o *Options) defaults() {
	if o.Name == "" {
		o.Name = "runledger"
	}
	if len(o.Pools) == 0 {
		o.Pools = []string{"default", "demo"}
		if v := os.Getenv("RUNLEDGER_POOLS"); v != "" {
			o.Pools = nil
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p != "" {
					o.Pools = append(o.Pools, p)
				}
			}
		}
	}
	if o.ListenAddr == "" {
		o.ListenAddr = "127.0.0.1:8080"
	}
	if o.APIKey == "" {
		o.APIKey = os.Getenv("RUNLEDGER_API_KEY")
	}
	if o.APIKey == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		o.APIKey = "rl_" + hex.EncodeToString(b[:])
	}
	if o.TickInterval == 0 {
		o.TickInterval = 2 * time.Second
	}
	if o.DemoPool == "" {
		o.DemoPool = "demo"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Wait == 0 {
		o.Wait = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.Counters == nil {
		o.Counters = local.NewCounters()
	}
	if o.OTLPEndpoint == "" {
		o.OTLPEndpoint = os.Getenv(tracing.EnvEndpoint)
	}
}

// Start creates the table and queues if they do not exist yet, then runs the
// handlers and the parts' processes. It returns once the API answers.
func Start(ctx context.Context, o Options) (*Stack, error) {
	o.defaults()
	if o.MaxClockSkew == 0 {
		skew, err := app.MaxClockSkewFromEnv(os.Getenv)
		if err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		o.MaxClockSkew = skew
	}
	st := &Stack{Counters: o.Counters, Notices: notice.NewRing(notice.DefaultKeep), Metrics: metricspage.New()}
	if o.Env == nil {
		env, err := emulator.Start(ctx, emulator.Options{Logger: o.Logger, DataDir: o.DataDir})
		if err != nil {
			return nil, err
		}
		o.Env, st.ownEnv = env, true
	}
	st.Env = o.Env
	ok := false
	defer func() {
		if !ok {
			_ = st.Stop(context.Background())
		}
	}()
	cfg := o.appConfig()
	// The stack's own notices and metrics pages: the kept notices of
	// GET /v1/events and the counts of GET /metrics.
	cfg.Parts = append(cfg.Parts, app.Part{Name: "notices", Notices: st.Notices}, st.Metrics.Part())
	cfg.NoticeLog = st.Notices
	a, err := app.New(ctx, cfg)
	if errors.Is(err, store.ErrTableLayout) && o.DataDir != "" {
		return nil, fmt.Errorf("devstack: %w (delete %s to start with a new table)", err, o.DataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	st.App, st.Store, st.Queue, st.Service = a, a.Store, a.Queue, a.Service
	if err := st.serve(a, o); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	st.runHandlers(runCtx, a, o)
	st.Info = Info{
		APIURL: st.Server.URL(), APIKey: o.APIKey, DynamoDBEndpoint: o.Env.DynamoDB().URL, SQSEndpoint: o.Env.SQS().URL,
		Region: o.Env.Region(), Table: a.Config.Table, Queues: a.Queues(),
	}
	st.loc = app.Local{APIURL: st.Server.URL(), Queues: st.Info.Queues, Queue: st.Queue, Logger: o.Logger, PollWait: o.Wait}
	for _, p := range a.Config.Parts {
		if p.Start == nil {
			continue
		}
		run, err := p.Start(st.loc)
		if err != nil {
			return nil, fmt.Errorf("devstack: %s: %w", p.Name, err)
		}
		st.run(func() error { return run(runCtx) })
	}
	ok = true
	return st, nil
}

// appConfig is the composition root's configuration of this stack: the
// emulators' clients counted, the table and queues named after o.Name,
// and the parts (the demo worker first).
func (o *Options) appConfig() app.Config {
	parts := o.Parts
	if o.DemoWorker && slices.Contains(o.Pools, o.DemoPool) {
		demo := app.Worker{Pool: o.DemoPool, Name: "demo", Concurrency: 8, Handler: worker.DemoHandler}
		parts = append([]app.Part{demo.Part()}, parts...)
	}
	return app.Config{
		Clients:         o.Env,
		DynamoDBOptions: append([]func(*dynamodb.Options){o.Counters.CountDynamoDB}, o.DynamoDBOptions...),
		SQSOptions:      append([]func(*sqs.Options){o.Counters.CountSQS}, o.SQSOptions...),
		Provision:       &app.Provision{Name: o.Name, Pools: o.Pools},
		CapacityReports: o.CapacityReports, Metrics: o.Metrics,
		Now: o.Now, MaxClockSkew: o.MaxClockSkew, TickerPeriod: o.TickInterval, Logger: o.Logger,
		APIKey: o.APIKey, OTLPEndpoint: o.OTLPEndpoint,
		Parts: parts,
	}
}

// serve starts the API (with the parts' routes) behind the local API
// Gateway.
func (st *Stack) serve(a *app.App, o Options) error {
	handler, err := a.HTTP()
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	if o.WrapAPI != nil {
		handler = o.WrapAPI(handler)
	}
	st.Server = &local.Server{Name: "api", Handler: handler, ListenAddr: o.ListenAddr, Counters: o.Counters, Logger: o.Logger, Region: o.Env.Region()}
	if err := st.Server.Start(); err != nil {
		return fmt.Errorf("devstack: api: %w", err)
	}
	return nil
}

// runHandlers runs the events function on the events, delay and trigger
// queues and the ticker and reconciler functions on their schedules.
func (st *Stack) runHandlers(ctx context.Context, a *app.App, o Options) {
	for _, q := range []struct{ url, arn string }{
		{url: a.Config.EventsQueueURL}, {url: a.Config.DelayQueueURL},
		// The trigger queue's records name the ARN the events function
		// starts runs from.
		{url: a.Config.TriggerQueueURL, arn: a.Config.TriggerQueueARN},
	} {
		p := &local.Poller{Name: "events", Queue: a.Queue, QueueURL: q.url, SourceARN: q.arn, BatchSize: 10, Wait: o.Wait,
			Handler: a.HandleEvents, Concurrency: 2, Counters: o.Counters, Logger: o.Logger, Region: o.Env.Region()}
		st.run(func() error { return p.Run(ctx) })
	}
	for _, t := range []*local.Ticker{
		{Name: "ticker", Handler: a.Tick},
		{Name: "reconciler", Handler: a.Reconcile},
	} {
		t.Interval, t.Now, t.Counters, t.Logger = o.TickInterval, o.Now, o.Counters, o.Logger
		st.run(func() error { return t.Run(ctx) })
	}
}

// StartWorker runs a worker on the running stack until the returned stop
// is called (before Stop): a worker that a scenario starts and stops by
// itself, as a user's worker process would run.
func (st *Stack) StartWorker(w app.Worker) (stop func(), err error) {
	wk, err := w.New(st.loc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := wk.Run(ctx); err != nil {
			st.loc.Logger.Error("worker stopped", "worker", w.Name, "error", err.Error())
		}
	}()
	return func() { cancel(); <-done }, nil
}

func (st *Stack) run(f func() error) {
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		if err := f(); err != nil {
			st.errMu.Lock()
			st.errs = append(st.errs, err)
			st.errMu.Unlock()
		}
	}()
}

// Stop stops the handlers (in-flight batches finish) and, if Start started
// the emulators, the emulators.
func (st *Stack) Stop(ctx context.Context) error {
	var errs []error
	if st.Server != nil {
		errs = append(errs, st.Server.Shutdown(ctx))
	}
	if st.cancel != nil {
		st.cancel()
	}
	st.wg.Wait()
	if st.App != nil {
		// The spans of what ended before the stop still go out.
		errs = append(errs, st.App.Close(ctx))
	}
	st.errMu.Lock()
	errs = append(errs, st.errs...)
	st.errMu.Unlock()
	if st.ownEnv && st.Env != nil {
		errs = append(errs, st.Env.Stop())
	}
	return errors.Join(errs...)
}

// DashboardURL is where the web dashboard answers (it asks for the API key
// once per browser tab).
func (st *Stack) DashboardURL() string {
	return strings.TrimSuffix(st.Info.APIURL, "/") + dashboard.Prefix
}

// WriteInfo writes the stack's endpoints to path (.runledger/local.json).
func (st *Stack) WriteInfo(path string) error { return localinfo.Write(path, st.Info) }
