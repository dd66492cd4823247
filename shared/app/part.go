package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/worker"
)

// Part is one addition to the stack. Each field is a plug-in point; a nil
// field adds nothing there. The local stack's additions (exec pools and the
// demo worker, executors with their evidence providers, metrics, pages
// beside the dashboard) are each one Part in Config.Parts (devstack's
// Options.Parts); a Lambda entry passes its parts to Boot and never calls
// Start (it has no local process). A new kind of addition (an executor's
// dispatcher, once the scheduler takes one) becomes a new field here,
// wired once in New.
type Part struct {
	// Name tells the parts apart in errors; unique within a Config.
	Name string
	// Pools the part serves: under Config.Provision each gets a dispatch
	// queue and joins the scheduler's pools.
	Pools []string
	// Evidence returns the part's evidence providers, consulted after the
	// worker leases' about LOST attempts of the queues.
	Evidence func(*store.Store) []scheduler.EvidenceProvider
	// Executors run tasks outside the queues (scheduler.Executor), one per
	// type across all parts; each is also the evidence provider of the
	// attempts it started. Allowed is what job definitions may name for
	// them (the local stack's registry of functions, clusters and task
	// definitions), added to Config.Allowed.
	Executors []scheduler.Executor
	Allowed   jobspec.Allowed
	// Metrics receives the scheduler's metric lines (CloudWatch embedded
	// metric format, one JSON object a line) beside Config.Metrics: a
	// local metrics page counts from them.
	Metrics io.Writer
	// Notices receives the scheduler's notices (runs ended, tasks failed
	// or lost, deadlines missed): the EventBridge publisher, the local
	// stack's kept list. Publish must not block.
	Notices scheduler.NoticeSink
	// Flush, if set, delivers what Notices still holds; the Lambda entries
	// call it (App.Flush) before each invocation returns, since the
	// process is frozen in between.
	Flush func(context.Context) error
	// Moved is told of every applied change of a task instance (the local
	// Prometheus page counts them); it must not block.
	Moved func(scheduler.Moved)
	// RunEnded is told of every run the scheduler sees end, with its
	// completion deviation (the local Prometheus page measures it); it
	// must not block.
	RunEnded func(scheduler.RunEnded)
	// Routes are served beside the HTTP API, by ServeMux pattern
	// ("GET /metrics"). They take precedence over the API's own routes and
	// do their own authentication.
	Routes map[string]http.Handler
	// Start prepares the part's process in the local stack (an in-process
	// worker, a local executor) and returns what runs until its context
	// ends. An error from Start fails the stack's start.
	Start func(Local) (run func(context.Context) error, err error)
}

// Local is what a Part's process gets from the running local stack.
type Local struct {
	// APIURL is the base URL of the local API.
	APIURL string
	// Queues maps "events", "delay", "trigger" and each pool to its
	// queue URL.
	Queues map[string]string
	Queue  *queue.Client
	Logger *slog.Logger
	// PollWait is the long-polling wait the stack's own pollers use (short,
	// so that the stack stops promptly).
	PollWait time.Duration
}

// Worker is a worker pool that runs in the stack's process: the demo
// worker, `runledger local --exec-pool`'s command runner, the bench's
// workers. Its Part serves the pool's queue through the worker SDK, as a
// user's worker process would.
type Worker struct {
	Pool        string
	Name        string // default: the pool's name
	Concurrency int    // default: the SDK's
	// LeaseInterval is the period of the worker's process leases
	// (default: the SDK's).
	LeaseInterval time.Duration
	Handler       worker.Handler
}

// Part returns the worker as a Part named "worker <name>".
func (w Worker) Part() Part {
	name := w.name()
	return Part{
		Name:  "worker " + name,
		Pools: []string{w.Pool},
		Start: func(l Local) (func(context.Context) error, error) {
			wk, err := w.New(l)
			if err != nil {
				return nil, err
			}
			return wk.Run, nil
		},
	}
}

// New builds the worker on a running local stack.
func (w Worker) New(l Local) (*worker.Worker, error) {
	wk, err := worker.New(worker.Config{
		APIURL: l.APIURL, PoolQueueURL: l.Queues[w.Pool], EventsQueueURL: l.Queues[QueueEvents],
		Name: w.name(), Concurrency: w.Concurrency, LeaseInterval: w.LeaseInterval,
		Queue: l.Queue, Logger: l.Logger, PollWait: l.PollWait,
	}, w.Handler)
	if err != nil {
		return nil, fmt.Errorf("%s worker: %w", w.name(), err)
	}
	return wk, nil
}

func (w Worker) name() string {
	if w.Name == "" {
		return w.Pool
	}
	return w.Name
}

// metrics is where the scheduler writes its metric lines: Config.Metrics
// and every Part's.
func (c *Config) metrics() io.Writer {
	ws := []io.Writer{c.Metrics}
	for _, p := range c.Parts {
		if p.Metrics != nil {
			ws = append(ws, p.Metrics)
		}
	}
	if len(ws) == 1 {
		return c.Metrics
	}
	return io.MultiWriter(ws...)
}

// notices is where the scheduler hands its notices: every Part's sink.
func (c *Config) notices() scheduler.NoticeSink {
	var sinks fanout
	for _, p := range c.Parts {
		if p.Notices != nil {
			sinks = append(sinks, p.Notices)
		}
	}
	switch len(sinks) {
	case 0:
		return nil
	case 1:
		return sinks[0]
	}
	return sinks
}

type fanout []scheduler.NoticeSink

func (f fanout) Publish(n protocol.Notice) {
	for _, s := range f {
		s.Publish(n)
	}
}

// moved tells every Part's Moved of a change.
func (c *Config) moved() func(scheduler.Moved) {
	var fs []func(scheduler.Moved)
	for _, p := range c.Parts {
		if p.Moved != nil {
			fs = append(fs, p.Moved)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return func(m scheduler.Moved) {
		for _, f := range fs {
			f(m)
		}
	}
}

// runEnded tells every Part's RunEnded of a run's end.
func (c *Config) runEnded() func(scheduler.RunEnded) {
	var fs []func(scheduler.RunEnded)
	for _, p := range c.Parts {
		if p.RunEnded != nil {
			fs = append(fs, p.RunEnded)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return func(e scheduler.RunEnded) {
		for _, f := range fs {
			f(e)
		}
	}
}

// FlushTimeout bounds how long an invocation waits for its notices'
// delivery before it returns.
const FlushTimeout = 2 * time.Second

// Flush delivers what the Parts' notice sinks still hold, within
// FlushTimeout and ctx's deadline. A failure is logged, never returned:
// the invocation's own work is done.
func (a *App) Flush(ctx context.Context) {
	var flushes []Part
	for _, p := range a.Config.Parts {
		if p.Flush != nil {
			flushes = append(flushes, p)
		}
	}
	if len(flushes) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, FlushTimeout)
	defer cancel()
	for _, p := range flushes {
		if err := p.Flush(ctx); err != nil {
			a.Config.Logger.WarnContext(ctx, "notices not flushed", "part", p.Name, "error", err.Error())
		}
	}
}

// flushing makes h flush the Parts' notice sinks after every request, when
// a Part has something to flush (the api Lambda).
func (a *App) flushing(h http.Handler) http.Handler {
	for _, p := range a.Config.Parts {
		if p.Flush != nil {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w, r)
				a.Flush(r.Context())
			})
		}
	}
	return h
}

// mount serves the Parts' routes beside the API handler h.
func (a *App) mount(h http.Handler) (handler http.Handler, err error) {
	mux := http.NewServeMux()
	n := 0
	defer func() {
		// ServeMux panics on a malformed or conflicting pattern: that is a
		// Part's configuration mistake, reported as one.
		if r := recover(); r != nil {
			handler, err = nil, configErrorf("part routes: %v", r)
		}
	}()
	for _, p := range a.Config.Parts {
		for pattern, ph := range p.Routes {
			mux.Handle(pattern, ph)
			n++
		}
	}
	if n == 0 {
		return h, nil
	}
	mux.Handle("/", h)
	return mux, nil
}
