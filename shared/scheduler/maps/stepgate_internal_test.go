package maps

import (
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
)

type taken struct {
	round int
	ran   bool
}

// waitWaiting polls until n steps wait at the gate for key.
func waitWaiting(t *testing.T, g *stepGate, key ledger.InstanceKey, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		st := g.maps[key]
		w := 0
		if st != nil {
			w = st.waiting
		}
		g.mu.Unlock()
		if w == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d steps wait, want %d", w, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStepGateFoldsWaitingSteps: steps asked for while a round runs wait
// for the next round, which one of them runs for all; a failed round
// serves none, and a waiter runs the next; the gate forgets an idle map.
func TestStepGateFoldsWaitingSteps(t *testing.T) {
	g := &stepGate{maps: map[ledger.InstanceKey]*stepState{}}
	key := ledger.InstanceKey{Run: "r", Task: "each"}
	first, ok := g.take(key)
	if !ok || first != 1 {
		t.Fatalf("the first step: round %d, %v", first, ok)
	}
	out := make(chan taken, 2)
	for range 2 {
		go func() {
			r, ok := g.take(key)
			out <- taken{r, ok}
		}()
	}
	waitWaiting(t, g, key, 2)
	g.done(key, first, false) // the first round failed: it served no one
	got := <-out
	if !got.ran || got.round != 3 {
		t.Fatalf("after a failed round a waiter took %+v, want round 3 (every ticket so far)", got)
	}
	select {
	case other := <-out:
		t.Fatalf("a step left while the round serving it ran: %+v", other)
	case <-time.After(20 * time.Millisecond):
	}
	g.done(key, got.round, true)
	if other := <-out; other.ran {
		t.Fatalf("a step served by round 3 ran again: %+v", other)
	}
	g.mu.Lock()
	left := len(g.maps)
	g.mu.Unlock()
	if left != 0 {
		t.Errorf("the gate keeps %d idle maps", left)
	}
}
