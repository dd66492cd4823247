package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// admissionOf is a run's admission answer.
func (f *fixture) admissionOf(t *testing.T, runID string) *protocol.Admission {
	t.Helper()
	adm, err := f.svc.Flow().Admission(context.Background(), f.readRun(t, runID))
	if err != nil {
		t.Fatal(err)
	}
	return adm
}

// wantWaiting fails unless a run waits in limiter for reason at place
// (0: any), none of its tasks dispatched.
func (f *fixture) wantWaiting(t *testing.T, runID, limiter, reason string, place int) {
	t.Helper()
	adm := f.admissionOf(t, runID)
	if adm == nil || adm.State != protocol.AdmissionWaiting || adm.Limiter != limiter || adm.Reason != reason || (place != 0 && adm.Place != place) {
		t.Fatalf("run %s: admission %+v; want waiting in %s for %s at %d", runID, adm, limiter, reason, place)
	}
	for _, tv := range f.readRun(t, runID).Tasks {
		if s := tv.Instance.Snapshot; s.State != statemodel.StateCreated || s.Attempt != 0 {
			t.Fatalf("waiting run %s: task %s is %s at attempt %d", runID, tv.Instance.Key.Task, s.State, s.Attempt)
		}
	}
}

// envelopesOf receives envelopes until each of runs has one, and fails on
// another run's. A duplicate of an attempt (two dispatchers racing may
// send one) is passed over: one of these runs', or a run's that ended.
func (f *fixture) envelopesOf(t *testing.T, runs ...string) map[string]protocol.Envelope {
	t.Helper()
	want := map[string]bool{}
	for _, r := range runs {
		want[r] = true
	}
	got := map[string]protocol.Envelope{}
	for len(got) < len(runs) {
		env := f.nextEnvelope(t)
		if !want[env.Run] && f.readRun(t, env.Run).Run.ExecutionState.Terminal() {
			continue
		}
		if !want[env.Run] {
			t.Fatalf("dispatched run %s, want %v (got %v so far)", env.Run, runs, got)
		}
		if _, dup := got[env.Run]; !dup {
			got[env.Run] = env
		}
	}
	return got
}

// limiterState reads a limiter item.
func (f *fixture) limiterState(t *testing.T, name string) (active, waiting int) {
	t.Helper()
	st, err := f.st.GetLimiter(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Active, st.Waiting
}

// A job whose rate_limit names its own group enters two limiters: its
// concurrency limiter first, then, once admitted there, the group's rate
// limiter, which another job's runs fill too. A run admitted for
// concurrency waits for the rate window holding its concurrency room; a
// run waiting for concurrency takes nothing of the rate window; the
// window's edge admits the rate queue; a run's end hands its concurrency
// room on to a run that then waits for the rate window; admitted_at is the
// later admission. On DynamoDB Local.
func TestFlowRateLimitOfItsOwnGroupBesideConcurrency(t *testing.T) {
	f := newEmulatorFixture(t)
	f.createJob(t, `{"name":"sync","concurrency":{"limit":2},"rate_limit":{"runs":2,"per":"1h","group":"api"}}`)
	f.createJob(t, `{"name":"ping","rate_limit":{"runs":2,"per":"1h","group":"api"}}`)
	// Two runs of the other job fill the group's window.
	for range 2 {
		f.trigger(t, "ping", time.Time{})
		f.clock.Advance(time.Second)
	}
	pings := []protocol.Envelope{f.nextEnvelope(t), f.nextEnvelope(t)}
	var runs []string
	for range 3 {
		runs = append(runs, f.trigger(t, "sync", time.Time{}).Run.ID)
		f.clock.Advance(time.Second)
	}
	f.wantWaiting(t, runs[0], "api/", "rate_limit", 1)
	f.wantWaiting(t, runs[1], "api/", "rate_limit", 2)
	f.wantWaiting(t, runs[2], "sync/", "concurrency", 1)
	if a, w := f.limiterState(t, "sync/"); a != 2 || w != 1 {
		t.Fatalf("concurrency limiter: %d active, %d waiting; want the two waiting for rate holding their room", a, w)
	}
	if a, w := f.limiterState(t, "api/"); a != 2 || w != 2 {
		t.Fatalf("rate limiter: %d active, %d waiting; want the run waiting for concurrency out of it", a, w)
	}
	for _, env := range pings {
		f.finish(t, env, protocol.OutcomeSucceeded) // an end makes no rate room
	}
	f.wantWaiting(t, runs[0], "api/", "rate_limit", 1)

	// The window's edge: a pass of the waiting runs' timers admits both.
	f.clock.Advance(time.Hour)
	edge := f.clock.Now()
	f.tick(t, f.svc)
	got := f.envelopesOf(t, runs[0], runs[1])
	adm := f.admissionOf(t, runs[0])
	if adm == nil || adm.State != protocol.AdmissionAdmitted || adm.Limiter != "sync/" || adm.AdmittedAt.Before(edge) {
		t.Fatalf("admitted run: %+v; want admitted in sync/ at the rate admission (>= %s)", adm, edge)
	}
	f.wantWaiting(t, runs[2], "sync/", "concurrency", 1)

	// An end hands the concurrency room on; the run then waits for the
	// window its two predecessors filled.
	f.finish(t, got[runs[0]], protocol.OutcomeSucceeded)
	f.wantWaiting(t, runs[2], "api/", "rate_limit", 1)
	if a, w := f.limiterState(t, "sync/"); a != 2 || w != 0 {
		t.Fatalf("concurrency limiter after the hand-off: %d active, %d waiting", a, w)
	}
	f.finish(t, got[runs[1]], protocol.OutcomeSucceeded)
	f.clock.Advance(time.Hour)
	f.tick(t, f.svc)
	f.finish(t, f.envelopesOf(t, runs[2])[runs[2]], protocol.OutcomeSucceeded)
	for _, name := range []string{"sync/", "api/"} {
		if a, w := f.limiterState(t, name); a != 0 || w != 0 {
			t.Fatalf("%s at the end: %d active, %d waiting; every run left both", name, a, w)
		}
	}
}

// An operator's retry of a task of a limited run that ended enters the
// run's limiter again: with a limit of 1, run A failed and run B active,
// retrying A's task leaves it waiting (its task not dispatched, also by
// its timer or a resume) until B ends, then A runs. On DynamoDB Local.
func TestFlowRetryOfEndedRunReentersItsLimiter(t *testing.T) {
	f := newEmulatorFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"solo","concurrency":{"limit":1}}`)
	a := f.trigger(t, "solo", time.Time{}).Run.ID
	f.clock.Advance(time.Second)
	b := f.trigger(t, "solo", time.Time{}).Run.ID
	envA := f.nextEnvelope(t)
	if envA.Run != a {
		t.Fatalf("dispatched %s first, want %s", envA.Run, a)
	}
	f.finish(t, envA, protocol.OutcomeFailed)
	if st := f.readRun(t, a).Run.ExecutionState; st != statemodel.RunFailed {
		t.Fatalf("run A: %s, want FAILED", st)
	}
	envB := f.nextEnvelope(t)
	if envB.Run != b {
		t.Fatalf("the hand-off dispatched %s, want %s", envB.Run, b)
	}

	key := ledger.InstanceKey{Run: a, Task: envA.Task}
	if err := f.svc.RetryTask(ctx, key, scheduler.Retry{Operator: "ana", Reason: "fixed"}); err != nil {
		t.Fatal(err)
	}
	held := func(when string) {
		t.Helper()
		adm := f.admissionOf(t, a)
		if adm == nil || adm.State != protocol.AdmissionWaiting || adm.Limiter != "solo/" || adm.Reason != "concurrency" || adm.Place != 1 {
			t.Fatalf("%s: run A's admission %+v; want waiting in solo/ at 1", when, adm)
		}
		v := f.readRun(t, a)
		if s := v.Tasks[0].Instance.Snapshot; s.Attempt != envA.Attempt || v.Run.ExecutionState.Terminal() {
			t.Fatalf("%s: run A %s, task %s at attempt %d; want reopened and not dispatched", when, v.Run.ExecutionState, s.State, s.Attempt)
		}
		if act, w := f.limiterState(t, "solo/"); act != 1 || w != 1 {
			t.Fatalf("%s: limiter %d active, %d waiting; want B active and A waiting", when, act, w)
		}
	}
	held("after the retry")
	// The retried task's timer passes while B runs: A stays held.
	f.clock.Advance(10 * time.Minute)
	f.tick(t, f.svc)
	held("after a tick")
	// Paused and resumed while it waits, the task is held again.
	if err := f.svc.PauseRun(ctx, a, "hold on"); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.ResumeRun(ctx, a, "go on"); err != nil {
		t.Fatal(err)
	}
	held("after a pause and a resume")

	f.finish(t, envB, protocol.OutcomeSucceeded)
	env := f.nextEnvelope(t)
	if env.Run != a || env.Attempt != envA.Attempt+1 {
		t.Fatalf("after B ended dispatched %s attempt %d, want A's attempt %d", env.Run, env.Attempt, envA.Attempt+1)
	}
	if adm := f.admissionOf(t, a); adm == nil || adm.State != protocol.AdmissionAdmitted {
		t.Fatalf("run A's admission after B ended: %+v", adm)
	}
	f.finish(t, env, protocol.OutcomeSucceeded)
	if st := f.readRun(t, a).Run.ExecutionState; st != statemodel.RunSucceeded {
		t.Fatalf("run A: %s, want SUCCEEDED", st)
	}
	if act, w := f.limiterState(t, "solo/"); act != 0 || w != 0 {
		t.Fatalf("limiter at the end: %d active, %d waiting", act, w)
	}
}

// A trigger of a job whose rate_limit names its own limiter is refused
// before anything is written when the rate key does not render (422 naming
// rate_limit.key) and when the rate limiter's queue is full (429), however
// the concurrency limiter stands. On DynamoDB Local.
func TestFlowSecondLimiterRefusesTrigger(t *testing.T) {
	f := newEmulatorFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"both","concurrency":{"limit":1},"rate_limit":{"runs":1,"per":"1m","group":"api","key":"{{.Params.region}}"}}`)
	_, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "both"})
	var je *jobspec.Error
	if !errors.As(err, &je) || je.Field != "rate_limit.key" {
		t.Fatalf("a trigger whose rate key does not render: %v; want a 422 naming rate_limit.key", err)
	}
	f.fillLimiter(t, "api/eu")
	_, _, err = f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "both", Params: json.RawMessage(`{"region":"eu"}`)})
	if !errors.Is(err, ledger.ErrLimitQueueFull) {
		t.Fatalf("a trigger into a full rate queue: %v", err)
	}
	if runs, _, err := f.st.ListRuns(ctx, ledger.RunFilter{Job: "both"}); err != nil || len(runs) != 0 {
		t.Fatalf("refused triggers created %d runs (%v)", len(runs), err)
	}
	if v := f.triggerWith(t, "both", `{"region":"us"}`); f.admissionOf(t, v.Run.ID).State != protocol.AdmissionAdmitted {
		t.Fatalf("a trigger with room in both: %+v", f.admissionOf(t, v.Run.ID))
	}
}
