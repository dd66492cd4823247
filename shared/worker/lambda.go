package worker

import (
	"context"
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
