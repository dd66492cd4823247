package ledger

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/statemodel/limiter"
)

// store stands for a store: its pointer names it.
var store Limiters = (*nopLimiters)(nil)

type nopLimiters struct{ Limiters }

// waitQueued polls until n callers wait for name's turn of store.
func waitQueued(t *testing.T, ts *Turns, name string, n int) {
	t.Helper()
	queuedOn(t, ts, store, name, n)
}

func TestTurnsHandRoomMakersFirst(t *testing.T) {
	ts := NewTurns()
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
	ts := NewTurns()
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
	ts := NewTurns()
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
	ctx := context.Background()
	ts := NewTurns()
	s := &readCounter{st: limiter.State{Waiting: limiter.MaxWaiting, Version: 9}}
	const name = "full/"
	look := func(wantFull bool, wantReads int) {
		t.Helper()
		full, err := ts.QueueFull(ctx, s, name)
		if err != nil || full != wantFull || s.reads != wantReads {
			t.Fatalf("QueueFull = %v, %v after %d reads; want %v after %d", full, err, s.reads, wantFull, wantReads)
		}
	}
	look(true, 1) // nothing written by this process: read
	tu, release, err := ts.take(ctx, s, name, false)
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

// writeRecorder is a limiter whose writes are recorded; the first write
// waits for gate, so that callers queue behind its turn.
type writeRecorder struct {
	Limiters
	mu     sync.Mutex
	st     limiter.State
	writes []LimiterWrite
	gate   chan struct{}
	gated  bool
}

func (r *writeRecorder) GetLimiter(context.Context, string) (limiter.State, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st, nil
}

func (r *writeRecorder) WriteLimiter(_ context.Context, w LimiterWrite) error {
	r.mu.Lock()
	first := !r.gated
	r.gated = true
	r.mu.Unlock()
	if first {
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.Expected != r.st.Version {
		return ErrVersionConflict
	}
	r.st = w.State
	r.writes = append(r.writes, w)
	return nil
}

// ListWaiting answers an empty queue: the hand-off after a leave finds
// nobody to admit.
func (r *writeRecorder) ListWaiting(context.Context, string, int) ([]Waiting, error) { return nil, nil }

// queuedOn polls until n callers wait for the turn of name of s.
func queuedOn(t *testing.T, ts *Turns, s Limiters, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ts.mu.Lock()
		tu := ts.held[turnKey{store: s, name: name}]
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

func TestQueuedEntriesAndLeavesAreWrittenWithTheHolders(t *testing.T) {
	ctx := context.Background()
	ts := NewTurns()
	const name = "together/"
	r := &writeRecorder{gate: make(chan struct{})}
	now := time.Unix(1000, 0)
	entered := make([]Entered, 6)
	errs := make(chan error, 12)
	var wg sync.WaitGroup
	enter := func(i int) {
		wg.Go(func() {
			p := limiter.Place{Priority: 3, CreatedAt: now.Add(time.Duration(i) * time.Millisecond), RunID: fmt.Sprintf("run-%d", i)}
			e, err := ts.EnterLimiter(ctx, r, Entry{Limiter: name, Limit: 3, Place: p}, now)
			entered[i] = e
			if err != nil {
				errs <- err
			}
		})
	}
	enter(0)
	queuedOn(t, ts, r, name, 0)
	for r.mu.Lock(); !r.gated; r.mu.Lock() { // the holder is in its write
		r.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	r.mu.Unlock()
	for i := 1; i < 6; i++ {
		enter(i)
	}
	queuedOn(t, ts, r, name, 5)
	close(r.gate)
	wg.Wait()
	if len(r.writes) != 2 || len(r.writes[1].Also) != 4 {
		t.Fatalf("%d writes (the second with %d more entries); want the five queued entries in one write", len(r.writes), len(r.writes[len(r.writes)-1].Also))
	}
	admitted := 0
	for i, e := range entered {
		if e.Admitted {
			admitted++
		} else if e.Reason != limiter.ReasonConcurrency {
			t.Fatalf("entry %d answered %+v", i, e)
		}
	}
	if admitted != 3 || r.st.Active != 3 || r.st.Waiting != 3 {
		t.Fatalf("%d answered admitted; limiter %+v; want 3 active, 3 waiting", admitted, r.st)
	}

	// Leaves queued behind a holder's are written with the next one's.
	r.gate, r.gated = make(chan struct{}), false
	left := make([]bool, 3)
	leave := func(i int) {
		wg.Go(func() {
			ok, _, err := ts.LeaveAndAdmitNext(ctx, r, name, fmt.Sprintf("run-%d", i), limiter.Rate{}, now)
			left[i] = ok
			if err != nil {
				errs <- err
			}
		})
	}
	leave(0)
	for r.mu.Lock(); !r.gated; r.mu.Lock() {
		r.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	r.mu.Unlock()
	leave(1)
	leave(2)
	queuedOn(t, ts, r, name, 2)
	before := len(r.writes)
	close(r.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !left[0] || !left[1] || !left[2] || r.st.Active != 0 {
		t.Fatalf("left %v, limiter %+v; want every run gone", left, r.st)
	}
	if got := r.writes[before+1:]; len(got) != 1 || len(got[0].Also) != 1 {
		t.Fatalf("after the first leave: %d writes; want the two queued leaves in one", len(got))
	}
}
