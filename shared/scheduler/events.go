package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/worker"
)

// eventMessage is any message of the events or delay queue: a worker's
// completion (no kind), a worker process lease, or a timer.
type eventMessage struct {
	Kind string `json:"kind"`
	Completion
	Token     string       `json:"token"`
	EventTime string       `json:"event_time"`
	Worker    string       `json:"worker"`
	BootID    string       `json:"boot_id"`
	ExpiresAt string       `json:"expires_at"`
	Running   []AttemptRef `json:"running"`
	Seq       int64        `json:"seq"`
	SentAt    string       `json:"sent_at"`
	At        string       `json:"at"`
}

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
	var m eventMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	switch m.Kind {
	case "timer":
		if m.Run == "" {
			return fmt.Errorf("%w: timer without run", ErrBadMessage)
		}
		if m.Task == "" {
			return s.AdvanceRun(ctx, m.Run)
		}
		return s.FireTimer(ctx, store.InstanceKey{Run: m.Run, Task: m.Task})
	case "worker_lease":
		lease, err := s.workerLease(m)
		if err != nil {
			return err
		}
		return s.store.PutWorkerLease(ctx, lease)
	case "":
		c := m.Completion
		if m.EventTime != "" {
			t, err := time.Parse(time.RFC3339Nano, m.EventTime)
			if err != nil {
				return fmt.Errorf("%w: event_time: %v", ErrBadMessage, err)
			}
			c.EventTime = t
		}
		_, err := s.Complete(ctx, c, m.Token)
		if errors.Is(err, ErrInvalidCompletion) {
			return fmt.Errorf("%w: %v", ErrBadMessage, err)
		}
		if errors.Is(err, ErrStaleAttempt) || errors.Is(err, ErrAlreadyClaimed) || errors.Is(err, ErrIllegalTransition) || errors.Is(err, ErrInvalidToken) {
			return fmt.Errorf("%w: %v", ErrBadMessage, err)
		}
		return err
	}
	return fmt.Errorf("%w: unknown kind %q", ErrBadMessage, m.Kind)
}

// workerLease reads a lease message. Its end by the scheduler's clock is
// when it arrived plus the lifetime the worker gave it (expires_at less
// sent_at, both by the worker's clock), so the worker's clock never decides
// when its lease ends here; a lease without sent_at lives until its
// expires_at.
func (s *Service) workerLease(m eventMessage) (store.WorkerLease, error) {
	exp, err := time.Parse(time.RFC3339Nano, m.ExpiresAt)
	if err != nil || m.Worker == "" || m.BootID == "" {
		return store.WorkerLease{}, fmt.Errorf("%w: worker lease needs worker, boot_id and expires_at", ErrBadMessage)
	}
	received := s.now()
	lifetime := exp.Sub(received)
	if m.SentAt != "" {
		sent, err := time.Parse(time.RFC3339Nano, m.SentAt)
		if err != nil {
			return store.WorkerLease{}, fmt.Errorf("%w: worker lease sent_at: %v", ErrBadMessage, err)
		}
		lifetime = exp.Sub(sent)
	}
	started, _ := worker.BootStart(m.BootID)
	lease := store.WorkerLease{Name: m.Worker, BootID: m.BootID, BootStartedAt: started, ExpiresAt: exp,
		EndsAt: received.Add(max(lifetime, 0)), UpdatedAt: received, Seq: m.Seq}
	for _, r := range m.Running {
		lease.Running = append(lease.Running, store.AttemptKey{Run: r.Run, Task: r.Task, Attempt: r.Attempt})
	}
	return lease, nil
}
