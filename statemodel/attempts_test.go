package statemodel

import (
	"fmt"
	"testing"
)

// The snapshot holds only the latest MaxInlineAttempts attempt records,
// however many manual retries add; the current attempt is always held,
// an older attempt's event is stale whether its record is held or not,
// and replay reproduces the bounded snapshot.
func TestAttemptsBounded(t *testing.T) {
	p := testPolicy()
	var s Snapshot
	var h []Transition
	apply := func(e Event) {
		t.Helper()
		d := step(t, s, e, t0, p, Applied)
		s, h = d.Snapshot, append(h, *d.Transition)
	}
	apply(ev("c", EvCreated, 0))
	apply(ev("d", EvDepsMet, 0))
	const total = 3*MaxInlineAttempts + 5
	for n := 1; n <= total; n++ {
		apply(Event{ID: fmt.Sprintf("q%d", n), Type: EvDispatched, Actor: ActorExecutor, Attempt: n, TokenHash: fmt.Sprintf("h%d", n)})
		apply(Event{ID: fmt.Sprintf("s%d", n), Type: EvStarted, Actor: ActorWorker, Attempt: n, WorkerID: "w"})
		fail := Event{ID: fmt.Sprintf("f%d", n), Type: EvFailed, Actor: ActorWorker, Attempt: n, ErrorCategory: "boom", Retryable: new(bool)}
		apply(fail)
		if n < total {
			apply(ev(fmt.Sprintf("r%d", n), EvManualRetry, 0))
		}
		if len(s.Attempts) > MaxInlineAttempts {
			t.Fatalf("after attempt %d the snapshot holds %d records", n, len(s.Attempts))
		}
	}
	if s.State != StateFailed || s.Attempt != total || len(s.Attempts) != MaxInlineAttempts {
		t.Fatalf("%s, attempt %d, %d records held", s.State, s.Attempt, len(s.Attempts))
	}
	for i, a := range s.Attempts {
		if want := total - MaxInlineAttempts + 1 + i; a.N != want || a.Outcome != OutcomeFailed {
			t.Fatalf("record %d is attempt %d (%s), want %d", i, a.N, a.Outcome, want)
		}
	}
	if cur, ok := s.Current(); !ok || cur.N != total || cur.TokenHash != fmt.Sprintf("h%d", total) {
		t.Fatalf("current attempt %+v, %v", cur, ok)
	}
	if _, ok := s.AttemptN(total - MaxInlineAttempts); ok {
		t.Fatal("an evicted attempt is still held")
	}
	if a, ok := s.AttemptN(total - MaxInlineAttempts + 1); !ok || a.N != total-MaxInlineAttempts+1 {
		t.Fatal("the oldest held attempt is not found")
	}
	late := Event{ID: "late-1", Type: EvSucceeded, Actor: ActorWorker, Attempt: 1}
	if d := Apply(s, late, t0, p); d.Outcome != Stale || d.Late == nil || d.Late.Attempt != 1 {
		t.Fatalf("attempt 1's late success: %s", d.Outcome)
	}
	if r, err := Replay(h); err != nil || !r.EqualState(s) {
		t.Fatalf("replay: %v", err)
	}
}
