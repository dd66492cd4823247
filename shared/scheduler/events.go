package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/store"
)

// HandleEvents is the events function: it applies a batch of worker
// completions, process leases and delayed timers. Only transient failures
// (throttling, contention, network) are reported back for redelivery; a
// permanent problem (malformed body, forged token, an event the state
// machine refuses) is logged with its reason and dropped, so it is recorded
// once rather than redelivered forever.
func (s *Service) HandleEvents(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	// Records are independent (SQS keeps no order between them) and each is
	// fenced by the store's compare-and-set, so a batch is applied
	// concurrently; its latency is one record's, not the sum.
	errs := make([]error, len(ev.Records))
	var wg sync.WaitGroup
	for i, rec := range ev.Records {
		wg.Go(func() { errs[i] = s.handleEvent(ctx, rec.Body) })
	}
	wg.Wait()
	var resp events.SQSEventResponse
	for i, rec := range ev.Records {
		switch err := errs[i]; {
		case err == nil:
		case transient(err):
			s.log.WarnContext(ctx, "event will be redelivered", "message_id", rec.MessageId, "error", err.Error())
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
		default:
			s.log.ErrorContext(ctx, "event refused", "message_id", rec.MessageId, "error", err.Error())
		}
	}
	return resp, nil
}

func (s *Service) handleEvent(ctx context.Context, body string) error {
	m, err := protocol.DecodeEvent(body)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	switch {
	case m.Timer != nil:
		if m.Timer.Task == "" {
			return s.fireRunTimer(ctx, m.Timer.Run, m.Timer.At)
		}
		return s.FireTimer(ctx, store.InstanceKey{Run: m.Timer.Run, Task: m.Timer.Task})
	case m.Lease != nil:
		return s.store.PutWorkerLease(ctx, s.workerLease(*m.Lease))
	case m.InvocationFailure != nil:
		return s.invocationFailed(ctx, *m.InvocationFailure, body)
	}
	_, err = s.Complete(ctx, *m.Completion, m.Completion.Token)
	if errors.Is(err, ErrInvalidCompletion) {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if errors.Is(err, ErrStaleAttempt) || errors.Is(err, ErrAlreadyClaimed) || errors.Is(err, ErrIllegalTransition) || errors.Is(err, ErrInvalidToken) {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	return err
}

// workerLease is the stored form of a lease message. Its end by the
// scheduler's clock is when it arrived plus the lifetime the worker gave
// it (expires_at less sent_at, both by the worker's clock), so the
// worker's clock never decides when its lease ends here; a lease without
// sent_at lives until its expires_at.
func (s *Service) workerLease(l protocol.Lease) store.WorkerLease {
	received := s.now()
	lifetime := l.ExpiresAt.Sub(received)
	if !l.SentAt.IsZero() {
		lifetime = l.ExpiresAt.Sub(l.SentAt)
	}
	started, _ := protocol.BootStart(l.BootID)
	lease := store.WorkerLease{Name: l.Worker, BootID: l.BootID, BootStartedAt: started, ExpiresAt: l.ExpiresAt,
		EndsAt: received.Add(max(lifetime, 0)), UpdatedAt: received, Seq: l.Seq}
	for _, r := range l.Running {
		lease.Running = append(lease.Running, store.AttemptKey{Run: r.Run, Task: r.Task, Attempt: r.Attempt})
	}
	return lease
}
