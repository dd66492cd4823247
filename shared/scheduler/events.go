package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"sync"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/triggers"
	"github.com/runledger/runledger/statemodel"
)

// QueueMessage is one queue message as the events function is handed
// it, whatever transport carried it (shared/app decodes SQS's records).
type QueueMessage struct {
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
func (s *Service) HandleMessages(ctx context.Context, msgs []QueueMessage) (redeliver []string) {
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
			s.metrics.emit(metric{name: MetricMessageRefused, unit: "Count", value: 1,
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
func (s *Service) handleMessage(ctx context.Context, m QueueMessage) error {
	fromTrigger := s.cfg.TriggerQueueARN != "" && m.QueueARN == s.cfg.TriggerQueueARN
	switch envelope := triggers.IsEventEnvelope(m.Body); {
	case fromTrigger && envelope:
		_, err := s.triggers.StartFromEvent(ctx, []byte(m.Body))
		return err
	case fromTrigger:
		return fmt.Errorf("%w: the trigger queue carries EventBridge events only", ErrBadMessage)
	case envelope:
		return fmt.Errorf("%w: a trigger event on queue %s, which is not the trigger queue: only the trigger queue's events start runs",
			ErrBadMessage, cmp.Or(m.QueueARN, "(none named)"))
	}
	return s.handleEvent(ctx, m.Body)
}

// handleEvent applies an events-queue or delay-queue message: a timer is
// the kernel's, anything else the worker protocol's.
func (s *Service) handleEvent(ctx context.Context, body string) error {
	m, err := protocol.DecodeEvent(body)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if m.Timer != nil {
		if m.Timer.Task == "" {
			return s.fireRunTimer(ctx, m.Timer.Run, m.Timer.At)
		}
		key := ledger.InstanceKey{Run: m.Timer.Run, Task: m.Timer.Task}
		if m.Timer.Purpose == string(statemodel.TimerLease) {
			return s.reconcileInstance(ctx, key, true)
		}
		return s.FireTimer(ctx, key)
	}
	return s.workers.HandleMessage(ctx, m, body)
}
