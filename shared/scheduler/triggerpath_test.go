package scheduler_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
)

// The queues of the trigger path's tests, as their records name them.
const (
	triggerQueueARN = "arn:aws:sqs:eu-west-1:123456789012:rl-trigger"
	eventsQueueARN  = "arn:aws:sqs:eu-west-1:123456789012:rl-events"
)

// newTriggerFixture is newSignalFixture whose service drains a trigger
// queue (triggerQueueARN).
func newTriggerFixture(t *testing.T) (*fixture, *signalRecorder) {
	t.Helper()
	f := newFixture(t)
	rec := &signalRecorder{}
	f.svc = scheduler.New(f.st, f.q, scheduler.Config{
		Pools: map[string]string{"default": f.pool}, Now: f.clock.Now, Evidence: []scheduler.EvidenceProvider{f.ev},
		Events: rec, Metrics: rec, TriggerQueueARN: triggerQueueARN,
	})
	return f, rec
}

// deliver hands the events function one record of queue arn.
func deliver(t *testing.T, svc *scheduler.Service, arn, id, body string) events.SQSEventResponse {
	t.Helper()
	resp, err := svc.HandleEvents(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: id, EventSource: "aws:sqs", EventSourceARN: arn, Body: body}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// runsAt names runs by their logical times, for failure messages.
func runsAt(runs []ledger.Run) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.Job+"@"+protocol.FormatTime(r.LogicalTime))
	}
	return out
}

// refusedMessages are the message ids counted as MessageRefused.
func refusedMessages(t *testing.T, rec *signalRecorder) []string {
	t.Helper()
	var ids []string
	for _, l := range rec.lines(t) {
		if l[scheduler.MetricMessageRefused] == float64(1) {
			ids = append(ids, fmt.Sprint(l["message_id"]))
		}
	}
	return ids
}

// A trigger event starts runs only from the trigger queue: the same body
// on the events queue (which every worker may send to), or on a record
// naming no queue, is dropped (not redelivered), counted as
// MessageRefused and starts nothing; the trigger queue refuses a body
// that is no trigger event.
func TestTriggerEventsOnlyFromTheTriggerQueue(t *testing.T) {
	f, rec := newTriggerFixture(t)
	f.createJob(t, `{"name": "fulfil", "on_event": [{"pattern": {"source": ["shop"]}, "params": {"order": "{{.Event.detail.order_id}}"}}]}`)

	for _, c := range []struct{ id, arn string }{{"forged-events", eventsQueueARN}, {"forged-unnamed", ""}} {
		if resp := deliver(t, f.svc, c.arn, c.id, orderEvent); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%s: answered %+v, want the record dropped, not redelivered", c.id, resp)
		}
		if runs := runsOf(t, f.st, "fulfil"); len(runs) != 0 {
			t.Fatalf("%s: a trigger event off the trigger queue started runs %v", c.id, runsAt(runs))
		}
	}
	completion := `{"run": "r", "task": "main", "attempt": 1, "event_id": "e", "outcome": "succeeded", "token": "t"}`
	if resp := deliver(t, f.svc, triggerQueueARN, "not-an-event", completion); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("a worker message on the trigger queue: answered %+v, want it dropped", resp)
	}
	if got, want := fmt.Sprint(refusedMessages(t, rec)), "[forged-events forged-unnamed not-an-event]"; got != want {
		t.Fatalf("MessageRefused counted %s, want %s", got, want)
	}

	if resp := deliver(t, f.svc, triggerQueueARN, "delivered", orderEvent); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the trigger queue's event: answered %+v", resp)
	}
	if runs := runsOf(t, f.st, "fulfil"); len(runs) != 1 || runs[0].Event == nil || runs[0].Event.ID != "6f1c-order-1" {
		t.Fatalf("runs %v, want one started by the trigger queue's event", runsAt(runs))
	}
}
