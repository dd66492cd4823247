// Package worker is the worker SDK: it takes attempt envelopes from a
// pool's dispatch queue, claims each attempt (synchronously, fenced by its
// token), runs the user's Handler while heartbeating and keeping the
// message hidden, and reports the outcome (through the API's complete
// route, or durably on the events queue when the route is unreachable)
// before it lets the message go.
//
// The same processing runs in two modes: Run, a long-running process that
// polls the queue itself, and HandleSQS, a Lambda SQS handler.
// docs/workers.md explains how to write a worker with it, and the
// package's examples show one of each.
//
// Timeouts, each bounding one thing (after the Temporal SDK's shape):
//   - the envelope's run_timeout bounds one attempt from claim to
//     completion; when it passes the handler's ctx ends and the attempt is
//     reported failed with category "timeout";
//   - the envelope's heartbeat_interval is the beat; the heartbeat timeout
//     on the server (three beats) is what a silent worker loses its lease by;
//   - the attempt's lease ends a heartbeat timeout after the last renewal
//     (claim or heartbeat); when it could not be renewed, the handler's ctx
//     ends min(5 s, heartbeat timeout / 3) before it (cause ErrLeaseLost)
//     and nothing is reported, so the handler never runs beside a retry;
//   - Config.VisibilityTimeout is how long a received message stays hidden;
//     the worker extends it every third of that while it works;
//   - Config.ShutdownGrace bounds how long running handlers may finish after
//     Run's ctx ends; Config.StopTimeout how long a handler whose ctx the
//     worker ended may take to return before it is reported without it.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/wire"
)

// Queue is what the worker needs of the SQS adapter; *queue.Client has it.
// Completions and deletes of finished dispatches go through the batch calls
// (queue.Batcher): concurrent attempts that finish together share a
// request, and one finishing alone waits for no one.
type Queue interface {
	Send(ctx context.Context, queueURL, body string, attrs map[string]string) (string, error)
	Receive(ctx context.Context, queueURL string, opts queue.ReceiveOptions) ([]queue.Message, error)
	ChangeVisibility(ctx context.Context, queueURL, receiptHandle string, timeout time.Duration) error
	queue.BatchAPI
}

var _ Queue = (*queue.Client)(nil)

// Defaults of Config.
const (
	DefaultConcurrency       = 1
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultPollWait          = queue.MaxWait
	DefaultLeaseInterval     = 10 * time.Second
	DefaultShutdownGrace     = 30 * time.Second
	DefaultStopTimeout       = 5 * time.Second
	DefaultDeadlineReserve   = 5 * time.Second
	DefaultHeartbeatInterval = 10 * time.Second
)

// LeaseLifetime is how many lease intervals a lease stays valid: a process
// that misses two beats is still alive.
const LeaseLifetime = 3

// shutdownReportBudget is how long reports may still retry after the
// shutdown grace period and the handlers' stop timeout have run out.
const shutdownReportBudget = 10 * time.Second

// Config configures a Worker.
type Config struct {
	// APIURL is the base URL of the API (the worker routes).
	APIURL string
	// PoolQueueURL is the pool's dispatch queue. Run needs it; HandleSQS
	// does not (the event source mapping owns the messages).
	PoolQueueURL string
	// EventsQueueURL receives completions and lease messages.
	EventsQueueURL string
	// Name identifies the worker in claims ("<Name>@<boot id>") and
	// leases. Default: the host name. It may not contain "@".
	Name string
	// Concurrency is how many attempts run at once. Default
	// DefaultConcurrency.
	Concurrency int
	// Queue is the SQS adapter, normally a *queue.Client.
	Queue Queue
	// HTTPClient calls the API. Default: a client with a 30 s timeout.
	HTTPClient *http.Client
	// Clock stamps event times and lease expiries, and is what an
	// attempt's fencing deadline (Task.FencingDeadline) is compared with.
	// Default time.Now. The other timers (heartbeats, timeouts) run on
	// real time.
	Clock func() time.Time
	// Logger receives the worker's JSON logs. Default slog.Default().
	Logger *slog.Logger

	// VisibilityTimeout hides a received message (Run); the worker extends
	// it every third of this while the attempt runs. At least 1 s.
	// Default DefaultVisibilityTimeout.
	VisibilityTimeout time.Duration
	// PollWait is the long-polling wait of one receive, up to 20 s.
	// Default DefaultPollWait.
	PollWait time.Duration
	// LeaseInterval is the period of lease messages. Default
	// DefaultLeaseInterval.
	LeaseInterval time.Duration
	// ShutdownGrace is how long running handlers may finish after Run's
	// ctx ends; then their ctx ends too. Default DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// StopTimeout is how long a handler may take to return after the
	// worker ended its ctx for a timeout, a shutdown, a superseded attempt
	// or the Lambda deadline, before it is reported without waiting for
	// it. A cancel request has no such limit: the worker keeps
	// heartbeating until the handler returns. Default DefaultStopTimeout.
	StopTimeout time.Duration
	// DeadlineReserve (HandleSQS) ends handlers this long before the
	// invocation deadline, to leave time to report. Default
	// DefaultDeadlineReserve.
	DeadlineReserve time.Duration
	// DefaultHeartbeatInterval applies to envelopes without one. Default
	// DefaultHeartbeatInterval.
	DefaultHeartbeatInterval time.Duration

	// QueueCompletions sends every completion to the events queue. By
	// default the worker completes through the API's complete route and
	// uses the events queue only when the route is unreachable (no
	// connection, a timeout, 429 or a 5xx); a 4xx answer is final.
	QueueCompletions bool
	// CompleteTimeout bounds one completion over HTTP before the events
	// queue takes it. Default DefaultCompleteTimeout.
	CompleteTimeout time.Duration
}

// Worker runs attempts of one pool. Create it with New.
type Worker struct {
	cfg     Config
	handler Handler
	api     *Client
	q       Queue
	// events coalesces the completions sent to the events queue, pool the
	// deletes from the pool queue.
	events, pool *queue.Batcher
	log          *slog.Logger
	now          func() time.Time
	bootID       string
	id           string
	// after makes the fence's timers (tests drive them with a fake clock).
	after func(time.Duration) <-chan time.Time

	running  runningSet
	leaseSeq atomic.Int64
	// lastLease is the real time of the last lease sent (unix nanos).
	lastLease atomic.Int64
	started   atomic.Bool
}

// checkAPIURL refuses an API URL that is not http(s)://host[/prefix].
func checkAPIURL(raw string) error {
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("API URL %q: want http(s)://host[/prefix]", raw)
	}
	return nil
}

// hostName is the host's name, the default name of a worker; fallback
// when the host has none.
func hostName(fallback string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return fallback
	}
	return host
}

// WithDefaults returns c with each zero field that has a default set to
// it, as each field's comment says.
func (c Config) WithDefaults() Config {
	if c.Name == "" {
		c.Name = hostName("worker")
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	for _, d := range c.durations() {
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	return c
}

// durationSetting is one of Config's durations, its name in errors and
// its default.
type durationSetting struct {
	name string
	d    *time.Duration
	def  time.Duration
}

// durations lists c's durations that have a default.
func (c *Config) durations() []durationSetting {
	return []durationSetting{
		{"visibility timeout", &c.VisibilityTimeout, DefaultVisibilityTimeout},
		{"poll wait", &c.PollWait, DefaultPollWait},
		{"lease interval", &c.LeaseInterval, DefaultLeaseInterval},
		{"shutdown grace", &c.ShutdownGrace, DefaultShutdownGrace},
		{"stop timeout", &c.StopTimeout, DefaultStopTimeout},
		{"deadline reserve", &c.DeadlineReserve, DefaultDeadlineReserve},
		{"default heartbeat interval", &c.DefaultHeartbeatInterval, DefaultHeartbeatInterval},
		{"complete timeout", &c.CompleteTimeout, DefaultCompleteTimeout},
	}
}

// validate reports the first setting of c, defaults applied, that no
// worker can run with.
func (c Config) validate() error {
	if c.Queue == nil {
		return errors.New("queue client is nil")
	}
	if err := checkAPIURL(c.APIURL); err != nil {
		return err
	}
	if c.EventsQueueURL == "" {
		return errors.New("events queue URL is empty")
	}
	if strings.Contains(c.Name, "@") {
		return fmt.Errorf("name %q contains @", c.Name)
	}
	if c.Concurrency < 0 {
		return fmt.Errorf("concurrency %d, want >= 1", c.Concurrency)
	}
	for _, d := range c.durations() {
		if *d.d < 0 {
			return fmt.Errorf("%s %s is negative", d.name, *d.d)
		}
	}
	switch {
	case c.VisibilityTimeout < time.Second || c.VisibilityTimeout > queue.MaxVisibilityTimeout:
		return fmt.Errorf("visibility timeout %s, want 1s..%s", c.VisibilityTimeout, queue.MaxVisibilityTimeout)
	case c.PollWait > queue.MaxWait:
		return fmt.Errorf("poll wait %s, want at most %s", c.PollWait, queue.MaxWait)
	}
	return nil
}

// New fills in cfg's defaults, checks it and returns a worker with a fresh
// boot id.
func New(cfg Config, h Handler) (*Worker, error) {
	if h == nil {
		return nil, errors.New("new worker: handler is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	w := &Worker{
		cfg:     cfg,
		handler: h,
		api:     NewClient(cfg.APIURL, cfg.HTTPClient),
		q:       cfg.Queue,
		events:  queue.NewBatcher(cfg.Queue, cfg.EventsQueueURL),
		pool:    queue.NewBatcher(cfg.Queue, cfg.PoolQueueURL),
		now:     cfg.Clock,
		after:   realAfter,
		bootID:  ulid.MustNew(ulid.Timestamp(cfg.Clock()), ulid.DefaultEntropy()).String(),
		running: runningSet{m: map[AttemptRef]string{}},
	}
	w.id = cfg.Name + "@" + w.bootID
	w.log = cfg.Logger.With("worker_id", w.id)
	return w, nil
}

// ID is the worker id the claims carry: "<name>@<boot id>".
func (w *Worker) ID() string { return w.id }

// BootID is random per Worker, so per process start: a ULID whose time is
// the Worker's creation by Config.Clock (BootStart reads it).
func (w *Worker) BootID() string { return w.bootID }

// Running lists the attempts this worker runs or is still reporting.
func (w *Worker) Running() []AttemptRef { return w.running.list() }

// newEventID makes a fresh event id: one per fact.
func (w *Worker) newEventID() string {
	return ulid.MustNew(ulid.Timestamp(w.now()), ulid.DefaultEntropy()).String()
}

// Run receives envelopes from the pool queue and processes up to
// Concurrency of them at once until ctx ends. Then it stops receiving, lets
// running handlers finish for up to ShutdownGrace, ends the ctx of those
// still running, waits for their reports, sends a final lease and returns
// nil. It returns an error at once if a queue does not exist.
func (w *Worker) Run(ctx context.Context) error {
	if w.cfg.PoolQueueURL == "" {
		return errors.New("run worker: pool queue URL is empty")
	}
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("run worker: already running")
	}
	defer w.started.Store(false)

	// Messages already received are processed through the shutdown: their
	// claims, reports and deletes use opsCtx, which outlives ctx by the
	// grace period plus a budget to report.
	base := context.WithoutCancel(ctx)
	handlerCtx, stopHandlers := context.WithCancelCause(base)
	defer stopHandlers(nil)
	opsCtx, stopOps := context.WithCancel(base)
	defer stopOps()

	if err := w.sendLease(ctx, w.now().Add(LeaseLifetime*w.cfg.LeaseInterval)); err != nil {
		if errors.Is(err, queue.ErrQueueNotFound) {
			return fmt.Errorf("run worker %s: %w", w.id, err)
		}
		w.log.WarnContext(ctx, "first lease not sent", "err", err)
	}
	leaseCtx, stopLease := context.WithCancel(base)
	var leaseWG sync.WaitGroup
	leaseWG.Go(func() { w.leaseLoop(leaseCtx) })

	w.log.InfoContext(ctx, "worker started", "pool_queue", queue.Name(w.cfg.PoolQueueURL), "concurrency", w.cfg.Concurrency)
	var wg sync.WaitGroup
	runErr := w.receiveLoop(ctx, opsCtx, handlerCtx, &wg)

	// Graceful shutdown: the grace period, then end the handlers' ctx,
	// then the stop timeout plus a budget for their reports.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	graceEnd := time.NewTimer(w.cfg.ShutdownGrace)
	defer graceEnd.Stop()
	opsEnd := time.NewTimer(w.cfg.ShutdownGrace + w.cfg.StopTimeout + shutdownReportBudget)
	defer opsEnd.Stop()
	if n := len(w.running.list()); n > 0 {
		w.log.InfoContext(ctx, "worker stopping; waiting for running attempts", "running", n, "grace", w.cfg.ShutdownGrace.String())
	}
wait:
	for {
		select {
		case <-done:
			break wait
		case <-graceEnd.C:
			w.log.WarnContext(ctx, "shutdown grace period over; cancelling running handlers", "running", len(w.running.list()))
			stopHandlers(errShutdown)
		case <-opsEnd.C:
			w.log.ErrorContext(ctx, "shutdown budget over; abandoning unreported attempts", "running", len(w.running.list()))
			stopOps()
			<-done
			break wait
		}
	}

	stopLease()
	leaseWG.Wait()
	finalCtx, cancel := context.WithTimeout(base, 5*time.Second)
	defer cancel()
	// The last lease says the process is gone: every attempt it ran is over.
	if err := w.sendLease(finalCtx, w.now()); err != nil {
		w.log.ErrorContext(ctx, "final lease not sent", "err", err)
	}
	w.log.InfoContext(ctx, "worker stopped")
	return runErr
}

// receiveLoop receives until ctx ends or a queue is missing, starting one
// goroutine per message on wg.
func (w *Worker) receiveLoop(ctx, opsCtx, handlerCtx context.Context, wg *sync.WaitGroup) error {
	slots := make(chan struct{}, w.cfg.Concurrency)
	bo := backoff{min: 200 * time.Millisecond, max: 30 * time.Second}
	m := mode{ops: opsCtx, handlerParent: handlerCtx, ownsMessage: true, stopWait: w.cfg.StopTimeout}
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		n := 1
	more:
		for n < min(w.cfg.Concurrency, queue.MaxReceiveMessages) {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		// The receive is not cancelled with ctx (its long-poll wait bounds
		// it): an aborted long poll may still take messages, which would
		// then stay hidden for the whole visibility timeout. What arrives
		// after the stop is handed back at once instead.
		msgs, err := w.q.Receive(context.WithoutCancel(ctx), w.cfg.PoolQueueURL, queue.ReceiveOptions{
			MaxMessages:       n,
			Wait:              w.cfg.PollWait,
			VisibilityTimeout: w.cfg.VisibilityTimeout,
		})
		if ctx.Err() != nil {
			for _, msg := range msgs {
				if err := w.q.ChangeVisibility(opsCtx, w.cfg.PoolQueueURL, msg.ReceiptHandle, 0); err != nil {
					w.log.WarnContext(opsCtx, "hand back message on stop", "message_id", msg.ID, "err", err)
				}
			}
			return nil
		}
		for range n - len(msgs) {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, queue.ErrQueueNotFound) {
				w.log.ErrorContext(ctx, "pool queue missing; stopping", "err", err)
				return fmt.Errorf("run worker %s: %w", w.id, err)
			}
			wait := bo.next()
			w.log.WarnContext(ctx, "receive failed; backing off", "err", err, "backoff", wait.String())
			if !sleep(ctx, wait) {
				return nil
			}
			continue
		}
		bo.reset()
		for _, msg := range msgs {
			d := delivery{messageID: msg.ID, receipt: msg.ReceiptHandle, body: msg.Body, receiveCount: msg.ReceiveCount}
			wg.Go(func() {
				defer func() { <-slots }()
				w.process(d, m)
			})
		}
	}
}

// leaseLoop sends a lease every LeaseInterval until ctx ends.
func (w *Worker) leaseLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.LeaseInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := w.sendLease(ctx, w.now().Add(LeaseLifetime*w.cfg.LeaseInterval)); err != nil && ctx.Err() == nil {
			w.log.WarnContext(ctx, "lease not sent", "err", err)
		}
	}
}

// sendLease sends one lease message listing the running attempts.
//
// Only a lease that lists attempts takes the next seq; one that lists none
// repeats the last. The scheduler keeps only leases that prove an attempt,
// and refuses a seq more than ledger.MaxLeaseSeqJump past the last one it
// kept, so an idle spell must not use up numbers.
func (w *Worker) sendLease(ctx context.Context, expiresAt time.Time) error {
	refs, tokens := w.running.held()
	seq := w.leaseSeq.Load()
	if len(refs) > 0 {
		seq = w.leaseSeq.Add(1)
	}
	l := Lease{
		Worker:    w.cfg.Name,
		BootID:    w.bootID,
		ExpiresAt: expiresAt,
		Seq:       seq,
		SentAt:    w.now(),
	}
	for _, r := range refs {
		l.Running = append(l.Running, LeasedAttempt{AttemptRef: r})
	}
	l.Prove(tokens)
	body, err := wire.Marshal(l)
	if err != nil {
		return fmt.Errorf("send lease %s: %w", w.id, err)
	}
	if _, err := w.q.Send(ctx, w.cfg.EventsQueueURL, string(body), nil); err != nil {
		return fmt.Errorf("send lease %s #%d: %w", w.id, l.Seq, err)
	}
	w.lastLease.Store(time.Now().UnixNano())
	return nil
}

// runningSet is the attempts this process holds: claimed and not yet
// reported (or given up), each with its token, which the leases' proofs
// are made with.
type runningSet struct {
	mu sync.Mutex
	m  map[AttemptRef]string
}

func (s *runningSet) add(r AttemptRef, token string) {
	s.mu.Lock()
	s.m[r] = token
	s.mu.Unlock()
}

func (s *runningSet) remove(r AttemptRef) {
	s.mu.Lock()
	delete(s.m, r)
	s.mu.Unlock()
}

func (s *runningSet) list() []AttemptRef {
	refs, _ := s.held()
	return refs
}

// held lists the attempts in order, and their tokens.
func (s *runningSet) held() ([]AttemptRef, []string) {
	s.mu.Lock()
	refs := make([]AttemptRef, 0, len(s.m))
	for r := range s.m {
		refs = append(refs, r)
	}
	slices.SortFunc(refs, func(a, b AttemptRef) int {
		if c := strings.Compare(a.Run, b.Run); c != 0 {
			return c
		}
		if c := strings.Compare(a.Task, b.Task); c != 0 {
			return c
		}
		return a.Attempt - b.Attempt
	})
	tokens := make([]string, len(refs))
	for i, r := range refs {
		tokens[i] = s.m[r]
	}
	s.mu.Unlock()
	return refs, tokens
}
