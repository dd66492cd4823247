package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel/limiter"
)

// eventRunDoc is the part of a run answer an event run adds.
type eventRunDoc struct {
	Run struct {
		ID          string            `json:"id"`
		Trigger     string            `json:"trigger"`
		LogicalTime string            `json:"logical_time"`
		Params      map[string]string `json:"params"`
		Event       *struct {
			ID         string `json:"id"`
			Source     string `json:"source"`
			DetailType string `json:"detail_type"`
		} `json:"event"`
	} `json:"run"`
}

func (s *stack) runIDsOf(job string) []string {
	s.t.Helper()
	r := s.call("GET", "/v1/runs?job="+url.QueryEscape(job), nil).must(s.t, http.StatusOK)
	var page struct {
		Runs []struct {
			ID string `json:"id"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(r.Raw, &page); err != nil {
		s.t.Fatal(err)
	}
	var ids []string
	for _, r := range page.Runs {
		ids = append(ids, r.ID)
	}
	return ids
}

func (s *stack) putEvent(source, detailType, detail, at string) string {
	s.t.Helper()
	entry := map[string]any{"Source": source, "DetailType": detailType, "Detail": detail}
	if at != "" {
		entry["Time"] = at
	}
	r := s.call("POST", "/v1/events/put", map[string]any{"Entries": []any{entry}}).must(s.t, http.StatusOK)
	var a struct {
		FailedEntryCount int
		Entries          []struct{ EventId string }
	}
	if err := json.Unmarshal(r.Raw, &a); err != nil || a.FailedEntryCount != 0 || len(a.Entries) != 1 || a.Entries[0].EventId == "" {
		s.t.Fatalf("put answer %s (%v)", r.Raw, err)
	}
	return a.Entries[0].EventId
}

// An event put starts the matching job's run with params from the event
// (and runs it to the end on the demo worker); a job whose pattern does
// not match gets nothing; a non-matching event starts nothing.
func TestEventPutStartsTheMatchingJob(t *testing.T) {
	s := startStack(t, devstack.Options{DemoWorker: true})
	s.createJob(map[string]any{"name": "fulfil", "pool": "demo", "on_event": []any{map[string]any{
		"pattern": map[string]any{"source": []any{"shop"}, "detail-type": []any{"Order Placed"},
			"detail": map[string]any{"total": []any{map[string]any{"numeric": []any{">", 0}}}}},
		"params": map[string]any{"order": "{{.Event.detail.order_id}}", "source": "{{.Event.source}}"},
	}}})
	s.createJob(map[string]any{"name": "refunds", "pool": "demo", "on_event": []any{map[string]any{
		"pattern": map[string]any{"source": []any{"shop"}, "detail-type": []any{"Order Refunded"}},
	}}})

	id := s.putEvent("shop", "Order Placed", `{"order_id": "o-42", "total": 12.5}`, "2026-11-30T10:00:00Z")
	runs := s.runIDsOf("fulfil")
	if len(runs) != 1 {
		t.Fatalf("fulfil has runs %v after the put answered, want 1", runs)
	}
	var d eventRunDoc
	if err := json.Unmarshal(s.call("GET", "/v1/runs/"+runs[0], nil).must(t, http.StatusOK).Raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.Run.Trigger != "event" || d.Run.Event == nil || d.Run.Event.ID != id || d.Run.Event.Source != "shop" || d.Run.Event.DetailType != "Order Placed" {
		t.Fatalf("run %+v: want trigger event naming event %s", d.Run, id)
	}
	if lt, err := time.Parse(time.RFC3339, d.Run.LogicalTime); err != nil || !lt.Equal(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)) || d.Run.Params["order"] != "o-42" || d.Run.Params["source"] != "shop" {
		t.Fatalf("run logical time %s params %v: want the event's time and its order", d.Run.LogicalTime, d.Run.Params)
	}
	s.waitRun(runs[0], 60*time.Second, "SUCCEEDED")
	if r := s.runIDsOf("refunds"); len(r) != 0 {
		t.Fatalf("refunds has runs %v, want none", r)
	}

	s.putEvent("shop", "Order Placed", `{"order_id": "o-43", "total": 0}`, "")
	s.putEvent("warehouse", "Order Placed", `{"order_id": "o-44", "total": 3}`, "")
	if r := s.runIDsOf("fulfil"); len(r) != 1 {
		t.Fatalf("non-matching events started runs: fulfil has %v", r)
	}
}

// eventEnvelope is an event as an EventBridge rule delivers it to a queue.
func eventEnvelope(id string, detail string) string {
	return fmt.Sprintf(`{"version": "0", "id": %q, "detail-type": "Order Placed", "source": "shop", "account": "123456789012",
		"time": "2026-11-30T10:00:00Z", "region": "eu-west-1", "resources": [], "detail": %s}`, id, detail)
}

// sendTo sends body to the stack's queue name ("events", "trigger").
func (s *stack) sendTo(name, body string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Queue.Send(ctx, s.Info.Queues[name], body, nil); err != nil {
		s.t.Fatal(err)
	}
}

// drained waits until the stack's queue name holds no message: the events
// function consumed (or dropped) what was sent to it.
func (s *stack) drained(name, what string) {
	s.t.Helper()
	eventually(s.t, 30*time.Second, what, func() (bool, string) {
		c := s.queueCounts()[name]
		return c.Total() == 0, fmt.Sprint(c)
	})
}

// Only the trigger queue's events start runs: the same event sent to the
// events queue (which every worker may send to) is consumed and dropped,
// with no run and no redelivery; sent to the trigger queue, it starts the
// run.
func TestTriggerEventOnlyFromTheTriggerQueue(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(map[string]any{"name": "fulfil", "on_event": []any{map[string]any{
		"pattern": map[string]any{"source": []any{"shop"}},
		"params":  map[string]any{"order": "{{.Event.detail.order_id}}"},
	}}})
	s.sendTo(app.QueueEvents, eventEnvelope("forged-1", `{"order_id": "forged"}`))
	s.drained(app.QueueEvents, "the forged event consumed")
	if r := s.runIDsOf("fulfil"); len(r) != 0 {
		t.Fatalf("an event on the events queue started runs %v", r)
	}
	s.sendTo(app.QueueTrigger, eventEnvelope("real-1", `{"order_id": "o-1"}`))
	eventually(t, 30*time.Second, "the trigger queue's run", func() (bool, string) {
		r := s.runIDsOf("fulfil")
		return len(r) == 1, fmt.Sprint(r)
	})
}

// The same event delivered twice (an EventBridge rule's delivery to the
// trigger queue, redelivered) makes one run; a params template that fails
// makes none and an event.trigger_failed notice.
func TestSameEventTwiceMakesOneRun(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(map[string]any{"name": "fulfil", "on_event": []any{map[string]any{
		"pattern": map[string]any{"source": []any{"shop"}},
		"params":  map[string]any{"order": "{{.Event.detail.order_id}}"},
	}}})
	deliver := func(body string) { s.sendTo(app.QueueTrigger, body) }
	drained := func(what string) { s.drained(app.QueueTrigger, what) }
	deliver(eventEnvelope("dup-event-1", `{"order_id": "o-1"}`))
	eventually(t, 30*time.Second, "the event's run", func() (bool, string) {
		r := s.runIDsOf("fulfil")
		return len(r) == 1, fmt.Sprint(r)
	})
	deliver(eventEnvelope("dup-event-1", `{"order_id": "o-1"}`))
	drained("the second delivery consumed")
	if r := s.runIDsOf("fulfil"); len(r) != 1 {
		t.Fatalf("two deliveries of one event made runs %v, want 1", r)
	}
	// The put route too: an event put once more under a new id is a new run.
	s.putEvent("shop", "Order Placed", `{"order_id": "o-2"}`, "")
	if r := s.runIDsOf("fulfil"); len(r) != 2 {
		t.Fatalf("a second event made runs %v, want 2", r)
	}

	bad := s.putEvent("shop", "Order Placed", `{"sku": "no order id"}`, "")
	if r := s.runIDsOf("fulfil"); len(r) != 2 {
		t.Fatalf("an event whose params fail made a run: %v", r)
	}
	r := s.call("GET", "/v1/events", nil).must(t, http.StatusOK)
	var page struct {
		Events []struct {
			Type    string  `json:"type"`
			Job     string  `json:"job"`
			Run     *string `json:"run"`
			EventID string  `json:"event_id"`
			Reason  string  `json:"reason"`
		} `json:"events"`
	}
	if err := json.Unmarshal(r.Raw, &page); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range page.Events {
		if e.Type == "event.trigger_failed" && e.Job == "fulfil" && e.EventID == bad && e.Run == nil && e.Reason != "" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no event.trigger_failed for event %s: %s", bad, r.Raw)
	}
}

// An event matching aaa, whose limiter has 10,000 runs waiting (its item
// written as they leave it), and bbb starts bbb's run all the same: the
// put answers 200, aaa gets no run and an event.trigger_failed (reason
// limit_queue_full); delivered through the trigger queue it is consumed,
// not sent round again.
func TestFullLimiterFailsOnlyItsJobsEvent(t *testing.T) {
	s := startStack(t, devstack.Options{})
	for _, name := range []string{"aaa", "bbb"} {
		s.createJob(map[string]any{"name": name, "concurrency": map[string]any{"limit": 1},
			"on_event": []any{map[string]any{"pattern": map[string]any{"source": []any{"shop"}}}}})
	}
	st := store.New(s.Stack.Env.DynamoDBClient(), s.Info.Table)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.WriteLimiter(ctx, ledger.LimiterWrite{Name: "aaa/", State: limiter.State{Limit: 1, Active: 1, Waiting: limiter.MaxWaiting, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	put := s.putEvent("shop", "Order Placed", `{"order_id": "o-1"}`, "")
	if a, b := s.runIDsOf("aaa"), s.runIDsOf("bbb"); len(a) != 0 || len(b) != 1 {
		t.Fatalf("after the put: aaa has runs %v (want none), bbb %v (want one)", a, b)
	}
	s.sendTo(app.QueueTrigger, eventEnvelope("delivered-1", `{"order_id": "o-2"}`))
	eventually(t, 30*time.Second, "bbb's run of the delivery", func() (bool, string) {
		r := s.runIDsOf("bbb")
		return len(r) == 2, fmt.Sprint(r)
	})
	s.drained(app.QueueTrigger, "the delivery consumed")
	if r := s.runIDsOf("aaa"); len(r) != 0 {
		t.Fatalf("aaa has runs %v, want none: its limiter is full", r)
	}
	var page struct {
		Events []struct {
			Type, Job, Reason string
			EventID           string `json:"event_id"`
		} `json:"events"`
	}
	if err := json.Unmarshal(s.call("GET", "/v1/events", nil).must(t, http.StatusOK).Raw, &page); err != nil {
		t.Fatal(err)
	}
	failed := map[string]string{}
	for _, e := range page.Events {
		if e.Type == "event.trigger_failed" {
			failed[e.EventID] = e.Job + " " + e.Reason
		}
	}
	if want := "aaa limit_queue_full"; len(failed) != 2 || failed[put] != want || failed["delivered-1"] != want {
		t.Fatalf("event.trigger_failed %v, want aaa limit_queue_full for %s and delivered-1", failed, put)
	}
}

// runledger events put starts the matching job's run; runs show names the
// event that started it.
func TestCLIEventsPutAndShow(t *testing.T) {
	s := startStack(t, devstack.Options{})
	c := newCLI(t, s)
	s.createJob(map[string]any{"name": "fulfil", "on_event": []any{map[string]any{
		"pattern": map[string]any{"source": []any{"shop"}, "detail-type": []any{"Order Placed"}},
		"params":  map[string]any{"order": "{{.Event.detail.order_id}}"},
	}}})
	r := c.must(t, 0, "events", "put", "--source", "shop", "--detail-type", "Order Placed", "--detail", `{"order_id": "o-7"}`, "-o", "json")
	var answer struct {
		Entries []struct{ EventId string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &answer); err != nil || len(answer.Entries) != 1 {
		t.Fatalf("events put -o json: %v\n%s", err, r)
	}
	runs := s.runIDsOf("fulfil")
	if len(runs) != 1 {
		t.Fatalf("fulfil has runs %v, want 1", runs)
	}
	show := c.must(t, 0, "runs", "show", runs[0])
	mustContain(t, "runs show", show.stdout, "started by event "+answer.Entries[0].EventId, "source shop", "detail-type Order Placed")
	c.must(t, 2, "events", "put", "--source", "shop")
}
