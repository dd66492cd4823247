package scheduler_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

type noticeLog struct {
	mu    sync.Mutex
	notes []protocol.Notice
}

func (l *noticeLog) Publish(s protocol.Notice) {
	l.mu.Lock()
	l.notes = append(l.notes, s)
	l.mu.Unlock()
}

func (l *noticeLog) of(typ protocol.NoticeType) []protocol.Notice {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []protocol.Notice
	for _, s := range l.notes {
		if s.Type == typ {
			out = append(out, s)
		}
	}
	return out
}

// eventFixture is the service on DynamoDB Local with a kept notice log.
func eventFixture(t *testing.T) (*scheduler.Service, *fixture, *noticeLog) {
	f := newEmulatorFixture(t)
	notes := &noticeLog{}
	svc := mustNew(f.st, f.sent, scheduler.Config{Pools: map[string]string{"default": f.pool}, Now: f.clock.Now, Notices: notes})
	return svc, f, notes
}

func createJobOn(t *testing.T, svc *scheduler.Service, def string) {
	t.Helper()
	j, err := jobspec.Parse([]byte(def), svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Jobs().CreateJob(context.Background(), j); err != nil {
		t.Fatal(err)
	}
}

func runsOf(t *testing.T, st scheduler.Store, job string) []ledger.Run {
	t.Helper()
	runs, _, err := st.ListRuns(context.Background(), ledger.RunFilter{Job: job})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

const orderEvent = `{"version": "0", "id": "6f1c-order-1", "detail-type": "Order Placed", "source": "shop",
	"account": "123456789012", "time": "2030-01-02T01:00:00Z", "region": "eu-west-1", "resources": [],
	"detail": {"order_id": "o-42", "total": 12.5}}`

// An event matching a job's entry starts one run of it: trigger event,
// the event named, logical time the event's, params from the event; the
// same event again starts nothing new; an event matching nothing starts
// nothing.
func TestEventStartsOneRunOfEachMatchingJob(t *testing.T) {
	svc, f, _ := eventFixture(t)
	ctx := context.Background()
	createJobOn(t, svc, `{"name": "fulfil", "on_event": [
		{"pattern": {"source": ["shop"], "detail-type": ["Order Refunded"]}, "params": {"kind": "refund"}},
		{"pattern": {"source": ["shop"], "detail": {"total": [{"numeric": [">", 10]}]}}, "params": {"order": "{{.Event.detail.order_id}}", "run": "{{.Run}}"}},
		{"pattern": {"source": ["shop"]}, "params": {"kind": "any"}}]}`)
	createJobOn(t, svc, `{"name": "audit", "on_event": [{"pattern": {"source": [{"prefix": "sh"}]}}]}`)
	createJobOn(t, svc, `{"name": "other", "on_event": [{"pattern": {"source": ["billing"]}}]}`)

	out, err := svc.Triggers().StartFromEvent(ctx, []byte(orderEvent))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Runs) != 2 || len(out.Failed) != 0 {
		t.Fatalf("outcome %+v, want runs of audit and fulfil", out)
	}
	runs := runsOf(t, f.st, "fulfil")
	if len(runs) != 1 {
		t.Fatalf("fulfil has %d runs, want 1", len(runs))
	}
	v, err := svc.ReadRun(ctx, runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	r := v.Run
	want := &protocol.RunEvent{ID: "6f1c-order-1", Source: "shop", DetailType: "Order Placed"}
	if r.Trigger != statemodel.TriggerEvent || r.Event == nil || *r.Event != *want {
		t.Fatalf("run trigger %q event %+v, want event %+v", r.Trigger, r.Event, want)
	}
	if !r.LogicalTime.Equal(time.Date(2030, 1, 2, 1, 0, 0, 0, time.UTC)) {
		t.Fatalf("logical time %s, want the event's", r.LogicalTime)
	}
	var params map[string]string
	if err := json.Unmarshal(r.Params, &params); err != nil {
		t.Fatal(err)
	}
	if params["order"] != "o-42" || params["run"] != r.ID || params["kind"] != "" {
		t.Fatalf("params %v: want the second entry's, rendered over the event", params)
	}
	if n := len(runsOf(t, f.st, "other")); n != 0 {
		t.Fatalf("other has %d runs, want none", n)
	}

	again, err := svc.Triggers().StartFromEvent(ctx, []byte(orderEvent))
	if err != nil {
		t.Fatal(err)
	}
	if len(runsOf(t, f.st, "fulfil")) != 1 || len(runsOf(t, f.st, "audit")) != 1 {
		t.Fatal("the same event delivered twice made a second run")
	}
	if len(again.Runs) != 2 || (again.Runs[0] != out.Runs[0] && again.Runs[0] != out.Runs[1]) {
		t.Fatalf("second delivery answered %v, want the first delivery's runs %v", again.Runs, out.Runs)
	}

	none, err := svc.Triggers().StartFromEvent(ctx, []byte(`{"id": "e-2", "source": "warehouse", "detail-type": "x", "detail": {}}`))
	if err != nil || len(none.Runs) != 0 {
		t.Fatalf("a non-matching event: %+v %v", none, err)
	}
}

// A params template that fails makes no run and raises the notice
// event.trigger_failed with the job, the event id and the reason.
func TestEventParamsThatFailMakeNoRun(t *testing.T) {
	svc, f, notes := eventFixture(t)
	createJobOn(t, svc, `{"name": "fulfil", "on_event": [{"pattern": {"source": ["shop"]}, "params": {"sku": "{{.Event.detail.sku}}"}}]}`)
	out, err := svc.Triggers().StartFromEvent(context.Background(), []byte(orderEvent))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Runs) != 0 || len(out.Failed) != 1 || len(runsOf(t, f.st, "fulfil")) != 0 {
		t.Fatalf("outcome %+v: want no run and fulfil failed", out)
	}
	got := notes.of(protocol.NoticeEventTriggerFailed)
	if len(got) != 1 || got[0].Job != "fulfil" || got[0].EventID != "6f1c-order-1" || got[0].Reason == "" {
		t.Fatalf("notices %+v, want one event.trigger_failed naming fulfil and the event", got)
	}
}

// The index follows job writes: an update's new pattern applies to the
// next event, and a paused job starts nothing.
func TestEventIndexFollowsJobWrites(t *testing.T) {
	svc, f, _ := eventFixture(t)
	ctx := context.Background()
	createJobOn(t, svc, `{"name": "fulfil", "on_event": [{"pattern": {"source": ["billing"]}}]}`)
	if out, _ := svc.Triggers().StartFromEvent(ctx, []byte(orderEvent)); len(out.Runs) != 0 {
		t.Fatalf("the first pattern matched: %+v", out)
	}
	j, err := jobspec.ParseUpdate("fulfil", []byte(`{"on_event": [{"pattern": {"source": ["shop"]}}]}`), svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Jobs().UpdateJob(ctx, j, 1); err != nil {
		t.Fatal(err)
	}
	if out, err := svc.Triggers().StartFromEvent(ctx, []byte(orderEvent)); err != nil || len(out.Runs) != 1 {
		t.Fatalf("after the update: %+v %v, want one run", out, err)
	}
	if _, err := svc.Jobs().PauseJob(ctx, "fulfil"); err != nil {
		t.Fatal(err)
	}
	second := []byte(`{"id": "e-2", "source": "shop", "detail-type": "x", "detail": {}}`)
	if out, _ := svc.Triggers().StartFromEvent(ctx, second); len(out.Runs) != 0 {
		t.Fatalf("a paused job started a run: %+v", out)
	}
	if _, err := svc.Triggers().ResumeJob(ctx, "fulfil"); err != nil {
		t.Fatal(err)
	}
	if out, err := svc.Triggers().StartFromEvent(ctx, second); err != nil || len(out.Runs) != 1 {
		t.Fatalf("after the resume: %+v %v, want one run", out, err)
	}
	if n := len(runsOf(t, f.st, "fulfil")); n != 2 {
		t.Fatalf("fulfil has %d runs, want 2", n)
	}
}
