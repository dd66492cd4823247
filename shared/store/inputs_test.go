package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// dispatch is the executor's acceptance of attempt n.
func dispatch(n int) statemodel.Event {
	d := ev(statemodel.EvDispatched, n)
	d.TokenHash, d.ExecutorID = fmt.Sprintf("hash-%d", n), fmt.Sprintf("msg-%d", n)
	return d
}

// TestLateEventsCapped: an attempt item keeps its first MaxLateEvents late
// events and counts the rest, so no flood of stale reports grows it.
func TestLateEventsCapped(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	p := policy()
	v := ts.mustCreate(t, newRun("late-cap", "main"))
	key := v.Tasks[0].Instance.Key
	ts.toQueued(t, key)
	now := ts.clock.Advance(p.Timeouts.Queue)
	ts.step(t, key, ev(statemodel.EvQueueTimeout, 1), now)
	now = ts.clock.Advance(p.Retry.MaxInterval)
	ts.step(t, key, ev(statemodel.EvRetryDue, 0), now)
	ts.step(t, key, dispatch(2), now)

	const sent = store.MaxLateEvents + 4
	var first string
	for i := range sent {
		late := ev(statemodel.EvSucceeded, 1)
		if i == 0 {
			first = late.ID
		}
		res, err := ts.Transition(ctx, key, late, now, p)
		if err != nil || res.Outcome != statemodel.Stale {
			t.Fatalf("late event %d: %s, %v", i, res.Outcome, err)
		}
	}
	// A redelivery of a kept event is still recorded once.
	if err := ts.AppendLate(ctx, key, statemodel.LateEvent{Attempt: 1, EventID: first, Type: statemodel.EvSucceeded, Actor: statemodel.ActorWorker}); err != nil {
		t.Fatal(err)
	}
	view, err := ts.ReadRun(ctx, key.Run)
	if err != nil {
		t.Fatal(err)
	}
	a := view.Tasks[0].Attempts[0]
	if len(a.Late) != store.MaxLateEvents || a.LateDropped != sent-store.MaxLateEvents || a.Late[0].EventID != first {
		t.Fatalf("attempt 1 keeps %d late events (first %s) and counts %d dropped; want %d (first %s) and %d",
			len(a.Late), a.Late[0].EventID, a.LateDropped, store.MaxLateEvents, first, sent-store.MaxLateEvents)
	}
	// A late event for an attempt item that does not exist is not found.
	err = ts.AppendLate(ctx, key, statemodel.LateEvent{Attempt: 9, EventID: "nine", Type: statemodel.EvSucceeded, Actor: statemodel.ActorWorker})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("late event on a missing attempt: %v, want ErrNotFound", err)
	}
}
