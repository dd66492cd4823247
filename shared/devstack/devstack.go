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
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/api"
	"github.com/runledger/runledger/shared/dashboard"
	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/local"
	"github.com/runledger/runledger/shared/localinfo"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
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
	// TickInterval of the ticker and the reconciler (default 2 s).
	TickInterval time.Duration
	// DemoWorker runs a demo worker pool for DemoPool (default pool "demo").
	DemoWorker bool
	DemoPool   string
	// Workers run in the stack beside the demo worker, each on its pool
	// (added to Pools when missing), for example the command-running
	// worker of `runledger local --exec-pool`.
	Workers []Worker
	// Now is the scheduler's clock (default time.Now).
	Now func() time.Time
	// Evidence adds evidence providers after the worker-lease provider.
	Evidence []scheduler.EvidenceProvider
	// MaxClockSkew is the scheduler's allowance for worker clocks
	// (default RUNLEDGER_MAX_CLOCK_SKEW, else 30 s).
	MaxClockSkew time.Duration
	// Pollers' long-polling wait (default 1 s, so Stop is prompt).
	Wait   time.Duration
	Logger *slog.Logger
	// Counters count invocations and requests (default: a new set).
	Counters *local.Counters
	// WrapAPI, if set, wraps the API's handler inside the local API
	// Gateway (the end-to-end tests check every answer against the
	// OpenAPI document there).
	WrapAPI func(http.Handler) http.Handler
}

// Worker is a worker pool the stack runs in-process.
type Worker struct {
	Pool        string
	Name        string // default: the pool's name
	Concurrency int    // default: the SDK's
	Handler     worker.Handler
}

// Stack is a running local stack.
type Stack struct {
	Env      *emulator.Env
	Store    *store.Store
	Queue    *queue.Client
	Service  *scheduler.Service
	Handler  *api.Handler
	Server   *local.Server
	Counters *local.Counters
	Info     Info

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
	for _, w := range o.Workers {
		if !slices.Contains(o.Pools, w.Pool) {
			o.Pools = append(o.Pools, w.Pool)
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
}

// Start creates the table and queues if they do not exist yet, then runs the
// handlers. It returns once the API answers.
func Start(ctx context.Context, o Options) (*Stack, error) {
	o.defaults()
	if o.MaxClockSkew == 0 {
		skew, err := scheduler.MaxClockSkewFromEnv()
		if err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		o.MaxClockSkew = skew
	}
	st := &Stack{Counters: o.Counters}
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
	db := o.Env.DynamoDBClient(func(opt *dynamodb.Options) { o.Counters.CountDynamoDB(opt) })
	sq := o.Env.SQSClient(func(opt *sqs.Options) { o.Counters.CountSQS(opt) })
	table := o.Name
	if err := store.CreateTable(ctx, db, table); err != nil && !errors.Is(err, store.ErrAlreadyExists) {
		return nil, fmt.Errorf("devstack: table %s: %w", table, err)
	}
	st.Queue = queue.New(sq)
	queues := map[string]string{}
	poolURLs := map[string]string{}
	for _, name := range append(append([]string{}, o.Pools...), "events", "delay") {
		qn := o.Name + "-" + name
		if name != "events" && name != "delay" {
			qn = o.Name + "-pool-" + name
		}
		c, err := st.Queue.CreateQueue(ctx, queue.Spec{Name: qn, VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 5, Encrypt: true})
		if err != nil {
			return nil, fmt.Errorf("devstack: queue %s: %w", qn, err)
		}
		queues[name] = c.URL
		if name != "events" && name != "delay" {
			poolURLs[name] = c.URL
		}
	}
	st.Store = store.New(db, table, store.WithClock(o.Now), store.WithLogger(o.Logger))
	evidence := append([]scheduler.EvidenceProvider{scheduler.WorkerLeaseEvidence{Store: st.Store, Now: o.Now}}, o.Evidence...)
	st.Service = scheduler.New(st.Store, st.Queue, scheduler.Config{
		Pools: poolURLs, EventsQueueURL: queues["events"], DelayQueueURL: queues["delay"],
		Now: o.Now, Evidence: evidence, MaxClockSkew: o.MaxClockSkew, Logger: o.Logger,
	})
	h, err := api.New(st.Service, api.Config{Auth: api.AuthAPIKey, APIKey: o.APIKey, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	st.Handler = h
	var handler http.Handler = h
	if o.WrapAPI != nil {
		handler = o.WrapAPI(h)
	}
	st.Server = &local.Server{Name: "api", Handler: handler, ListenAddr: o.ListenAddr, Counters: o.Counters, Logger: o.Logger, Region: o.Env.Region()}
	if err := st.Server.Start(); err != nil {
		return nil, fmt.Errorf("devstack: api: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	for _, name := range []string{"events", "delay"} {
		p := &local.Poller{Name: "events", Queue: st.Queue, QueueURL: queues[name], BatchSize: 10, Wait: o.Wait,
			Handler: st.Service.HandleEvents, Concurrency: 2, Counters: o.Counters, Logger: o.Logger, Region: o.Env.Region()}
		st.run(func() error { return p.Run(runCtx) })
	}
	tick := &local.Ticker{Name: "ticker", Interval: o.TickInterval, Now: o.Now, Counters: o.Counters, Logger: o.Logger,
		Handler: func(ctx context.Context, _ events.EventBridgeEvent) error { _, err := st.Service.Tick(ctx); return err }}
	rec := &local.Ticker{Name: "reconciler", Interval: o.TickInterval, Now: o.Now, Counters: o.Counters, Logger: o.Logger,
		Handler: func(ctx context.Context, _ events.EventBridgeEvent) error {
			_, err := st.Service.Reconcile(ctx)
			return err
		}}
	st.run(func() error { return tick.Run(runCtx) })
	st.run(func() error { return rec.Run(runCtx) })
	if o.DemoWorker {
		if _, ok := poolURLs[o.DemoPool]; ok {
			if err := st.startWorker(runCtx, o, queues, Worker{Pool: o.DemoPool, Name: "demo", Concurrency: 8, Handler: worker.DemoHandler}); err != nil {
				return nil, err
			}
		}
	}
	for _, w := range o.Workers {
		if err := st.startWorker(runCtx, o, queues, w); err != nil {
			return nil, err
		}
	}
	st.Info = Info{
		APIURL: st.Server.URL(), APIKey: o.APIKey, DynamoDBEndpoint: o.Env.DynamoDB().URL, SQSEndpoint: o.Env.SQS().URL,
		Region: o.Env.Region(), Table: table, Queues: queues,
	}
	ok = true
	return st, nil
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

// startWorker runs a worker pool in this process, the demo pool's (the
// worker SDK's DemoHandler) among them: the same code a worker Lambda runs.
func (st *Stack) startWorker(ctx context.Context, o Options, queues map[string]string, spec Worker) error {
	name := spec.Name
	if name == "" {
		name = spec.Pool
	}
	w, err := worker.New(worker.Config{
		APIURL: st.Server.URL(), PoolQueueURL: queues[spec.Pool], EventsQueueURL: queues["events"],
		Name: name, Concurrency: spec.Concurrency, Queue: st.Queue, Logger: o.Logger, PollWait: o.Wait,
	}, spec.Handler)
	if err != nil {
		return fmt.Errorf("devstack: %s worker: %w", name, err)
	}
	st.run(func() error { return w.Run(ctx) })
	return nil
}
