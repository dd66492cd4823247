package statemodel

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func testPolicy() Policy {
	p := DefaultPolicy()
	p.Retry.Jitter = JitterNone
	return p
}

// step applies e and fails the test unless the outcome is want.
func step(t *testing.T, s Snapshot, e Event, now time.Time, p Policy, want Outcome) Decision {
	t.Helper()
	d := Apply(s, e, now, p)
	if d.Outcome != want {
		t.Fatalf("%s in %s: outcome %s (err %v), want %s", e, s.State, d.Outcome, d.Err, want)
	}
	return d
}

func ev(id string, typ EventType, attempt int) Event {
	a, _ := ActorOf(typ)
	return Event{ID: id, Type: typ, Actor: a, Attempt: attempt}
}

// running drives a fresh instance to RUNNING on attempt 1 and returns the
// snapshot and its history.
func running(t *testing.T, p Policy) (Snapshot, []Transition) {
	t.Helper()
	var s Snapshot
	var h []Transition
	for i, e := range []Event{
		ev("c", EvCreated, 0), ev("d", EvDepsMet, 0),
		{ID: "q1", Type: EvDispatched, Actor: ActorExecutor, Attempt: 1, TokenHash: "h1", ExecutorID: "m1"},
		{ID: "s1", Type: EvStarted, Actor: ActorWorker, Attempt: 1, WorkerID: "w1"},
	} {
		d := step(t, s, e, t0.Add(time.Duration(i)*time.Second), p, Applied)
		s = d.Snapshot
		h = append(h, *d.Transition)
	}
	return s, h
}

func TestHappyPathWithMetricsAndReplay(t *testing.T) {
	p := testPolicy()
	s, h := running(t, p)
	if s.State != StateRunning || s.Attempt != 1 || s.Spent != 1 {
		t.Fatalf("got %s attempt %d spent %d", s.State, s.Attempt, s.Spent)
	}
	if at, kind := s.Timer(); kind != TimerLease || !at.Equal(t0.Add(3*time.Second+p.Timeouts.Heartbeat)) {
		t.Fatalf("timer %s %s", at, kind)
	}
	d := step(t, s, ev("ok1", EvSucceeded, 1), t0.Add(10*time.Second), p, Applied)
	s, h = d.Snapshot, append(h, *d.Transition)
	if s.State != StateSucceeded {
		t.Fatalf("state %s", s.State)
	}
	if !hasEffect(d.Effects, EffectNotifyDownstream) || !hasEffect(d.Effects, EffectClearTimer) {
		t.Fatalf("effects %v", d.Effects)
	}
	m := s.Metrics()
	if *m.DependencyWait != time.Second || *m.Latest().QueueWait != time.Second || *m.Latest().RunTime != 7*time.Second {
		t.Fatalf("metrics dep %v queue %v run %v", *m.DependencyWait, *m.Latest().QueueWait, *m.Latest().RunTime)
	}
	hm := MetricsOf(h)
	if *hm.DependencyWait != *m.DependencyWait || *hm.Latest().QueueWait != *m.Latest().QueueWait || *hm.Latest().RunTime != *m.Latest().RunTime {
		t.Fatalf("history metrics differ from snapshot metrics: %+v", hm)
	}
	r, err := Replay(h)
	if err != nil || !r.EqualState(s) {
		t.Fatalf("replay: %v\n got %+v\nwant %+v", err, r, s)
	}
}

func hasEffect(es []Effect, k EffectKind) bool {
	for _, e := range es {
		if e.Kind == k {
			return true
		}
	}
	return false
}

func TestRetryIsANewAttemptWithBackoff(t *testing.T) {
	p := testPolicy()
	p.Retry = RetryPolicy{MaxAttempts: 2, InitialInterval: 10 * time.Second, BackoffCoefficient: 2, MaxInterval: time.Minute, Jitter: JitterNone}
	s, _ := running(t, p)
	code := 3
	f := ev("f1", EvFailed, 1)
	f.ExitCode, f.ErrorCategory = &code, "boom"
	now := t0.Add(20 * time.Second)
	s = step(t, s, f, now, p, Applied).Snapshot
	if s.State != StateUpForRetry || !s.RetryAt.Equal(now.Add(10*time.Second)) {
		t.Fatalf("state %s retry_at %s", s.State, s.RetryAt)
	}
	step(t, s, ev("r-early", EvRetryDue, 0), now, p, Rejected)
	s = step(t, s, ev("r1", EvRetryDue, 0), s.RetryAt, p, Applied).Snapshot
	a1, _ := s.AttemptN(1)
	if a1.Outcome != OutcomeFailed || *a1.ExitCode != 3 || a1.ErrorCategory != "boom" || a1.WorkerID != "w1" || a1.EndedAt.IsZero() {
		t.Fatalf("attempt 1 lost its record: %+v", a1)
	}
	d2 := step(t, s, Event{ID: "q2", Type: EvDispatched, Actor: ActorExecutor, Attempt: 2, TokenHash: "h2"}, s.RetryAt, p, Applied)
	s = d2.Snapshot
	// The snapshot holds the newest attempt only; attempt 1's record is
	// its history's (and the store's attempt item).
	if _, held := s.AttemptN(1); held || len(s.Attempts) != MaxInlineAttempts || s.Attempts[0].N != 2 {
		t.Fatalf("attempts held after the second dispatch: %+v", s.Attempts)
	}
	s = step(t, s, Event{ID: "s2", Type: EvStarted, Actor: ActorWorker, Attempt: 2, WorkerID: "w2"}, s.RetryAt, p, Applied).Snapshot
	// Budget spent: the second failure is final.
	s = step(t, s, ev("f2", EvFailed, 2), s.RetryAt.Add(time.Second), p, Applied).Snapshot
	if s.State != StateFailed || s.Spent != 2 {
		t.Fatalf("state %s spent %d", s.State, s.Spent)
	}
}

func TestBackoffCapsAndJitters(t *testing.T) {
	r := RetryPolicy{MaxAttempts: 9, InitialInterval: time.Second, BackoffCoefficient: 3, MaxInterval: 20 * time.Second, Jitter: JitterNone}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 3 * time.Second, 3: 9 * time.Second, 4: 20 * time.Second, 60: 20 * time.Second} {
		if got := r.Backoff(n, 0.5); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
	r.Jitter = JitterFull
	if got := r.Backoff(3, 0.5); got != 4500*time.Millisecond {
		t.Errorf("full jitter Backoff(3, 0.5) = %s", got)
	}
}

// TestBackoffByIntervals: listed intervals replace the exponential form,
// the last one repeating; a failed retry waits the listed time from the
// failure.
func TestBackoffByIntervals(t *testing.T) {
	r := RetryPolicy{MaxAttempts: 9, InitialInterval: time.Hour, BackoffCoefficient: 3, MaxInterval: time.Hour, Jitter: JitterNone,
		Intervals: []time.Duration{30 * time.Second, 5 * time.Minute, 30 * time.Minute}}
	for n, want := range map[int]time.Duration{1: 30 * time.Second, 2: 5 * time.Minute, 3: 30 * time.Minute, 4: 30 * time.Minute, 60: 30 * time.Minute} {
		if got := r.Backoff(n, 0.5); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
	p := testPolicy()
	p.Retry.Intervals, p.Retry.Jitter = []time.Duration{7 * time.Second, time.Minute}, JitterNone
	s, _ := running(t, p)
	failedAt := t0.Add(5 * time.Second)
	s = step(t, s, ev("f1", EvFailed, 1), failedAt, p, Applied).Snapshot
	if s.State != StateUpForRetry || !s.RetryAt.Equal(failedAt.Add(7*time.Second)) {
		t.Fatalf("after the first failure: %s, retry at %s; want UP_FOR_RETRY at %s", s.State, s.RetryAt, failedAt.Add(7*time.Second))
	}
	p.Retry.Intervals = []time.Duration{0}
	if err := p.Validate(); err == nil {
		t.Fatal("a zero interval validated")
	}
}

func TestStaleEventIsRecordedLateAndChangesNothing(t *testing.T) {
	p := testPolicy()
	s, _ := running(t, p)
	s = step(t, s, ev("f1", EvFailed, 1), t0.Add(5*time.Second), p, Applied).Snapshot
	s = step(t, s, ev("r1", EvRetryDue, 0), s.RetryAt, p, Applied).Snapshot
	s = step(t, s, Event{ID: "q2", Type: EvDispatched, Actor: ActorExecutor, Attempt: 2}, s.RetryAt, p, Applied).Snapshot
	s = step(t, s, Event{ID: "s2", Type: EvStarted, Actor: ActorWorker, Attempt: 2, WorkerID: "w2"}, s.RetryAt, p, Applied).Snapshot
	d := step(t, s, ev("late-ok", EvSucceeded, 1), s.RetryAt.Add(time.Second), p, Stale)
	if d.Late == nil || d.Late.Attempt != 1 || d.Late.Outcome != OutcomeSucceeded {
		t.Fatalf("late record %+v", d.Late)
	}
	if !d.Snapshot.EqualState(s) || d.Snapshot.Lease != s.Lease {
		t.Fatal("a stale event changed the instance")
	}
}

func TestDuplicateReturnsFirstOutcome(t *testing.T) {
	p := testPolicy()
	s, _ := running(t, p)
	first := step(t, s, ev("ok", EvSucceeded, 1), t0.Add(9*time.Second), p, Applied)
	again := step(t, first.Snapshot, ev("ok", EvSucceeded, 1), t0.Add(20*time.Second), p, Duplicate)
	if again.First.To != StateSucceeded || again.First.Seq != first.Transition.Seq || !again.Snapshot.EqualState(first.Snapshot) {
		t.Fatalf("duplicate answered %+v", again.First)
	}
}

func TestLostLifecycle(t *testing.T) {
	p := testPolicy()
	s, _ := running(t, p)
	step(t, s, ev("le0", EvLeaseExpired, 1), t0.Add(4*time.Second), p, Rejected) // lease still valid
	// A heartbeat extends the lease without a record.
	hb := step(t, s, ev("hb", EvHeartbeat, 1), t0.Add(30*time.Second), p, Refreshed)
	if hb.Snapshot.Version != s.Version || hb.Transition != nil || !hb.Snapshot.Lease.ExpiresAt.Equal(t0.Add(90*time.Second)) {
		t.Fatalf("refresh: %+v", hb.Snapshot.Lease)
	}
	s = hb.Snapshot
	lost := step(t, s, ev("le", EvLeaseExpired, 1), t0.Add(91*time.Second), p, Applied)
	s = lost.Snapshot
	if s.State != StateLost || !hasEffect(lost.Effects, EffectGatherEvidence) {
		t.Fatalf("state %s effects %v", s.State, lost.Effects)
	}
	t.Run("heartbeat proves alive", func(t *testing.T) {
		d := step(t, s, ev("hb2", EvHeartbeat, 1), t0.Add(92*time.Second), p, Applied)
		if d.Snapshot.State != StateRunning || d.Transition == nil {
			t.Fatalf("got %s", d.Snapshot.State)
		}
	})
	t.Run("late success accepted", func(t *testing.T) {
		if d := step(t, s, ev("ok", EvSucceeded, 1), t0.Add(92*time.Second), p, Applied); d.Snapshot.State != StateSucceeded {
			t.Fatalf("got %s", d.Snapshot.State)
		}
	})
	t.Run("window passes empty: retry with category lost", func(t *testing.T) {
		step(t, s, ev("we0", EvWindowExpired, 1), t0.Add(92*time.Second), p, Rejected)
		d := step(t, s, ev("we", EvWindowExpired, 1), s.Deadline, p, Applied)
		a, _ := d.Snapshot.AttemptN(1)
		if d.Snapshot.State != StateUpForRetry || a.ErrorCategory != CategoryLost || a.Outcome != OutcomeLost {
			t.Fatalf("got %s %+v", d.Snapshot.State, a)
		}
		// The worker was alive after all: its success still wins.
		ok := step(t, d.Snapshot, ev("ok", EvSucceeded, 1), s.Deadline.Add(time.Second), p, Applied)
		if ok.Snapshot.State != StateSucceeded {
			t.Fatalf("late success after lost verdict: %s", ok.Snapshot.State)
		}
	})
	t.Run("process gone, outcome unknown: ends lost, its success still wins", func(t *testing.T) {
		gone := ev("gone", EvEvidenceFailed, 1)
		gone.ErrorCategory = CategoryLost
		d := step(t, s, gone, t0.Add(92*time.Second), p, Applied)
		a, _ := d.Snapshot.AttemptN(1)
		if d.Snapshot.State != StateUpForRetry || a.Outcome != OutcomeLost || a.ErrorCategory != CategoryLost {
			t.Fatalf("got %s %+v", d.Snapshot.State, a)
		}
		ok := step(t, d.Snapshot, ev("ok", EvSucceeded, 1), t0.Add(93*time.Second), p, Applied)
		if ok.Snapshot.State != StateSucceeded {
			t.Fatalf("success of an attempt whose process is gone: %s", ok.Snapshot.State)
		}
	})
	t.Run("confirmed failure decides the attempt", func(t *testing.T) {
		failed := ev("failed", EvEvidenceFailed, 1)
		failed.ErrorCategory = "exit_status"
		d := step(t, s, failed, t0.Add(92*time.Second), p, Applied)
		a, _ := d.Snapshot.AttemptN(1)
		if d.Snapshot.State != StateUpForRetry || a.Outcome != OutcomeFailed || a.ErrorCategory != "exit_status" {
			t.Fatalf("got %s %+v", d.Snapshot.State, a)
		}
		step(t, d.Snapshot, ev("ok", EvSucceeded, 1), t0.Add(93*time.Second), p, Rejected)
	})
	t.Run("never started resubmits without budget", func(t *testing.T) {
		d := step(t, s, ev("ns", EvNeverStarted, 1), t0.Add(92*time.Second), p, Applied)
		n := step(t, d.Snapshot, Event{ID: "q2", Type: EvDispatched, Actor: ActorExecutor, Attempt: 2}, t0.Add(93*time.Second), p, Applied).Snapshot
		if a2, ok := n.AttemptN(2); n.Spent != 1 || n.Resubmits != 1 || !ok || a2.SpendsBudget {
			t.Fatalf("spent %d resubmits %d", n.Spent, n.Resubmits)
		}
	})
}

func TestCancel(t *testing.T) {
	p := testPolicy()
	s, _ := running(t, p)
	cancel := Event{ID: "x", Type: EvCancelRequested, Actor: ActorOperator, Reason: "stop"}
	d := step(t, s, cancel, t0.Add(5*time.Second), p, Applied)
	if d.Snapshot.State != StateCancelling || !d.Snapshot.CancelRequested || !hasEffect(d.Effects, EffectRequestCancel) {
		t.Fatalf("got %s", d.Snapshot.State)
	}
	c := d.Snapshot
	if got := step(t, c, ev("ack", EvCancelled, 1), t0.Add(6*time.Second), p, Applied).Snapshot.State; got != StateCancelled {
		t.Fatalf("ack: %s", got)
	}
	if got := step(t, c, ev("ok", EvSucceeded, 1), t0.Add(6*time.Second), p, Applied).Snapshot.State; got != StateSucceeded {
		t.Fatalf("truth wins: %s", got)
	}
	to := step(t, c, ev("ct", EvCancelTimeout, 1), c.Deadline, p, Applied).Snapshot
	if to.State != StateLost || !to.CancelRequested {
		t.Fatalf("timeout: %s %v", to.State, to.CancelRequested)
	}
	if got := step(t, to, ev("we", EvWindowExpired, 1), to.Deadline, p, Applied).Snapshot.State; got != StateCancelled {
		t.Fatalf("unknown after cancel: %s", got)
	}
}

func TestOverrideNeedsOperatorAndReason(t *testing.T) {
	p := testPolicy()
	s, _ := running(t, p)
	s = step(t, s, Event{ID: "f", Type: EvFailed, Actor: ActorWorker, Attempt: 1, Retryable: new(bool)}, t0.Add(5*time.Second), p, Applied).Snapshot
	if s.State != StateFailed {
		t.Fatalf("non-retryable failure: %s", s.State)
	}
	d := step(t, s, Event{ID: "o1", Type: EvOverrideSucceeded, Actor: ActorOperator, Operator: "ana"}, t0, p, Rejected)
	if !errors.Is(d.Err, ErrOperatorRequired) {
		t.Fatalf("err %v", d.Err)
	}
	d = step(t, s, Event{ID: "o2", Type: EvOverrideSucceeded, Actor: ActorOperator, Operator: "ana", Reason: "fixed by hand"}, t0, p, Applied)
	if d.Snapshot.State != StateSucceeded || !d.Transition.Override() || d.Transition.Scope != "task" || d.Transition.Operator != "ana" {
		t.Fatalf("override: %+v", d.Transition)
	}
}

func TestPauseResumeReturnsWhereItWas(t *testing.T) {
	p := testPolicy()
	s, _ := running(t, p)
	s = step(t, s, ev("f", EvFailed, 1), t0.Add(5*time.Second), p, Applied).Snapshot
	retryAt := s.RetryAt
	s = step(t, s, Event{ID: "p", Type: EvPause, Actor: ActorOperator}, t0.Add(6*time.Second), p, Applied).Snapshot
	if at, k := s.Timer(); s.State != StatePaused || k != TimerNone || !at.IsZero() {
		t.Fatalf("paused: %s %s", s.State, k)
	}
	s = step(t, s, Event{ID: "r", Type: EvResume, Actor: ActorOperator}, t0.Add(7*time.Second), p, Applied).Snapshot
	if s.State != StateUpForRetry || !s.RetryAt.Equal(retryAt) {
		t.Fatalf("resumed to %s retry_at %s", s.State, s.RetryAt)
	}
}

func TestRejectionsNameStateEventAndActor(t *testing.T) {
	p := testPolicy()
	s, _ := running(t, p)
	d := Apply(s, Event{ID: "z", Type: EvDepsMet, Actor: ActorWorker}, t0, p)
	var te *TransitionError
	if !errors.As(d.Err, &te) || !errors.Is(d.Err, ErrWrongActor) || te.State != StateRunning || te.Actor != ActorWorker {
		t.Fatalf("err %v", d.Err)
	}
	d = Apply(s, ev("z2", EvDepsMet, 0), t0, p)
	if !errors.Is(d.Err, ErrIllegalTransition) {
		t.Fatalf("err %v", d.Err)
	}
	for _, want := range []string{"RUNNING", "deps.met", "scheduler"} {
		if !strings.Contains(d.Err.Error(), want) {
			t.Errorf("error %q does not name %q", d.Err, want)
		}
	}
	if d := Apply(s, ev("z3", EvSucceeded, 2), t0, p); !errors.Is(d.Err, ErrUnknownAttempt) {
		t.Fatalf("future attempt: %v", d.Err)
	}
	if d := Apply(s, Event{Type: EvSucceeded, Actor: ActorWorker, Attempt: 1}, t0, p); !errors.Is(d.Err, ErrInvalidEvent) {
		t.Fatalf("no id: %v", d.Err)
	}
}

// TestTableExhaustive drives every (state x event x actor) combination: the
// combinations the table lists land in one of the row's states (or are
// refused only by their guard), everything else is rejected as illegal or
// as the wrong actor.
func TestTableExhaustive(t *testing.T) {
	p := testPolicy()
	far := t0.Add(24 * time.Hour)
	states := append([]InstanceState{StateNone}, AllStates()...)
	for _, st := range states {
		for _, et := range AllEventTypes() {
			for _, actor := range AllActors() {
				name := fmt.Sprintf("%s/%s/%s", st, et, actor)
				if st == StateNone {
					name = "NONE/" + string(et) + "/" + string(actor)
				}
				t.Run(name, func(t *testing.T) {
					s := snapshotIn(st)
					e := Event{ID: "e", Type: et, Actor: actor, Attempt: s.Attempt, Operator: "op", Reason: "r"}
					if et == EvDispatched {
						e.Attempt = s.Attempt + 1
					}
					d := Apply(s, e, far, p)
					row, listed := Lookup(st, et)
					owner, _ := ActorOf(et)
					switch {
					case actor != owner:
						if !errors.Is(d.Err, ErrWrongActor) {
							t.Fatalf("wrong actor accepted: %s %v", d.Outcome, d.Err)
						}
					case !listed:
						if !errors.Is(d.Err, ErrIllegalTransition) && !errors.Is(d.Err, ErrUnknownAttempt) {
							t.Fatalf("unlisted pair: outcome %s err %v", d.Outcome, d.Err)
						}
					case d.Outcome == Rejected:
						if !errors.Is(d.Err, ErrGuard) && !errors.Is(d.Err, ErrUnknownAttempt) {
							t.Fatalf("listed pair rejected by %v", d.Err)
						}
					default:
						got := d.Snapshot.State
						found := false
						for _, to := range row.To {
							found = found || to == got
						}
						if !found {
							t.Fatalf("landed in %s, row allows %v", got, row.To)
						}
					}
				})
			}
		}
	}
}

// snapshotIn builds a plausible snapshot in state st: attempt 1 claimed
// where the state implies a running attempt.
func snapshotIn(st InstanceState) Snapshot {
	s := Snapshot{State: st, Version: 3, Seq: 3, CreatedAt: t0}
	if st == StateNone {
		return Snapshot{}
	}
	claimed := AttemptRecord{N: 1, QueuedAt: t0, StartedAt: t0, WorkerID: "w", SpendsBudget: true}
	switch st {
	case StateQueued:
		s.Attempt, s.Spent = 1, 1
		s.Attempts = []AttemptRecord{{N: 1, QueuedAt: t0, SpendsBudget: true}}
	case StateRunning, StateLost, StateCancelling:
		s.Attempt, s.Spent = 1, 1
		s.Attempts = []AttemptRecord{claimed}
		s.Lease = Lease{LastHeartbeatAt: t0, ExpiresAt: t0.Add(time.Minute)}
		s.CancelRequested = st == StateCancelling
	case StateUpForRetry, StateFailed, StateSucceeded, StateCancelled:
		claimed.EndedAt, claimed.Outcome = t0, OutcomeFailed
		s.Attempt, s.Spent = 1, 1
		s.Attempts = []AttemptRecord{claimed}
	case StatePaused:
		s.PausedFrom = StateScheduled
	}
	s.Deadline = t0
	s.RetryAt = t0
	return s
}

func TestCompatStatusCoversEveryState(t *testing.T) {
	seen := map[Status]bool{}
	for _, s := range AllStates() {
		st := s.Status()
		if st == "" {
			t.Errorf("%s has no compat status", s)
		}
		seen[st] = true
	}
	for _, st := range AllStatuses() {
		if !seen[st] {
			t.Errorf("status %s is never used", st)
		}
	}
	if InstanceState("BOGUS").Status() != "" {
		t.Error("an unknown state must not map")
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	p := DefaultPolicy()
	p.Retry.BackoffCoefficient = 0.5
	if err := p.Validate(); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("got %v", err)
	}
}
