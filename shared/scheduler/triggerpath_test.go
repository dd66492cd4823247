package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
)

// The queues of the trigger path's tests, as their records name them.
const (
	triggerQueueARN = "arn:aws:sqs:eu-west-1:123456789012:rl-trigger"
	eventsQueueARN  = "arn:aws:sqs:eu-west-1:123456789012:rl-events"
)

// newTriggerFixture is newNoticeFixture whose service drains a trigger
// queue (triggerQueueARN).
func newTriggerFixture(t *testing.T) (*fixture, *noticeRecorder) {
	t.Helper()
	f := newFixture(t)
	rec := &noticeRecorder{}
	f.svc = mustNew(f.st, f.q, scheduler.Config{
		Pools: map[string]string{"default": f.pool}, Now: f.clock.Now, Evidence: []scheduler.EvidenceProvider{f.ev},
		Notices: rec, Metrics: rec, TriggerQueueARN: triggerQueueARN,
	})
	return f, rec
}

// deliver hands the events function one message of queue arn, and
// answers the ids it hands back for redelivery.
func deliver(t *testing.T, svc *scheduler.Service, arn, id, body string) []string {
	t.Helper()
	return svc.HandleMessages(context.Background(), []scheduler.QueueMessage{{ID: id, QueueARN: arn, Body: body}})
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
func refusedMessages(t *testing.T, rec *noticeRecorder) []string {
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
		if resp := deliver(t, f.svc, c.arn, c.id, orderEvent); len(resp) != 0 {
			t.Fatalf("%s: answered %+v, want the record dropped, not redelivered", c.id, resp)
		}
		if runs := runsOf(t, f.st, "fulfil"); len(runs) != 0 {
			t.Fatalf("%s: a trigger event off the trigger queue started runs %v", c.id, runsAt(runs))
		}
	}
	completion := `{"run": "r", "task": "main", "attempt": 1, "event_id": "e", "outcome": "succeeded", "token": "t"}`
	if resp := deliver(t, f.svc, triggerQueueARN, "not-an-event", completion); len(resp) != 0 {
		t.Fatalf("a worker message on the trigger queue: answered %+v, want it dropped", resp)
	}
	if got, want := fmt.Sprint(refusedMessages(t, rec)), "[forged-events forged-unnamed not-an-event]"; got != want {
		t.Fatalf("MessageRefused counted %s, want %s", got, want)
	}

	if resp := deliver(t, f.svc, triggerQueueARN, "delivered", orderEvent); len(resp) != 0 {
		t.Fatalf("the trigger queue's event: answered %+v", resp)
	}
	if runs := runsOf(t, f.st, "fulfil"); len(runs) != 1 || runs[0].Event == nil || runs[0].Event.ID != "6f1c-order-1" {
		t.Fatalf("runs %v, want one started by the trigger queue's event", runsAt(runs))
	}
}

// An event's time becomes its runs' logical time, so it lies in the
// years 1970 to 9999 as a backfill's range does: an event whose time is
// outside them, or is no RFC 3339 time, is a bad message and starts
// nothing; the range's first instant and an event without a time (now)
// are fine.
func TestEventTimeOutsideTheLogicalRange(t *testing.T) {
	f, _ := newTriggerFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name": "fulfil", "on_event": [{"pattern": {"source": ["shop"]}}]}`)
	event := func(id, timeField string) []byte {
		return fmt.Appendf(nil, `{"id": %q, "source": "shop", "detail-type": "x", %s "detail": {}}`, id, timeField)
	}
	for _, c := range []struct{ name, time string }{
		{"year 1", `"time": "0001-01-01T00:00:00Z",`},
		{"year 1 with an offset", `"time": "0001-01-01T00:00:00+01:00",`},
		{"before 1970", `"time": "1969-12-31T23:59:59Z",`},
		{"not a time", `"time": "yesterday",`},
		{"a number", `"time": 1700000000,`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.svc.Triggers().StartFromEvent(ctx, event("bad-"+c.name, c.time))
			if !errors.Is(err, scheduler.ErrBadMessage) {
				t.Fatalf("err = %v, want ErrBadMessage", err)
			}
		})
	}
	if runs := runsOf(t, f.st, "fulfil"); len(runs) != 0 {
		t.Fatalf("events outside the range started runs %v", runsAt(runs))
	}
	for _, id := range []string{"at-1970", "no-time"} {
		timeField := `"time": "1970-01-01T00:00:00Z",`
		if id == "no-time" {
			timeField = ""
		}
		if out, err := f.svc.Triggers().StartFromEvent(ctx, event(id, timeField)); err != nil || len(out.Runs) != 1 {
			t.Fatalf("%s: %+v %v, want one run", id, out, err)
		}
	}
}

// One job's full limiter fails that job only: an event matching aaa
// (whose limiter has 10,000 runs waiting) and bbb starts bbb's run, is
// aaa's event.trigger_failed (reason limit_queue_full) and is not
// redelivered for it; aaa gets no run.
func TestFullLimiterFailsOnlyItsJobsTrigger(t *testing.T) {
	f, rec := newTriggerFixture(t)
	f.createJob(t, `{"name": "aaa", "concurrency": {"limit": 1}, "on_event": [{"pattern": {"source": ["shop"]}}]}`)
	f.createJob(t, `{"name": "bbb", "on_event": [{"pattern": {"source": ["shop"]}}]}`)
	f.fillLimiter(t, "aaa/")

	if resp := deliver(t, f.svc, triggerQueueARN, "m-1", orderEvent); len(resp) != 0 {
		t.Fatalf("answered %+v, want the delivery done (bbb's run started, aaa's refused for good)", resp)
	}
	if runs := runsOf(t, f.st, "bbb"); len(runs) != 1 {
		t.Fatalf("bbb has runs %v, want one", runsAt(runs))
	}
	if runs := runsOf(t, f.st, "aaa"); len(runs) != 0 {
		t.Fatalf("aaa has runs %v, want none: its limiter is full", runsAt(runs))
	}
	rec.mu.Lock()
	notes := append([]protocol.Notice(nil), rec.notes...)
	rec.mu.Unlock()
	var failed []protocol.Notice
	for _, s := range notes {
		if s.Type == protocol.NoticeEventTriggerFailed {
			failed = append(failed, s)
		}
	}
	if len(failed) != 1 || failed[0].Job != "aaa" || failed[0].EventID != "6f1c-order-1" || failed[0].Reason != string(protocol.CodeLimitQueueFull) {
		t.Fatalf("event.trigger_failed %+v, want one for aaa, reason limit_queue_full", failed)
	}

	// The same event again (a redelivery) answers bbb's run and aaa's
	// failure once more, and makes nothing new.
	out, err := f.svc.Triggers().StartFromEvent(context.Background(), []byte(orderEvent))
	if err != nil || len(out.Runs) != 1 || fmt.Sprint(out.Failed) != "[aaa]" {
		t.Fatalf("again: %+v %v, want bbb's run and aaa failed", out, err)
	}
	if runs, _, err := f.st.ListRuns(context.Background(), ledger.RunFilter{}); err != nil || len(runs) != 1 {
		t.Fatalf("runs %d (%v) after the second delivery, want 1", len(runs), err)
	}
}
