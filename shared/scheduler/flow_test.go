package scheduler_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

func (f *fixture) triggerWith(t *testing.T, job string, params string) ledger.RunView {
	t.Helper()
	v, _, err := f.svc.Triggers().TriggerRun(context.Background(), scheduler.TriggerRequest{Job: job, Params: json.RawMessage(params)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A job with a concurrency limit of 2 per customer: the third and fourth
// runs of one customer wait (tasks CREATED, the run QUEUED, nothing
// dispatched) while another customer's run goes; a run that ends hands its
// room to the oldest waiting run; a waiting run cancelled ends CANCELLED
// and is never dispatched.
func TestConcurrencyLimitHoldsRunsAndHandsOn(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"orders","concurrency":{"limit":2,"key":"{{.Params.customer}}"}}`)
	var a []ledger.RunView
	for range 4 {
		a = append(a, f.triggerWith(t, "orders", `{"customer":"a"}`))
		f.clock.Advance(time.Millisecond)
	}
	b := f.triggerWith(t, "orders", `{"customer":"b"}`)
	dispatched := map[string]protocol.Envelope{}
	for range 3 {
		env := f.nextEnvelope(t)
		dispatched[env.Run] = env
	}
	for _, want := range []string{a[0].Run.ID, a[1].Run.ID, b.Run.ID} {
		if _, ok := dispatched[want]; !ok {
			t.Fatalf("run %s not dispatched; dispatched %v", want, dispatched)
		}
	}
	if left := f.q.(*memQueue).bodies(f.pool); len(left) != 0 {
		t.Fatalf("%d more envelopes: a waiting run was dispatched", len(left))
	}
	for _, w := range a[2:] {
		v := f.readRun(t, w.Run.ID)
		if v.Run.ExecutionState != statemodel.RunQueued || v.Tasks[0].Instance.Snapshot.State != statemodel.StateCreated {
			t.Fatalf("waiting run %s: %s, task %s", w.Run.ID, v.Run.ExecutionState, v.Tasks[0].Instance.Snapshot.State)
		}
	}
	// A pass over the due timers leaves the waiting runs waiting.
	f.clock.Advance(10 * time.Minute)
	f.tick(t, f.svc)
	if left := f.q.(*memQueue).bodies(f.pool); len(left) != 0 {
		t.Fatalf("a tick dispatched a waiting run: %d envelopes", len(left))
	}
	// The fourth run is cancelled while waiting.
	if err := f.svc.CancelRun(ctx, a[3].Run.ID, "no longer needed"); err != nil {
		t.Fatal(err)
	}
	if v := f.readRun(t, a[3].Run.ID); v.Run.ExecutionState != statemodel.RunCancelled {
		t.Fatalf("cancelled waiting run: %s", v.Run.ExecutionState)
	}
	// a[0] ends: a[2] is admitted and dispatched.
	f.finish(t, dispatched[a[0].Run.ID], protocol.OutcomeSucceeded)
	env := f.nextEnvelope(t)
	if env.Run != a[2].Run.ID {
		t.Fatalf("the hand-off dispatched run %s, want %s", env.Run, a[2].Run.ID)
	}
	f.finish(t, dispatched[a[1].Run.ID], protocol.OutcomeSucceeded)
	f.finish(t, env, protocol.OutcomeSucceeded)
	if left := f.q.(*memQueue).bodies(f.pool); len(left) != 0 {
		t.Fatalf("the cancelled run was dispatched: %d envelopes", len(left))
	}
	st, err := f.st.GetLimiter(ctx, "orders/a")
	if err != nil || st.Active != 0 || st.Waiting != 0 {
		t.Fatalf("limiter at the end: %+v, %v", st, err)
	}
}

// A run that ended while its handler lost the release (a crash between
// the run's end and the limiter's write) is repaired by the next pass of a
// waiting run's timer: the waiting run is admitted.
func TestLostHandOffRepairedByTheTicker(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"solo","concurrency":{"limit":1}}`)
	first := f.trigger(t, "solo", time.Time{})
	f.clock.Advance(time.Millisecond)
	second := f.trigger(t, "solo", time.Time{})
	env := f.nextEnvelope(t)
	if env.Run != first.Run.ID {
		t.Fatalf("dispatched %s, want the first run", env.Run)
	}
	// The crash: the first run's room is taken again as if its release
	// had never been written, after the run ended.
	f.finish(t, env, protocol.OutcomeSucceeded)
	if got := f.nextEnvelope(t); got.Run != second.Run.ID {
		t.Fatalf("hand-off dispatched %s", got.Run)
	}
	third := f.trigger(t, "solo", time.Time{})
	st, _ := f.st.GetLimiter(ctx, "solo/")
	if err := f.st.WriteLimiter(ctx, ledger.LimiterWrite{Name: "solo/", Expected: st.Version, State: st.Release(), DeleteAdmitted: second.Run.ID}); err != nil {
		t.Fatal(err)
	}
	st, _ = f.st.GetLimiter(ctx, "solo/")
	lost := st
	lost.Active++
	lost.Version++
	if err := f.st.WriteLimiter(ctx, ledger.LimiterWrite{Name: "solo/", Expected: st.Version, State: lost, PutAdmitted: &ledger.Admitted{RunID: first.Run.ID, AdmittedAt: f.clock.Now()}}); err != nil {
		t.Fatal(err)
	}
	_ = third
	if left := f.q.(*memQueue).bodies(f.pool); len(left) != 0 {
		t.Fatalf("dispatched while the room is held: %d", len(left))
	}
	f.clock.Advance(10 * time.Minute)
	f.tick(t, f.svc)
	if got := f.nextEnvelope(t); got.Run != third.Run.ID {
		t.Fatalf("after the repair dispatched %s, want the third run", got.Run)
	}
}
