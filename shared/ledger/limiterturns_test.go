package ledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/runledger/runledger/statemodel/limiter"
)

// store stands for a store: its pointer names it.
var store Limiters = (*nopLimiters)(nil)

type nopLimiters struct{ Limiters }

// waitQueued polls until n callers wait for name's turn.
func waitQueued(t *testing.T, ts *turns, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ts.mu.Lock()
		tu := ts.held[turnKey{store: store, name: name}]
		got := 0
		if tu != nil {
			got = len(tu.urgent) + len(tu.other)
		}
		ts.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTurnsHandRoomMakersFirst(t *testing.T) {
	ts := &turns{held: map[turnKey]*turn{}}
	ctx := context.Background()
	_, release, err := ts.take(ctx, store, "l", false)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	taker := func(who string, urgent bool) {
		_, rel, err := ts.take(ctx, store, "l", urgent)
		if err != nil {
			t.Error(err)
			return
		}
		order <- who
		rel()
	}
	go taker("entry-1", false)
	waitQueued(t, ts, "l", 1)
	go taker("entry-2", false)
	waitQueued(t, ts, "l", 2)
	go taker("hand-off", true)
	waitQueued(t, ts, "l", 3)
	release()
	var got []string
	for range 3 {
		got = append(got, <-order)
	}
	want := []string{"hand-off", "entry-1", "entry-2"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("turns taken in order %v, want %v", got, want)
		}
	}
	waitQueued(t, ts, "l", 0)
}

func TestTurnsForgetIdleTurnsBeyondTheBound(t *testing.T) {
	ts := &turns{held: map[turnKey]*turn{}}
	for i := range idleTurns + 10 {
		_, release, err := ts.take(context.Background(), store, fmt.Sprint(i), false)
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.held) > idleTurns+1 {
		t.Fatalf("%d idle turns kept, bound %d", len(ts.held), idleTurns)
	}
}

func TestTurnsCallerGivingUpLeavesTheQueue(t *testing.T) {
	ts := &turns{held: map[turnKey]*turn{}}
	_, release, err := ts.take(context.Background(), store, "l", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error)
	go func() {
		_, _, err := ts.take(ctx, store, "l", true)
		gaveUp <- err
	}()
	waitQueued(t, ts, "l", 1)
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("a caller whose context ended got the turn")
	}
	release()
	// The turn is free again: a new caller takes it at once.
	done := make(chan struct{})
	go func() {
		_, rel, err := ts.take(context.Background(), store, "l", false)
		if err == nil {
			rel()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the turn was never freed after a waiter gave up")
	}
}

func TestBackoffEndsWithItsContextAndSurvivesLargeTries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Backoff(ctx, 3, time.Hour, time.Hour); err == nil {
		t.Fatal("a back-off whose context ended waited on")
	}
	// Shifts past the width of a Duration: a wrapped delay would be
	// negative (a panic in the draw) or hours long (the test's timeout).
	for _, try := range []int{0, 5, 63, 1000} {
		if err := Backoff(context.Background(), try, time.Millisecond, 2*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}

// readCounter answers GetLimiter with st and counts the reads.
type readCounter struct {
	Limiters
	st    limiter.State
	reads int
}

func (r *readCounter) GetLimiter(context.Context, string) (limiter.State, error) {
	r.reads++
	return r.st, nil
}

func TestQueueFullReadsUnlessThisProcessWroteLately(t *testing.T) {
	ctx := AsProcess(context.Background())
	s := &readCounter{st: limiter.State{Waiting: limiter.MaxWaiting, Version: 9}}
	const name = "full/"
	look := func(wantFull bool, wantReads int) {
		t.Helper()
		full, err := QueueFull(ctx, s, name)
		if err != nil || full != wantFull || s.reads != wantReads {
			t.Fatalf("QueueFull = %v, %v after %d reads; want %v after %d", full, err, s.reads, wantFull, wantReads)
		}
	}
	look(true, 1) // nothing written by this process: read
	tu, release, err := turnsOf(ctx).take(ctx, s, name, false)
	if err != nil {
		t.Fatal(err)
	}
	tu.wrote(limiter.State{Waiting: 5, Version: 10})
	release()
	look(false, 1) // this process's write of a moment ago: no read
	tu.seen.Store(&seenWaiting{waiting: 5, at: time.Now().Add(-2 * time.Second)})
	look(true, 2) // too old to rule out other writers: read
	tu.wrote(limiter.State{Waiting: limiter.MaxWaiting - queueFullMargin + 1, Version: 11})
	look(true, 3) // too close to the bound: read
}
