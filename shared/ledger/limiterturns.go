package ledger

import (
	"context"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runledger/runledger/statemodel/limiter"
)

// Writers of one limiter in one process take turns. Every limiter write
// is conditioned on the limiter item's version, so writers racing on one
// limiter lose rounds to each other: each lost round costs a read, a
// refused write and a read again, and the more writers race the fewer
// rounds land (a burst of triggers and completions on one limiter in one
// process did worse with four writers than with one). Taking turns within
// the process removes those rounds; the conditional write stays the only
// guarantee, across processes, and a round lost to another process backs
// off (conflictPause) before it reads again.
//
// Turns is the registry they take turns in: the composition root builds
// one per process (scheduler.New one for its Service unless it is given
// one), and every limiter call of that process goes through it. Calls made
// through two registries take turns only with their own, as two processes'
// calls do: the contract suite races "processes" in one test process so,
// and its races reach the conditional writes.
type Turns struct {
	mu   sync.Mutex
	held map[turnKey]*turn
}

// NewTurns returns a registry in which no turn is held yet.
func NewTurns() *Turns {
	return &Turns{held: map[turnKey]*turn{}}
}

// idleTurns is how many turns nobody uses the registry keeps, with the
// state each last wrote: a limiter's next write after a pause is tried on
// it rather than on a read. Beyond it a turn is forgotten when freed.
const idleTurns = 1024

// turnKey names a limiter of one store: a process may hold several (the
// tests' tables side by side), whose limiters of one name are not one.
type turnKey struct {
	store any
	name  string
}

// keyOf is the turn of limiter name of s. A store whose value cannot be a
// map key (none of this project's) gets a turn of its own each call: no
// turns, no remembered state, every round read.
func keyOf(s Limiters, name string) (turnKey, bool) {
	if t := reflect.TypeOf(s); t == nil || !t.Comparable() {
		return turnKey{}, false
	}
	return turnKey{store: s, name: name}, true
}

type turn struct {
	// busy: someone has the turn. Whoever waits is in a queue and is
	// handed the turn by its holder's release (its channel closed):
	// makers of room (leaving, withdrawing, admitting, a raised limit)
	// before entries, so that a hand-off is not queued behind a burst of
	// triggers entering. Guarded by the registry's mu.
	busy          bool
	urgent, other []*waiter
	users         int
	// last is the limiter as this process last wrote it: the next write
	// is tried on it without reading the limiter first. It may be older
	// than another process's write; such a write fails its version
	// condition and is tried again on a fresh read. A decision that there
	// is nothing to write is never taken on it, unless it is the caller's
	// own write in the same turn (LeaveAndAdmitNext).
	last  limiter.State
	known bool
	// seen is how many runs the last write left waiting and when it
	// landed, for a look from outside the turn (QueueFull).
	seen atomic.Pointer[seenWaiting]
}

type seenWaiting struct {
	waiting int
	at      time.Time
}

// state is the limiter to decide the try-th round on: the last state this
// process wrote for the first round, else a fresh read.
func (tu *turn) state(ctx context.Context, s Limiters, name string, try int) (st limiter.State, cached bool, err error) {
	if try == 0 && tu.known {
		return tu.last, true, nil
	}
	st, err = s.GetLimiter(ctx, name)
	return st, false, err
}

// wrote remembers the limiter as a write that landed left it.
func (tu *turn) wrote(st limiter.State) {
	tu.last, tu.known = st, true
	tu.seen.Store(&seenWaiting{waiting: st.Waiting, at: time.Now()})
}

// seenLately is how many runs this process's last write of limiter name
// left waiting, when that write landed within within; ok false otherwise.
func (t *Turns) seenLately(s Limiters, name string, within time.Duration) (waiting int, ok bool) {
	key, ok := keyOf(s, name)
	if !ok {
		return 0, false
	}
	t.mu.Lock()
	tu := t.held[key]
	t.mu.Unlock()
	if tu == nil {
		return 0, false
	}
	sw := tu.seen.Load()
	if sw == nil || time.Since(sw.at) > within {
		return 0, false
	}
	return sw.waiting, true
}

// waiter is a caller queued for a limiter's turn. The holder may take
// its work into its own write (join: an entry, or a leave, written with
// the holder's own): the waiter is then told the outcome when its channel
// closes and never holds the turn.
type waiter struct {
	ch     chan struct{}
	urgent bool
	// entry (with now) or leave (a run id) is the work the waiter queued
	// with, which a holder doing the same may join; neither: none.
	entry *Entry
	now   time.Time
	leave string
	// joined is set, under the registry's mu, when a holder took the
	// work; the outcome fields are set before ch closes.
	joined  bool
	entered Entered
	left    bool
	err     error
}

// take waits for the turn of s's limiter name (or ctx's end) and returns
// it with its release. urgent: the caller makes room, and goes before
// entries.
func (t *Turns) take(ctx context.Context, s Limiters, name string, urgent bool) (*turn, func(), error) {
	return t.takeAs(ctx, s, name, &waiter{urgent: urgent})
}

// takeAs is take for a waiter whose work a holder may join: when one did,
// it answers no turn (w.joined, with the outcome in w).
func (t *Turns) takeAs(ctx context.Context, s Limiters, name string, w *waiter) (*turn, func(), error) {
	key, ok := keyOf(s, name)
	if !ok {
		return &turn{}, func() {}, nil
	}
	t.mu.Lock()
	tu := t.held[key]
	if tu == nil {
		tu = &turn{}
		t.held[key] = tu
	}
	tu.users++
	release := func() { t.handOver(key, tu) }
	if !tu.busy {
		tu.busy = true
		t.mu.Unlock()
		return tu, release, nil
	}
	w.ch = make(chan struct{})
	if w.urgent {
		tu.urgent = append(tu.urgent, w)
	} else {
		tu.other = append(tu.other, w)
	}
	t.mu.Unlock()
	select {
	case <-w.ch:
		if w.joined {
			return nil, nil, nil
		}
		return tu, release, nil
	case <-ctx.Done():
		t.mu.Lock()
		queued := dequeue(&tu.urgent, w) || dequeue(&tu.other, w)
		if queued {
			tu.users--
		}
		joined := w.joined
		t.mu.Unlock()
		if !queued && !joined {
			release() // handed the turn as ctx ended: pass it on
		}
		// A joined waiter's work is done by its holder all the same, as
		// a request that outlived its caller.
		return nil, nil, ctx.Err()
	}
}

// join takes, for the holder of tu, up to n queued waiters whose work is
// like the holder's (entries when entry, else leaves) out of the queue:
// the holder writes their work with its own and tells each the outcome
// (done).
func (t *Turns) join(tu *turn, entry bool, n int) []*waiter {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := &tu.other
	if !entry {
		q = &tu.urgent
	}
	var out, keep []*waiter
	for _, w := range *q {
		if len(out) < n && ((entry && w.entry != nil) || (!entry && w.leave != "")) {
			w.joined = true
			tu.users--
			out = append(out, w)
			continue
		}
		keep = append(keep, w)
	}
	*q = keep
	return out
}

// done tells a joined waiter its work's outcome.
func (w *waiter) done() { close(w.ch) }

// handOver gives the turn to the next waiter, room makers first, or frees
// it; the registry forgets a turn nobody uses beyond idleTurns of them.
func (t *Turns) handOver(key turnKey, tu *turn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tu.users--
	for _, q := range []*[]*waiter{&tu.urgent, &tu.other} {
		if len(*q) > 0 {
			w := (*q)[0]
			*q = (*q)[1:]
			close(w.ch)
			return
		}
	}
	tu.busy = false
	if tu.users == 0 && len(t.held) > idleTurns {
		delete(t.held, key)
	}
}

// dequeue takes w out of q, reporting whether it was there.
func dequeue(q *[]*waiter, w *waiter) bool {
	for i, c := range *q {
		if c == w {
			*q = append((*q)[:i], (*q)[i+1:]...)
			return true
		}
	}
	return false
}

// conflictPause waits before the try-th round after a version conflict:
// Backoff from 1 ms, at most 50 ms.
func conflictPause(ctx context.Context, try int) error {
	return Backoff(ctx, try, time.Millisecond, 50*time.Millisecond)
}

// Backoff waits before the try-th retry of a write another writer beat: a
// full-jitter delay drawn below base doubled try times, at most ceiling. It
// paces retries against other writers; it never waits for a state.
func Backoff(ctx context.Context, try int, base, ceiling time.Duration) error {
	d := ceiling
	if try < 30 {
		d = min(base<<try, ceiling)
	}
	t := time.NewTimer(time.Duration(rand.Int64N(int64(d)) + 1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
