package statemodel

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// signalAlphabet is the model check's alphabet for a signal task: its
// dispatches carry executor "signal"; for each attempt the scheduler's
// start, the operator's approve and reject (and a second approve with
// another event id, racing), the run timeout; and everything that must
// not apply to such an attempt: a worker's claim, heartbeat, success and
// failure, lease expiry and cancel timeout. Plus the queue timeout,
// retries, the operator's cancel, pause/resume, override and manual
// retry.
func signalAlphabet() []Event {
	w := func(id string, t EventType, n int) Event {
		return Event{ID: id, Type: t, Actor: ActorWorker, Attempt: n, WorkerID: "W"}
	}
	r := func(id string, t EventType, n int) Event {
		return Event{ID: id, Type: t, Actor: ActorReconciler, Attempt: n}
	}
	op := func(id string, t EventType) Event {
		return Event{ID: id, Type: t, Actor: ActorOperator, Operator: "ana", Reason: "model check"}
	}
	sig := func(id string, t EventType, n int) Event {
		return Event{ID: id, Type: t, Actor: ActorOperator, Attempt: n, Evidence: map[string]string{"by": "ana"}}
	}
	sc := func(id string, t EventType) Event { return Event{ID: id, Type: t, Actor: ActorScheduler} }
	evs := []Event{
		sc("created", EvCreated), sc("deps", EvDepsMet),
		sc("retry-1", EvRetryDue), sc("retry-2", EvRetryDue),
		op("cancel", EvCancelRequested), op("pause-1", EvPause), op("resume-1", EvResume),
		op("override-ok", EvOverrideSucceeded), op("manual-retry", EvManualRetry),
		r("queue-timeout-1", EvQueueTimeout, 1),
	}
	for n := 1; n <= 3; n++ {
		evs = append(evs,
			Event{ID: fmt.Sprintf("dispatch-%d", n), Type: EvDispatched, Actor: ActorExecutor, Attempt: n,
				Executor: ExecutorSignal, TokenHash: fmt.Sprintf("h%d", n)},
			Event{ID: fmt.Sprintf("signal-start-%d", n), Type: EvSignalRequested, Actor: ActorScheduler, Attempt: n})
	}
	for n := 1; n <= 2; n++ {
		evs = append(evs,
			sig(fmt.Sprintf("approve-%d", n), EvSignalSucceeded, n),
			sig(fmt.Sprintf("approve-%db", n), EvSignalSucceeded, n),
			sig(fmt.Sprintf("reject-%d", n), EvSignalFailed, n),
			r(fmt.Sprintf("signal-timeout-%d", n), EvSignalTimeout, n),
			w(fmt.Sprintf("claim-%d", n), EvStarted, n),
			w(fmt.Sprintf("hb-%d", n), EvHeartbeat, n),
			w(fmt.Sprintf("ok-%d", n), EvSucceeded, n),
			w(fmt.Sprintf("fail-%d", n), EvFailed, n),
			r(fmt.Sprintf("lease-%d", n), EvLeaseExpired, n),
			r(fmt.Sprintf("cancel-timeout-%d", n), EvCancelTimeout, n),
		)
	}
	return evs
}

// TestModelCheckSignalTasks explores every interleaving of a signal
// task's alphabet with the invariants of the full check, and invariant
// 10: a signal attempt never holds a lease, is never LOST or CANCELLING,
// waits with the run timeout as its timer, and takes no worker event.
func TestModelCheckSignalTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("exhaustive exploration; run without -short")
	}
	res := modelCheck(Apply, signalAlphabet(), checkPolicy(), mcMaxStates)
	t.Logf("signal tasks: %d states, %d transitions", res.States, res.Transitions)
	for _, v := range res.Violations {
		t.Error(v)
	}
	if res.States < 100 {
		t.Fatalf("only %d states reached", res.States)
	}
}

// workerOnSignal is a deliberately broken transition function: it lets
// a worker's events through on a signal attempt (as if the signal token
// authorized the worker routes).
func workerOnSignal(s Snapshot, e Event, now time.Time, p Policy) Decision {
	if e.Actor == ActorWorker || e.Type == EvLeaseExpired {
		cur, ok := s.Current()
		if ok && cur.Signal() {
			cur.Executor = ""
			s = s.Clone()
			s.Attempts[len(s.Attempts)-1] = cur
			d := Apply(s, e, now, p)
			return d
		}
	}
	return Apply(s, e, now, p)
}

func TestModelCheckSignalCatchesBrokenModel(t *testing.T) {
	res := modelCheck(workerOnSignal, signalAlphabet(), checkPolicy(), 200_000)
	found := false
	for _, v := range res.Violations {
		found = found || strings.HasPrefix(v, "invariant 10") || strings.HasPrefix(v, "invariant 5")
	}
	if !found {
		t.Fatalf("model check missed the defect; %d violations", len(res.Violations))
	}
}

// TestSignalTaskLife walks one signal task: started at once without a
// lease, its timer the run timeout; a timeout before it is due is
// refused; the timeout retries by policy with category timeout; the next
// attempt's approval, with its output ref, succeeds it; an approval of the
// first attempt is stale.
func TestSignalTaskLife(t *testing.T) {
	p := DefaultPolicy()
	p.Random = nil
	p.Timeouts.Run = 24 * time.Hour
	now := t0
	s := Snapshot{}
	step := func(e Event, want Outcome) Decision {
		t.Helper()
		d := Apply(s, e, now, p)
		if d.Outcome != want {
			t.Fatalf("%s: %s (%v), want %s", e, d.Outcome, d.Err, want)
		}
		if d.Outcome == Applied {
			s = d.Snapshot
		}
		return d
	}
	sc := func(id string, typ EventType, n int) Event {
		return Event{ID: id, Type: typ, Actor: ActorScheduler, Attempt: n}
	}
	step(sc("c", EvCreated, 0), Applied)
	step(sc("d", EvDepsMet, 0), Applied)
	step(Event{ID: "q1", Type: EvDispatched, Actor: ActorExecutor, Attempt: 1, Executor: ExecutorSignal}, Applied)
	step(sc("s1", EvSignalRequested, 1), Applied)
	if at, kind := s.Timer(); s.State != StateRunning || kind != TimerSignal || !at.Equal(t0.Add(24*time.Hour)) || s.Lease != (Lease{}) {
		t.Fatalf("started: %s timer %s at %s lease %v", s.State, kind, at, s.Lease)
	}
	d := step(Event{ID: "hb", Type: EvHeartbeat, Actor: ActorWorker, Attempt: 1}, Rejected)
	if !errors.Is(d.Err, ErrGuard) {
		t.Fatalf("worker heartbeat on a signal attempt: %v", d.Err)
	}
	step(Event{ID: "lease", Type: EvLeaseExpired, Actor: ActorReconciler, Attempt: 1}, Rejected)
	step(Event{ID: "to-early", Type: EvSignalTimeout, Actor: ActorReconciler, Attempt: 1}, Rejected)
	now = t0.Add(24 * time.Hour)
	d = step(Event{ID: "to", Type: EvSignalTimeout, Actor: ActorReconciler, Attempt: 1}, Applied)
	if s.State != StateUpForRetry || d.Transition.AttemptRecord.ErrorCategory != CategoryTimeout {
		t.Fatalf("timed out: %s %+v", s.State, d.Transition.AttemptRecord)
	}
	now = s.RetryAt
	step(sc("r", EvRetryDue, 0), Applied)
	step(Event{ID: "q2", Type: EvDispatched, Actor: ActorExecutor, Attempt: 2, Executor: ExecutorSignal}, Applied)
	step(sc("s2", EvSignalRequested, 2), Applied)
	step(Event{ID: "old", Type: EvSignalSucceeded, Actor: ActorOperator, Attempt: 1}, Stale)
	d = step(Event{ID: "ok", Type: EvSignalSucceeded, Actor: ActorOperator, Attempt: 2, OutputRef: "s3://x",
		Evidence: map[string]string{"by": "ana"}}, Applied)
	if s.State != StateSucceeded || d.Transition.Evidence["by"] != "ana" || d.Transition.AttemptRecord.OutputRef != "s3://x" {
		t.Fatalf("approved: %s %+v", s.State, d.Transition)
	}
}

// TestSignalOnWorkerAttemptRefused: a signal for an attempt a worker runs
// is refused by its guard, and a rejection's category defaults to
// rejected.
func TestSignalOnWorkerAttemptRefused(t *testing.T) {
	p := checkPolicy()
	s := Snapshot{}
	for _, e := range []Event{
		{ID: "c", Type: EvCreated, Actor: ActorScheduler}, {ID: "d", Type: EvDepsMet, Actor: ActorScheduler},
		{ID: "q", Type: EvDispatched, Actor: ActorExecutor, Attempt: 1},
		{ID: "w", Type: EvStarted, Actor: ActorWorker, Attempt: 1, WorkerID: "W"},
	} {
		s = Apply(s, e, t0, p).Snapshot
	}
	d := Apply(s, Event{ID: "x", Type: EvSignalSucceeded, Actor: ActorOperator, Attempt: 1}, t0, p)
	if d.Outcome != Rejected || !errors.Is(d.Err, ErrGuard) {
		t.Fatalf("signal on a worker's attempt: %s %v", d.Outcome, d.Err)
	}
	s = Snapshot{}
	for _, e := range []Event{
		{ID: "c", Type: EvCreated, Actor: ActorScheduler}, {ID: "d", Type: EvDepsMet, Actor: ActorScheduler},
		{ID: "q", Type: EvDispatched, Actor: ActorExecutor, Attempt: 1, Executor: ExecutorSignal},
		{ID: "s", Type: EvSignalRequested, Actor: ActorScheduler, Attempt: 1},
	} {
		s = Apply(s, e, t0, p).Snapshot
	}
	d = Apply(s, Event{ID: "no", Type: EvSignalFailed, Actor: ActorOperator, Attempt: 1}, t0, p)
	if d.Outcome != Applied || d.Transition.AttemptRecord.ErrorCategory != CategoryRejected || d.Snapshot.State != StateUpForRetry {
		t.Fatalf("rejected: %s %v %+v", d.Outcome, d.Err, d.Snapshot)
	}
	d = Apply(s, Event{ID: "cx", Type: EvCancelRequested, Actor: ActorOperator, Operator: "ana"}, t0, p)
	if d.Outcome != Applied || d.Snapshot.State != StateCancelled {
		t.Fatalf("cancel of a waiting signal task: %s %v %s", d.Outcome, d.Err, d.Snapshot.State)
	}
}
