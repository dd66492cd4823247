package statemodel

import (
	"errors"
	"testing"
	"time"
)

// A SCHEDULED instance that cannot be dispatched fails once the queue
// timeout since it became SCHEDULED has passed: no retry, whatever budget
// is left, the category in the evidence and the error in the reason; no
// attempt is created. Before that the event is not due.
func TestDispatchFailed(t *testing.T) {
	p := testPolicy()
	var s Snapshot
	var h []Transition
	for _, e := range []Event{ev("c", EvCreated, 0), ev("d", EvDepsMet, 0)} {
		d := step(t, s, e, t0, p, Applied)
		s, h = d.Snapshot, append(h, *d.Transition)
	}
	failed := ev("dispatch-failed:1", EvDispatchFailed, 0)
	failed.Reason = "send: message too long"
	failed.Evidence = map[string]string{"attempt": "1", "error_category": "forged"}

	early := Apply(s, failed, t0.Add(p.Timeouts.Queue-time.Millisecond), p)
	if early.Outcome != Rejected || !errors.Is(early.Err, ErrNotDue) {
		t.Fatalf("before the queue timeout: %s %v, want rejected as not due", early.Outcome, early.Err)
	}
	d := step(t, s, failed, t0.Add(p.Timeouts.Queue), p, Applied)
	n, tr := d.Snapshot, d.Transition
	if n.State != StateFailed || tr.From != StateScheduled || n.Attempt != 0 || len(n.Attempts) != 0 || n.Spent != 0 {
		t.Fatalf("after dispatch.failed: %s, attempt %d, %d records, spent %d; want FAILED with no attempt",
			n.State, n.Attempt, len(n.Attempts), n.Spent)
	}
	if tr.Reason != failed.Reason || tr.Evidence["error_category"] != CategoryDispatchFailed || tr.Evidence["attempt"] != "1" {
		t.Fatalf("transition reason %q evidence %v", tr.Reason, tr.Evidence)
	}
	if _, kind := n.Timer(); kind != TimerNone {
		t.Fatalf("FAILED keeps timer %s", kind)
	}
	// Only SCHEDULED has the row: once dispatched, it is refused.
	q := step(t, s, Event{ID: "q1", Type: EvDispatched, Actor: ActorExecutor, Attempt: 1, TokenHash: "h1"}, t0, p, Applied).Snapshot
	if late := Apply(q, failed, t0.Add(time.Hour), p); !errors.Is(late.Err, ErrIllegalTransition) {
		t.Fatalf("dispatch.failed in QUEUED: %s %v", late.Outcome, late.Err)
	}
	if r, err := Replay(append(h, *tr)); err != nil || !r.EqualState(n) {
		t.Fatalf("replay: %v", err)
	}
}
