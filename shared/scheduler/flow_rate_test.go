package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
)

// rateFixture is a fixture whose service sends delay messages, so that a
// test sees the timer armed at a rate window's edge.
func rateFixture(t *testing.T) (*fixture, string) {
	f := newFixture(t)
	mq := f.q.(*memQueue)
	delay := mq.create(fmt.Sprintf("sched%d-delay", seq.Add(1)))
	f.svc = mustNew(f.st, f.q, scheduler.Config{Pools: map[string]string{"default": f.pool}, Now: f.clock.Now, DelayQueueURL: delay})
	return f, delay
}

// lastTimer is the last delay message, decoded.
func lastTimer(t *testing.T, f *fixture, delay string) (protocol.Timer, json.RawMessage) {
	t.Helper()
	bodies := f.q.(*memQueue).bodies(delay)
	if len(bodies) == 0 {
		t.Fatal("no timer armed")
	}
	var tm protocol.Timer
	if err := json.Unmarshal([]byte(bodies[len(bodies)-1]), &tm); err != nil {
		t.Fatal(err)
	}
	return tm, json.RawMessage(bodies[len(bodies)-1])
}

// rate_limit admits at most runs per window: the third run of a 2-a-minute
// job waits (reason rate_limit) with a timer at the window's edge, and the
// timer's pass admits it; a tick before the edge admits nothing.
func TestFlowRateLimitWaitsForTheWindow(t *testing.T) {
	f, delay := rateFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"api","rate_limit":{"runs":2,"per":"1m"}}`)
	start := f.clock.Now()
	var runs []string
	for range 3 {
		runs = append(runs, f.trigger(t, "api", time.Time{}).Run.ID)
		f.clock.Advance(time.Second)
	}
	for _, want := range runs[:2] {
		if got := f.nextEnvelope(t); got.Run != want {
			t.Fatalf("dispatched %s, want %s", got.Run, want)
		}
	}
	adm, err := f.svc.Flow().Admission(ctx, f.readRun(t, runs[2]))
	if err != nil || adm == nil || adm.State != protocol.AdmissionWaiting || adm.Reason != "rate_limit" || adm.Limiter != "api/" {
		t.Fatalf("third run's admission %+v, %v", adm, err)
	}
	tm, body := lastTimer(t, f, delay)
	if tm.Run != runs[2] || !tm.At.Equal(start.Add(time.Minute)) {
		t.Fatalf("timer %+v, want run %s at %s", tm, runs[2], start.Add(time.Minute))
	}
	// Before the edge the window is full: nothing is admitted.
	f.clock.Advance(30 * time.Second)
	f.tick(t, f.svc)
	if left := f.q.(*memQueue).bodies(f.pool); len(left) != 0 {
		t.Fatalf("admitted inside a full window: %d envelopes", len(left))
	}
	f.clock.Advance(tm.At.Sub(f.clock.Now()))
	f.deliver(t, body)
	if got := f.nextEnvelope(t); got.Run != runs[2] {
		t.Fatalf("at the window's edge dispatched %s, want %s", got.Run, runs[2])
	}
}

// With both concurrency and rate_limit a run is admitted when both have
// room: the second run waits for concurrency; when the first ends it is
// admitted (2 in the window); the third then waits for the rate window
// even though the second's end made concurrency room.
func TestFlowConcurrencyAndRateBothHold(t *testing.T) {
	f, delay := rateFixture(t)
	f.createJob(t, `{"name":"both","concurrency":{"limit":1},"rate_limit":{"runs":2,"per":"10m"}}`)
	var runs []string
	for range 3 {
		runs = append(runs, f.trigger(t, "both", time.Time{}).Run.ID)
		f.clock.Advance(time.Second)
	}
	env := f.nextEnvelope(t)
	if env.Run != runs[0] {
		t.Fatalf("dispatched %s first", env.Run)
	}
	f.finish(t, env, protocol.OutcomeSucceeded)
	env = f.nextEnvelope(t)
	if env.Run != runs[1] {
		t.Fatalf("hand-off dispatched %s, want %s", env.Run, runs[1])
	}
	f.finish(t, env, protocol.OutcomeSucceeded)
	if left := f.q.(*memQueue).bodies(f.pool); len(left) != 0 {
		t.Fatalf("a third admission inside the window: %d envelopes", len(left))
	}
	adm, err := f.svc.Flow().Admission(context.Background(), f.readRun(t, runs[2]))
	if err != nil || adm == nil || adm.Reason != "rate_limit" {
		t.Fatalf("third run's admission %+v, %v", adm, err)
	}
	tm, body := lastTimer(t, f, delay)
	if tm.Run != runs[2] {
		t.Fatalf("timer for %s, want %s", tm.Run, runs[2])
	}
	f.clock.Advance(tm.At.Sub(f.clock.Now()))
	f.deliver(t, body)
	if got := f.nextEnvelope(t); got.Run != runs[2] {
		t.Fatalf("at the window's edge dispatched %s", got.Run)
	}
}
