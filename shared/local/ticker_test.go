package local_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/runledger/runledger/shared/local"
)

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// Fire sends one EventBridge scheduled event, stamped by the injected
// clock, with a fresh id each time.
func TestTickerFireSendsScheduledEvent(t *testing.T) {
	t.Parallel()
	clock := time.Date(2030, 5, 6, 7, 8, 9, 987654321, time.FixedZone("CEST", 2*3600))
	var got []events.EventBridgeEvent
	var lcs []*lambdacontext.LambdaContext
	counters := local.NewCounters()
	tk := &local.Ticker{
		Name: "ticker", Interval: time.Minute, Account: "123456789012", Region: "eu-west-1",
		Now:      func() time.Time { return clock },
		Counters: counters,
		Handler: func(ctx context.Context, ev events.EventBridgeEvent) error {
			got = append(got, ev)
			lc, _ := lambdacontext.FromContext(ctx)
			lcs = append(lcs, lc)
			return nil
		},
	}
	for range 2 {
		if err := tk.Fire(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d events, want 2", len(got))
	}
	ev := got[0]
	want := events.EventBridgeEvent{
		Version: "0", ID: ev.ID, DetailType: "Scheduled Event", Source: "aws.events",
		AccountID: "123456789012", Time: time.Date(2030, 5, 6, 5, 8, 9, 0, time.UTC), Region: "eu-west-1",
		Resources: []string{"arn:aws:events:eu-west-1:123456789012:rule/ticker"},
		Detail:    json.RawMessage("{}"),
	}
	if !reflect.DeepEqual(ev, want) {
		t.Errorf("event\n%+v\nwant\n%+v", ev, want)
	}
	if !uuidPattern.MatchString(ev.ID) || got[1].ID == ev.ID {
		t.Errorf("ids %q and %q, want two distinct UUIDs", ev.ID, got[1].ID)
	}
	if lcs[0] == nil || lcs[0].InvokedFunctionArn != "arn:aws:lambda:eu-west-1:123456789012:function:ticker" {
		t.Errorf("lambda context %+v", lcs[0])
	}

	doc, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if ours, fixture := shape(t, doc), shape(t, mustReadFile(t, "testdata/scheduled_event.json")); !reflect.DeepEqual(ours, fixture) {
		t.Errorf("event JSON shape %v, want testdata/scheduled_event.json's %v", ours, fixture)
	}
	var raw map[string]any
	json.Unmarshal(doc, &raw)
	if raw["time"] != "2030-05-06T05:08:09Z" {
		t.Errorf("time %v, want EventBridge's 2030-05-06T05:08:09Z", raw["time"])
	}
	if f := counters.Snapshot().Functions["ticker"]; f.Invocations != 2 || f.Errors != 0 {
		t.Errorf("counted %+v, want 2 invocations", f)
	}
}

func TestTickerFireCustomSourceAndFailures(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var ev events.EventBridgeEvent
	counters := local.NewCounters()
	tk := &local.Ticker{
		Name: "reconciler", Source: "runledger.local", DetailType: "Reconcile", RuleARN: "arn:aws:events:us-east-1:000000000000:rule/r",
		Counters: counters,
		Handler: func(_ context.Context, e events.EventBridgeEvent) error {
			ev = e
			return boom
		},
	}
	if err := tk.Fire(t.Context()); !errors.Is(err, boom) {
		t.Fatalf("Fire = %v, want the handler's error", err)
	}
	if ev.Source != "runledger.local" || ev.DetailType != "Reconcile" || !reflect.DeepEqual(ev.Resources, []string{"arn:aws:events:us-east-1:000000000000:rule/r"}) {
		t.Errorf("event %+v, want the configured source, detail type and rule", ev)
	}

	tk.Handler = func(context.Context, events.EventBridgeEvent) error { panic("ticker bug") }
	if err := tk.Fire(t.Context()); err == nil {
		t.Fatal("Fire of a panicking handler returned no error")
	}
	if f := counters.Snapshot().Functions["reconciler"]; f.Invocations != 2 || f.Errors != 2 {
		t.Errorf("counted %+v, want 2 failed invocations", f)
	}
}

// Run sends one event at once, then one every interval.
func TestTickerRun(t *testing.T) {
	t.Parallel()
	t.Run("fires at start", func(t *testing.T) {
		t.Parallel()
		got := make(chan events.EventBridgeEvent, 10)
		tk := &local.Ticker{Name: "ticker", Interval: time.Hour, Handler: func(_ context.Context, ev events.EventBridgeEvent) error {
			got <- ev
			return nil
		}}
		stop := runInBackground(t, tk.Run)
		// An hour's interval: only the start can have sent it.
		receiveWithin(t, got, 10*time.Second, "event at start")
		stop()
	})
	t.Run("fires every interval", func(t *testing.T) {
		t.Parallel()
		got := make(chan events.EventBridgeEvent, 100)
		tk := &local.Ticker{Name: "ticker", Interval: 10 * time.Millisecond, Handler: func(_ context.Context, ev events.EventBridgeEvent) error {
			got <- ev
			return nil
		}}
		stop := runInBackground(t, tk.Run)
		seen := map[string]bool{}
		for range 5 {
			seen[receiveWithin(t, got, 10*time.Second, "tick").ID] = true
		}
		stop()
		if len(seen) != 5 {
			t.Errorf("5 events with %d distinct ids", len(seen))
		}
	})
	t.Run("invalid", func(t *testing.T) {
		t.Parallel()
		h := func(context.Context, events.EventBridgeEvent) error { return nil }
		for _, tk := range []*local.Ticker{
			{Name: "ticker", Handler: h},
			{Name: "ticker", Interval: -time.Second, Handler: h},
			{Name: "ticker", Interval: time.Second},
			{Interval: time.Second, Handler: h},
		} {
			if err := tk.Run(context.Background()); err == nil {
				t.Errorf("Run accepted %+v", tk)
			}
		}
	})
}
