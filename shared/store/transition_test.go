package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// race runs fn from n goroutines released at the same moment and returns
// their results in goroutine order.
func race[T any](n int, fn func(i int) T) []T {
	out := make([]T, n)
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			out[i] = fn(i)
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	return out
}

type outcome struct {
	res store.Result
	err error
}

// TestClaimRace: 16 workers claim the same QUEUED attempt at once, 20 times.
// Exactly one claim is applied each time; the other 15 are classified as
// rejected because the attempt is already claimed by another worker.
func TestClaimRace(t *testing.T) {
	t.Parallel()
	const rounds, workers = 20, 16
	ts := newStore(t)
	ctx := context.Background()
	won := 0
	for round := range rounds {
		v := ts.mustCreate(t, newRun("claims", "main"))
		key := v.Tasks[0].Instance.Key
		now := ts.toQueued(t, key)
		events := make([]statemodel.Event, workers)
		for i := range events {
			events[i] = started(1, fmt.Sprintf("worker-%d", i))
		}
		got := race(workers, func(i int) outcome {
			res, err := ts.Transition(ctx, key, events[i], now, policy())
			return outcome{res, err}
		})
		applied, rejected, winner := 0, 0, -1
		for i, o := range got {
			switch o.res.Outcome {
			case statemodel.Applied:
				if o.err != nil {
					t.Fatalf("round %d worker %d: applied with error %v", round, i, o.err)
				}
				applied++
				winner = i
			case statemodel.Rejected:
				// A lost claim meets RUNNING, where attempt.started has no
				// row; the attempt as found names the winner.
				if !errors.Is(o.err, statemodel.ErrIllegalTransition) && !errors.Is(o.err, statemodel.ErrGuard) {
					t.Errorf("round %d worker %d: rejected with %v, want illegal transition or guard", round, i, o.err)
				}
				cur, _ := o.res.Snapshot.Current()
				if !cur.Claimed() || cur.WorkerID == events[i].WorkerID {
					t.Errorf("round %d worker %d: rejected but attempt %+v is not claimed by another worker", round, i, cur)
				}
				rejected++
			default:
				t.Errorf("round %d worker %d: outcome %s (err %v)", round, i, o.res.Outcome, o.err)
			}
		}
		if applied != 1 || rejected != workers-1 {
			t.Fatalf("round %d: %d applied, %d rejected; want 1 and %d", round, applied, rejected, workers-1)
		}
		inst, err := ts.GetInstance(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		cur, _ := inst.Snapshot.Current()
		if inst.Snapshot.State != statemodel.StateRunning || cur.WorkerID != events[winner].WorkerID || cur.ClaimEventID != events[winner].ID {
			t.Fatalf("round %d: stored %s attempt %+v, want RUNNING claimed by %s", round, inst.Snapshot.State, cur, events[winner].WorkerID)
		}
		if n := ts.countHistory(t, key); n != 4 {
			t.Fatalf("round %d: %d history records, want 4 (created, deps met, dispatched, started)", round, n)
		}
		won++
	}
	if won != rounds {
		t.Fatalf("claim race settled %d/%d times", won, rounds)
	}
	t.Logf("claim race: %d/%d rounds with exactly one winner among %d workers", won, rounds, workers)
}

// TestSameEventConcurrently: one worker event delivered by 16 goroutines at
// once gives exactly one transition record and 15 duplicates that carry the
// first outcome.
func TestSameEventConcurrently(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.mustCreate(t, newRun("dups", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.toQueued(t, key)
	ts.step(t, key, started(1, "w"), now)
	done := ev(statemodel.EvSucceeded, 1)
	exit := 0
	done.ExitCode = &exit
	before := ts.countHistory(t, key)

	got := race(16, func(int) outcome {
		res, err := ts.Transition(ctx, key, done, now.Add(time.Second), policy())
		return outcome{res, err}
	})
	applied, dups := 0, 0
	var first statemodel.SeenEvent
	for i, o := range got {
		if o.err != nil {
			t.Fatalf("delivery %d: %v", i, o.err)
		}
		switch o.res.Outcome {
		case statemodel.Applied:
			applied++
			first = statemodel.SeenEvent{ID: done.ID, Seq: o.res.Transition.Seq, To: o.res.Transition.To}
		case statemodel.Duplicate:
			dups++
		default:
			t.Fatalf("delivery %d: outcome %s", i, o.res.Outcome)
		}
	}
	if applied != 1 || dups != 15 {
		t.Fatalf("%d applied, %d duplicates; want 1 and 15", applied, dups)
	}
	for i, o := range got {
		if o.res.Outcome == statemodel.Duplicate && o.res.First != first {
			t.Errorf("delivery %d: first outcome %+v, want %+v", i, o.res.First, first)
		}
		// A duplicate answers with the state that stands after the race,
		// not with the snapshot it read before the winner wrote.
		if o.res.Outcome == statemodel.Duplicate && o.res.Snapshot.State != statemodel.StateSucceeded {
			t.Errorf("delivery %d: duplicate answers state %s, want %s", i, o.res.Snapshot.State, statemodel.StateSucceeded)
		}
	}
	hist, err := ts.FullHistory(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tr := range hist {
		if tr.EventID == done.ID {
			n++
		}
	}
	if n != 1 || len(hist) != before+1 {
		t.Fatalf("%d records of the event, %d records in all (was %d); want 1 and %d", n, len(hist), before, before+1)
	}
}

// TestDuplicateWriteFindsStandingInstance: a decision made from a snapshot
// read before another delivery of the same event won is refused as a
// duplicate, and the refusal carries the instance as the write found it.
func TestDuplicateWriteFindsStandingInstance(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.mustCreate(t, newRun("dupwrite", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.toQueued(t, key)
	ts.step(t, key, started(1, "w"), now)
	before, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	d := statemodel.Apply(before.Snapshot, ev(statemodel.EvSucceeded, 1), now.Add(time.Second), policy())
	if d.Outcome != statemodel.Applied {
		t.Fatalf("decision %s, want applied", d.Outcome)
	}
	if err := ts.ApplyDecision(ctx, before, d); err != nil {
		t.Fatalf("the winner's write: %v", err)
	}
	err = ts.ApplyDecision(ctx, before, d)
	var dup *store.DuplicateEventError
	if !errors.As(err, &dup) {
		t.Fatalf("the same decision again: err = %v, want a DuplicateEventError", err)
	}
	if dup.Now == nil || dup.Now.Snapshot.State != statemodel.StateSucceeded || dup.Now.Snapshot.Version != d.Snapshot.Version {
		t.Fatalf("duplicate found %+v, want the instance as the winner left it (SUCCEEDED, version %d)", dup.Now, d.Snapshot.Version)
	}
}

// TestLateSuccessFromOlderAttempt: attempt 1 is lost, attempt 2 starts, then
// attempt 1 reports success. It is recorded on attempt 1 as late (once, how
// ever often it is delivered) and the instance does not change.
func TestLateSuccessFromOlderAttempt(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	p := policy()
	v := ts.mustCreate(t, newRun("late", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.toQueued(t, key)
	ts.step(t, key, started(1, "w1"), now)
	now = ts.clock.Advance(p.Timeouts.Heartbeat + time.Second)
	ts.step(t, key, ev(statemodel.EvLeaseExpired, 1), now)
	now = ts.clock.Advance(p.EvidenceWindow + time.Second)
	ts.step(t, key, ev(statemodel.EvWindowExpired, 1), now)
	now = ts.clock.Advance(p.Retry.MaxInterval)
	ts.step(t, key, ev(statemodel.EvRetryDue, 0), now)
	d := ev(statemodel.EvDispatched, 2)
	d.TokenHash = "hash-2"
	ts.step(t, key, d, now)
	ts.step(t, key, started(2, "w2"), now)

	before, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	late := ev(statemodel.EvSucceeded, 1)
	late.EventTime = now.Add(-time.Minute)
	for delivery := range 3 {
		res, err := ts.Transition(ctx, key, late, now.Add(time.Second), p)
		if err != nil || res.Outcome != statemodel.Stale {
			t.Fatalf("delivery %d: outcome %s, err %v; want stale", delivery, res.Outcome, err)
		}
		if res.Late == nil || res.Late.Attempt != 1 || res.Late.Outcome != statemodel.OutcomeSucceeded {
			t.Fatalf("delivery %d: late event %+v", delivery, res.Late)
		}
	}
	after, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if after.Snapshot.Version != before.Snapshot.Version || after.Snapshot.State != statemodel.StateRunning ||
		!after.Snapshot.EqualState(before.Snapshot) || after.Snapshot.Attempt != 2 {
		t.Fatalf("instance changed: before %+v, after %+v", before.Snapshot, after.Snapshot)
	}
	view, err := ts.ReadRun(ctx, key.Run)
	if err != nil {
		t.Fatal(err)
	}
	atts := view.Tasks[0].Attempts
	if len(atts) != 2 {
		t.Fatalf("%d attempt items, want 2", len(atts))
	}
	if len(atts[0].Late) != 1 || atts[0].Late[0].EventID != late.ID || !atts[0].Late[0].EventTime.Equal(late.EventTime) {
		t.Fatalf("attempt 1 late events %+v, want exactly the late success", atts[0].Late)
	}
	if atts[0].Outcome != statemodel.OutcomeLost || atts[0].WorkerID != "w1" {
		t.Fatalf("attempt 1 record %+v lost its own history", atts[0].AttemptRecord)
	}
	if len(atts[1].Late) != 0 || atts[1].WorkerID != "w2" || !atts[1].Outcome.Undecided() {
		t.Fatalf("attempt 2 %+v", atts[1])
	}
}

// TestOldDuplicateAnsweredByGuard: an event applied more transitions ago
// than the snapshot remembers is still a duplicate, found by its event-id
// guard, whether statemodel would apply it again or reject it.
func TestOldDuplicateAnsweredByGuard(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.mustCreate(t, newRun("old-dups", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.clock.Now()
	firstPause := ev(statemodel.EvPause, 0)
	firstPause.Operator, firstPause.Reason = "ops", "hold"
	pauseRes := ts.step(t, key, firstPause, now)
	firstResume := ev(statemodel.EvResume, 0)
	ts.step(t, key, firstResume, now)
	for range statemodel.RecentEvents / 2 {
		ts.step(t, key, ev(statemodel.EvPause, 0), now)
		ts.step(t, key, ev(statemodel.EvResume, 0), now)
	}
	inst, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inst.Snapshot.Seen(firstPause.ID); ok {
		t.Fatal("the snapshot still remembers the first pause; the test needs more transitions")
	}
	// CREATED + pause has a row: statemodel alone would apply it again.
	res, err := ts.Transition(ctx, key, firstPause, now, policy())
	if err != nil || res.Outcome != statemodel.Duplicate || res.First.Seq != pauseRes.Transition.Seq || res.First.To != statemodel.StatePaused {
		t.Fatalf("old pause again: %s %+v, err %v; want duplicate of seq %d", res.Outcome, res.First, err, pauseRes.Transition.Seq)
	}
	// CREATED + resume has no row: statemodel alone would reject it.
	res, err = ts.Transition(ctx, key, firstResume, now, policy())
	if err != nil || res.Outcome != statemodel.Duplicate || res.First.To != statemodel.StateCreated {
		t.Fatalf("old resume again: %s %+v, err %v; want duplicate", res.Outcome, res.First, err)
	}
	after, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if after.Snapshot.Version != inst.Snapshot.Version {
		t.Fatalf("version moved from %d to %d", inst.Snapshot.Version, after.Snapshot.Version)
	}
}

// TestLeaseExpiryLosesToHeartbeat: the reconciler decided lease.expired
// from a snapshot; a heartbeat then refreshed the lease without moving the
// version. The write must fail on the lease condition, and Transition must
// classify the event as not due.
func TestLeaseExpiryLosesToHeartbeat(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	p := policy()
	v := ts.mustCreate(t, newRun("lease", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.toQueued(t, key)
	ts.step(t, key, started(1, "w"), now)
	seen, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	late := ts.clock.Advance(p.Timeouts.Heartbeat + time.Second)
	expired := ev(statemodel.EvLeaseExpired, 1)
	d := statemodel.Apply(seen.Snapshot, expired, late, p)
	if d.Outcome != statemodel.Applied {
		t.Fatalf("the model should expire the lease: %s %v", d.Outcome, d.Err)
	}
	hb, err := ts.Heartbeat(ctx, key, 1, late, p.Timeouts.Heartbeat)
	if err != nil || hb.CancelRequested || !hb.LeaseExpiresAt.Equal(late.Add(p.Timeouts.Heartbeat)) {
		t.Fatalf("heartbeat: %+v, %v", hb, err)
	}
	if err := ts.ApplyDecision(ctx, seen, d); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale lease.expired decision written: err %v, want ErrConflict", err)
	}
	res, err := ts.Transition(ctx, key, expired, late, p)
	if res.Outcome != statemodel.Rejected || !errors.Is(err, statemodel.ErrNotDue) {
		t.Fatalf("lease.expired after a heartbeat: %s, %v; want rejected, not due", res.Outcome, err)
	}
	inst, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Snapshot.State != statemodel.StateRunning || inst.Snapshot.Version != seen.Snapshot.Version {
		t.Fatalf("instance %s v%d, want RUNNING v%d", inst.Snapshot.State, inst.Snapshot.Version, seen.Snapshot.Version)
	}
}

// TestHeartbeat: a heartbeat is a cheap lease refresh (no history, no
// version), answers cancel requests, refuses older attempts and leaves a
// LOST instance to a real transition.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	p := policy()
	v := ts.mustCreate(t, newRun("beats", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.toQueued(t, key)
	ts.step(t, key, started(1, "w"), now)
	before, _ := ts.GetInstance(ctx, key)
	records := ts.countHistory(t, key)

	now = ts.clock.Advance(20 * time.Second)
	hb, err := ts.Heartbeat(ctx, key, 1, now, p.Timeouts.Heartbeat)
	if err != nil || hb.State != statemodel.StateRunning || hb.CancelRequested {
		t.Fatalf("heartbeat while running: %+v, %v", hb, err)
	}
	inst, _ := ts.GetInstance(ctx, key)
	wantExp := now.Add(p.Timeouts.Heartbeat)
	if inst.Snapshot.Version != before.Snapshot.Version || !inst.Snapshot.Lease.ExpiresAt.Equal(wantExp) ||
		!inst.TimerAt.Equal(wantExp) || inst.TimerKind != statemodel.TimerLease {
		t.Fatalf("after heartbeat: v%d lease %+v timer %s %s; want v%d, lease and timer at %s",
			inst.Snapshot.Version, inst.Snapshot.Lease, inst.TimerAt, inst.TimerKind, before.Snapshot.Version, wantExp)
	}
	if n := ts.countHistory(t, key); n != records {
		t.Fatalf("heartbeat wrote history: %d records, want %d", n, records)
	}
	if _, err := ts.Heartbeat(ctx, key, 2, now, p.Timeouts.Heartbeat); !errors.Is(err, statemodel.ErrUnknownAttempt) {
		t.Fatalf("heartbeat of attempt 2: %v, want unknown attempt", err)
	}

	cancel := ev(statemodel.EvCancelRequested, 0)
	cancel.Operator, cancel.Reason = "ops", "stop"
	ts.step(t, key, cancel, now)
	hb, err = ts.Heartbeat(ctx, key, 1, now.Add(time.Second), p.Timeouts.Heartbeat)
	if err != nil || hb.State != statemodel.StateCancelling || !hb.CancelRequested {
		t.Fatalf("heartbeat while cancelling: %+v, %v", hb, err)
	}
	inst, _ = ts.GetInstance(ctx, key)
	if inst.TimerKind != statemodel.TimerCancel || !inst.TimerAt.Equal(now.Add(p.Timeouts.Cancel)) {
		t.Fatalf("a heartbeat in CANCELLING moved the cancel timer: %s %s", inst.TimerAt, inst.TimerKind)
	}

	now = ts.clock.Advance(p.Timeouts.Cancel + time.Second)
	ts.step(t, key, ev(statemodel.EvCancelTimeout, 1), now)
	if _, err := ts.Heartbeat(ctx, key, 1, now, p.Timeouts.Heartbeat); !errors.Is(err, store.ErrLostNeedsTransition) {
		t.Fatalf("heartbeat while lost: %v, want ErrLostNeedsTransition", err)
	}
	res := ts.step(t, key, ev(statemodel.EvHeartbeat, 1), now)
	if res.Snapshot.State != statemodel.StateCancelling {
		t.Fatalf("heartbeat in LOST with a cancel requested: %s, want CANCELLING", res.Snapshot.State)
	}
	ack := ev(statemodel.EvCancelled, 1)
	ts.step(t, key, ack, now)
	if _, err := ts.Heartbeat(ctx, key, 1, now, p.Timeouts.Heartbeat); !errors.Is(err, statemodel.ErrIllegalTransition) {
		t.Fatalf("heartbeat after cancel: %v, want illegal transition", err)
	}
	if _, err := ts.Heartbeat(ctx, store.InstanceKey{Run: "nope", Task: "main"}, 1, now, time.Minute); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("heartbeat of a missing instance: %v, want not found", err)
	}
}

// TestRetryStaleHeartbeat: after a retry the old attempt's heartbeat is
// stale.
func TestRetryStaleHeartbeat(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.mustCreate(t, newRun("retry", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.toQueued(t, key)
	ts.step(t, key, started(1, "w1"), now)
	fail := ev(statemodel.EvFailed, 1)
	fail.ErrorCategory = "boom"
	res := ts.step(t, key, fail, now)
	if res.Snapshot.State != statemodel.StateUpForRetry {
		t.Fatalf("failure: %s, want UP_FOR_RETRY", res.Snapshot.State)
	}
	now = ts.clock.Advance(time.Hour)
	ts.step(t, key, ev(statemodel.EvRetryDue, 0), now)
	ts.step(t, key, ev(statemodel.EvDispatched, 2), now)
	ts.step(t, key, started(2, "w2"), now)
	if _, err := ts.Heartbeat(ctx, key, 1, now, time.Minute); !errors.Is(err, store.ErrStaleAttempt) {
		t.Fatalf("heartbeat of attempt 1: %v, want stale attempt", err)
	}
	exit := 0
	ok := ev(statemodel.EvSucceeded, 2)
	ok.ExitCode = &exit
	res = ts.step(t, key, ok, now)
	if res.Snapshot.State != statemodel.StateSucceeded {
		t.Fatalf("success: %s", res.Snapshot.State)
	}
	inst, _ := ts.GetInstance(ctx, key)
	if !inst.TimerAt.IsZero() || inst.TimerKind != "" {
		t.Fatalf("terminal instance keeps a timer: %s %s", inst.TimerAt, inst.TimerKind)
	}
}

// TestStoredPolicy: StoredPolicy decides with the instance's own policy.
func TestStoredPolicy(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	nr := newRun("stored-policy", "main")
	nr.Tasks[0].Policy.Retry.MaxAttempts = 1 // no retry
	v := ts.mustCreate(t, nr)
	key := v.Tasks[0].Instance.Key
	now := ts.toQueued(t, key)
	ts.step(t, key, started(1, "w"), now)
	res, err := ts.Transition(context.Background(), key, ev(statemodel.EvFailed, 1), now, store.StoredPolicy(nil))
	if err != nil || res.Outcome != statemodel.Applied || res.Snapshot.State != statemodel.StateFailed {
		t.Fatalf("failure under the stored policy (one attempt): %s %s %v; want FAILED", res.Outcome, res.Snapshot.State, err)
	}
}

// TestTransitionErrors: a missing instance and a rejected event.
func TestTransitionErrors(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	_, err := ts.Transition(ctx, store.InstanceKey{Run: "missing", Task: "main"}, ev(statemodel.EvDepsMet, 0), t0, policy())
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing instance: %v, want not found", err)
	}
	v := ts.mustCreate(t, newRun("errs", "main"))
	key := v.Tasks[0].Instance.Key
	res, err := ts.Transition(ctx, key, started(1, "w"), t0, policy())
	if res.Outcome != statemodel.Rejected || !errors.Is(err, statemodel.ErrUnknownAttempt) {
		t.Fatalf("claim of an undispatched attempt: %s %v", res.Outcome, err)
	}
	var te *statemodel.TransitionError
	if !errors.As(err, &te) || te.State != statemodel.StateCreated {
		t.Fatalf("error %v does not carry the transition error", err)
	}
}
