package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// Message is one queue message as the events function is handed it,
// whatever transport carried it (shared/app decodes SQS's records).
type Message struct {
	// ID is the queue's id of the message: logs and the redelivery answer
	// name it.
	ID string
	// QueueARN is the queue the message came from; only the trigger
	// queue's messages are trigger events (Config.TriggerQueueARN).
	QueueARN string
	// Body is the message's body.
	Body string
}

// HandleMessages is the events function: it applies a batch of worker
// completions, process leases and delayed timers, and starts the runs of
// the trigger queue's events, and answers the ids of the messages to
// deliver again. Only transient failures (throttling, contention,
// network) are delivered again; a permanent problem (malformed body,
// forged token, an event the state machine refuses, a trigger event off
// the trigger queue) is logged with its reason, counted
// (MetricMessageRefused) and dropped, so it is recorded once rather than
// redelivered forever.
func (s *Service) HandleMessages(ctx context.Context, msgs []Message) (redeliver []string) {
	// Messages are independent (SQS keeps no order between them) and each
	// is fenced by the store's compare-and-set, so a batch is applied
	// concurrently; its latency is one message's, not the sum.
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() { errs[i] = s.handleMessage(ctx, m) })
	}
	wg.Wait()
	for i, m := range msgs {
		switch err := errs[i]; {
		case err == nil:
		case transient(err):
			s.log.WarnContext(ctx, "event will be redelivered", "message_id", m.ID, "error", err.Error())
			redeliver = append(redeliver, m.ID)
		default:
			s.log.ErrorContext(ctx, "event refused", "message_id", m.ID, "queue_arn", m.QueueARN, "error", err.Error())
			s.emit(metric{name: MetricMessageRefused, unit: "Count", value: 1,
				props: map[string]any{"message_id": m.ID, "queue_arn": m.QueueARN}})
		}
	}
	return redeliver
}

// handleMessage routes a message by the queue it came from. Only the
// trigger queue's messages are trigger events (an EventBridge rule's
// deliveries, which start runs); the events and delay queues carry
// worker messages and timers, and a trigger event found on them is
// refused: every worker may send to the events queue, and must not start
// runs of any job with params, account and time of its choosing.
func (s *Service) handleMessage(ctx context.Context, m Message) error {
	fromTrigger := s.cfg.TriggerQueueARN != "" && m.QueueARN == s.cfg.TriggerQueueARN
	switch envelope := IsEventEnvelope(m.Body); {
	case fromTrigger && envelope:
		_, err := s.StartFromEvent(ctx, []byte(m.Body))
		return err
	case fromTrigger:
		return fmt.Errorf("%w: the trigger queue carries EventBridge events only", ErrBadMessage)
	case envelope:
		return fmt.Errorf("%w: a trigger event on queue %s, which is not the trigger queue: only the trigger queue's events start runs",
			ErrBadMessage, cmp.Or(m.QueueARN, "(none named)"))
	}
	return s.handleEvent(ctx, m.Body)
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
		return s.FireTimer(ctx, ledger.InstanceKey{Run: m.Timer.Run, Task: m.Timer.Task})
	case m.Lease != nil:
		lease, err := s.workerLease(ctx, *m.Lease)
		if err != nil || len(lease.Running) == 0 {
			return err
		}
		return s.store.PutWorkerLease(ctx, lease)
	case m.InvocationFailure != nil:
		return s.invocationFailed(ctx, *m.InvocationFailure, body)
	}
	_, err = s.Complete(ctx, *m.Completion, m.Completion.Token)
	if errors.Is(err, ErrInvalidCompletion) {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if errors.Is(err, protocol.ErrStaleAttempt) || errors.Is(err, protocol.ErrAlreadyClaimed) || errors.Is(err, statemodel.ErrIllegalTransition) || errors.Is(err, protocol.ErrInvalidAttemptToken) {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	return err
}

// workerLease is the stored form of a lease message, or ErrBadMessage
// for a lease whose boot starts later than the scheduler's now plus the
// max clock skew: no real process started in the future, and such a boot
// would pass for the newest of its name (store.PutWorkerLease orders boots
// by their start) and lock the real one's leases out.
//
// Its end by the scheduler's clock is when it arrived plus the lifetime
// the worker gave it (expires_at less sent_at, both by the worker's clock),
// so the worker's clock never decides when its lease ends here; a lease
// without sent_at lives until its expires_at.
//
// It keeps only the listed attempts the lease proves (leaseProves): anyone
// who may send to the events queue can send a lease, and only the holder
// of an attempt's token can prove it runs that attempt. A lease that
// proves none is not stored at all (handleEvent): it could be anyone's,
// and stored it would replace the boot's last proven lease, or with a
// huge seq lock out the boot's later ones. The store also refuses a seq
// too far past the last proven one (ledger.MaxLeaseSeqJump), so even the
// holder of one token cannot.
func (s *Service) workerLease(ctx context.Context, l protocol.Lease) (ledger.WorkerLease, error) {
	received := s.now()
	started, _ := protocol.BootStart(l.BootID)
	if limit := received.Add(s.cfg.MaxClockSkew); started.After(limit) {
		return ledger.WorkerLease{}, fmt.Errorf("%w: lease of %s: its boot starts at %s, after now plus the max clock skew (%s)",
			ErrBadMessage, l.WorkerID(), protocol.FormatTime(started), protocol.FormatTime(limit))
	}
	lifetime := l.ExpiresAt.Sub(received)
	if !l.SentAt.IsZero() {
		lifetime = l.ExpiresAt.Sub(l.SentAt)
	}
	lease := ledger.WorkerLease{Name: l.Worker, BootID: l.BootID, BootStartedAt: started, ExpiresAt: l.ExpiresAt,
		EndsAt: received.Add(max(lifetime, 0)), UpdatedAt: received, Seq: l.Seq}
	for _, r := range l.Running {
		proven, err := s.leaseProves(ctx, l, r)
		if err != nil {
			return ledger.WorkerLease{}, fmt.Errorf("lease of %s: %w", l.WorkerID(), err)
		}
		if !proven {
			s.log.WarnContext(ctx, "lease lists an attempt it does not prove; not counted", "worker_id", l.WorkerID(),
				"run_id", r.Run, "task", r.Task, "attempt", r.Attempt)
			continue
		}
		lease.Running = append(lease.Running, ledger.AttemptKey{Run: r.Run, Task: r.Task, Attempt: r.Attempt})
	}
	return lease, nil
}

// leaseProves reports whether lease l proves that its process runs
// attempt r: the attempt, as the instance holds it, was claimed by the
// lease's worker id (name and boot), and r's proof checks against the
// attempt's stored token hash (protocol.LeaseProof). An attempt the
// instance no longer holds inline (an older one, never the one evidence is
// asked about) or an unknown one proves nothing.
func (s *Service) leaseProves(ctx context.Context, l protocol.Lease, r protocol.LeasedAttempt) (bool, error) {
	if r.Proof == "" || r.Validate() != nil {
		return false, nil
	}
	inst, err := s.store.GetInstance(ctx, instanceKey(r.AttemptRef))
	switch {
	case errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidKey):
		return false, nil
	case err != nil:
		return false, err
	}
	a, ok := inst.Snapshot.AttemptN(r.Attempt)
	return ok && a.WorkerID == l.WorkerID() && protocol.CheckLeaseProof(a.TokenHash, l, r.AttemptRef, r.Proof), nil
}
