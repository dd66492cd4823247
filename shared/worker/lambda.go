package worker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// HandleSQS is the Lambda handler for a pool's dispatch queue: it processes
// the batch's records, up to Concurrency at once, each through claim, run
// and report. It answers a batch item failure only for a record worth
// delivering again: a claim that failed transiently (or answered outside
// the contract), a report that could not be sent, or a record too close to
// the deadline to start. Refused claims and unusable messages succeed, so
// Lambda deletes them.
//
// Handlers' ctx ends DeadlineReserve before the invocation deadline; such
// an attempt is reported failed with category "worker_deadline". The event
// source mapping owns the messages: the queue's visibility timeout must
// exceed the function timeout, and the worker neither extends nor deletes.
func (w *Worker) HandleSQS(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	m := mode{ops: ctx, handlerParent: ctx, stopWait: w.cfg.StopTimeout}
	if deadline, ok := ctx.Deadline(); ok {
		m.handlerDeadline = deadline.Add(-w.cfg.DeadlineReserve)
		m.stopWait = min(m.stopWait, w.cfg.DeadlineReserve/2)
	}

	// Leases while the invocation runs: a frozen execution environment
	// sends none, and that is true, since it runs nothing.
	if last := w.lastLease.Load(); last == 0 || time.Since(time.Unix(0, last)) >= w.cfg.LeaseInterval {
		if err := w.sendLease(ctx, w.now().Add(LeaseLifetime*w.cfg.LeaseInterval)); err != nil {
			w.log.WarnContext(ctx, "lease not sent", "err", err)
		}
	}
	leaseCtx, stopLease := context.WithCancel(ctx)
	var leaseWG sync.WaitGroup
	leaseWG.Go(func() { w.leaseLoop(leaseCtx) })
	defer func() { stopLease(); leaseWG.Wait() }()

	results := make([]disposition, len(ev.Records))
	slots := make(chan struct{}, w.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, rec := range ev.Records {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			results[i] = dispositionRetry
			continue
		}
		// No receipt: the event source mapping deletes what succeeds.
		d := delivery{messageID: rec.MessageId, body: rec.Body, receiveCount: receiveCount(rec)}
		wg.Go(func() {
			defer func() { <-slots }()
			results[i] = w.process(d, m)
		})
	}
	wg.Wait()

	var resp events.SQSEventResponse
	for i, r := range results {
		if r == dispositionRetry {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
		}
	}
	return resp, nil
}

func receiveCount(rec events.SQSMessage) int {
	n := 0
	for _, ch := range rec.Attributes["ApproximateReceiveCount"] {
		if ch < '0' || ch > '9' {
			return 0
		}
		n = n*10 + int(ch-'0')
	}
	return n
}

// InvokeConfig configures HandleInvoke.
type InvokeConfig struct {
	// APIURL is the base URL of the API (default: RUNLEDGER_API_URL).
	APIURL string
	// Name is the worker's name in the claim (default: the function's
	// name, AWS_LAMBDA_FUNCTION_NAME).
	Name       string
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// HandleInvoke returns the Lambda handler of a function that a lambda
// executor invokes directly (docs/api.md, "Executors"): the event is the
// attempt's envelope. It claims the attempt, runs h while heartbeating,
// and completes it over HTTP, as RunAttempt does:
//
//	lambda.Start(worker.HandleInvoke(worker.InvokeConfig{}, handle))
//
// The invocation fails (the handler returns an error, so Lambda retries
// it, then sends its on-failure record, which the scheduler takes as a
// confirmed failure of the attempt) only when the attempt could not be
// claimed for a transient reason, before h ran. Everything else succeeds:
// a reported outcome, a claim the scheduler refused (the attempt was
// cancelled or superseded), and an attempt that ended without a report,
// which the scheduler resolves from its lease.
func HandleInvoke(cfg InvokeConfig, h Handler) func(ctx context.Context, env Envelope) error {
	return func(ctx context.Context, env Envelope) error {
		apiURL, name, log := cfg.APIURL, cfg.Name, cfg.Logger
		if apiURL == "" {
			apiURL = os.Getenv("RUNLEDGER_API_URL")
		}
		if name == "" {
			name = os.Getenv("AWS_LAMBDA_FUNCTION_NAME")
		}
		if log == nil {
			log = slog.Default()
		}
		err := RunAttempt(ctx, AttemptConfig{
			APIURL: apiURL, Ref: AttemptRef{Run: env.Run, Task: env.Task, Attempt: env.Attempt}, Token: env.Token,
			Name: name, HTTPClient: cfg.HTTPClient, Logger: log,
		}, h)
		var reported *AttemptError
		switch {
		case err == nil, errors.As(err, &reported), errors.Is(err, ErrNotReported):
			return nil
		case errors.Is(err, ErrNotClaimed) && !IsTransient(err):
			log.InfoContext(ctx, "attempt not claimed", "run_id", env.Run, "task_id", env.Task, "attempt", env.Attempt, "err", err)
			return nil
		}
		return err
	}
}
