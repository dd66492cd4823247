package statemodel

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The model check explores every interleaving of a bounded event alphabet.
//
// Bound: one instance; MaxAttempts 2 and MaxResubmits 1, with dispatches for
// attempts 1 to 3 so that a third attempt is always tried; two workers racing
// for attempt 1; for each attempt a claim, a heartbeat, a success, a failure,
// a cancel acknowledgement, lease expiry and cancel timeout; queue timeout,
// the four evidence verdicts on attempts 1 and 2; retry timers; a dispatch
// that fails for good (in every SCHEDULED, the resubmit's included); and the
// operator's cancel, a pause/resume pair, an override and a manual
// retry; and a signal task's start, approval, rejection and run timeout,
// which attempts a worker runs must refuse (TestModelCheckSignalTasks
// explores a signal task's own alphabet). Every event may be delivered at any moment and any number of times
// (duplicates), in any order (reordering, late events from older attempts
// after a newer one started, lease expiry racing a late success, cancel
// racing completion).
//
// Time is constant and every duration in the policy is zero, so every timer
// is due at once: timer events race everything else instead of waiting
// (their not-yet-due refusals are unit-tested). Each event id can change the
// state only once, so the reachable graph is finite; breadth-first search
// visits every reachable snapshot once and every edge from it, which covers
// every interleaving of the alphabet.

type applyFunc func(Snapshot, Event, time.Time, Policy) Decision

func checkPolicy() Policy {
	return Policy{
		Retry:        RetryPolicy{MaxAttempts: 2, BackoffCoefficient: 2, Jitter: JitterNone},
		MaxResubmits: 1,
	}
}

func alphabet() []Event {
	w := func(id string, t EventType, n int, worker string) Event {
		return Event{ID: id, Type: t, Actor: ActorWorker, Attempt: n, WorkerID: worker}
	}
	r := func(id string, t EventType, n int) Event {
		return Event{ID: id, Type: t, Actor: ActorReconciler, Attempt: n}
	}
	op := func(id string, t EventType) Event {
		return Event{ID: id, Type: t, Actor: ActorOperator, Operator: "ana", Reason: "model check"}
	}
	sc := func(id string, t EventType) Event { return Event{ID: id, Type: t, Actor: ActorScheduler} }
	code := 1
	fail := func(id string, n int) Event {
		e := w(id, EvFailed, n, "")
		e.ExitCode = &code
		e.ErrorCategory = "boom"
		return e
	}
	evs := []Event{
		sc("created", EvCreated), sc("deps", EvDepsMet),
		sc("retry-1", EvRetryDue), sc("retry-2", EvRetryDue),
		op("cancel", EvCancelRequested), op("pause-1", EvPause), op("resume-1", EvResume),
		op("override-ok", EvOverrideSucceeded),
		op("manual-retry", EvManualRetry),
		w("claim-1a", EvStarted, 1, "A"), w("claim-1b", EvStarted, 1, "B"),
		r("queue-timeout-1", EvQueueTimeout, 1),
		r("evidence-ok-1", EvEvidenceOK, 1), r("evidence-failed-1", EvEvidenceFailed, 1),
		r("never-started-1", EvNeverStarted, 1),
	}
	for n := 1; n <= 3; n++ {
		evs = append(evs, Event{ID: fmt.Sprintf("dispatch-%d", n), Type: EvDispatched, Actor: ActorExecutor, Attempt: n, TokenHash: fmt.Sprintf("h%d", n)})
	}
	for n := 1; n <= 2; n++ {
		evs = append(evs,
			w(fmt.Sprintf("claim-%d", n+1), EvStarted, n+1, "C"),
			w(fmt.Sprintf("hb-%d", n), EvHeartbeat, n, ""),
			w(fmt.Sprintf("ok-%d", n), EvSucceeded, n, ""),
			fail(fmt.Sprintf("fail-%d", n), n),
			w(fmt.Sprintf("ack-%d", n), EvCancelled, n, ""),
			r(fmt.Sprintf("lease-%d", n), EvLeaseExpired, n),
			r(fmt.Sprintf("cancel-timeout-%d", n), EvCancelTimeout, n),
			r(fmt.Sprintf("window-%d", n), EvWindowExpired, n),
		)
	}
	evs = append(evs, r("never-started-2", EvNeverStarted, 2))
	// Appended last: the fuzz corpus indexes the alphabet.
	evs = append(evs, sc("dispatch-failed", EvDispatchFailed), sc("deps-timeout", EvDepsTimeout))
	// A signal task's events, which a worker's attempts must refuse
	// (signalAlphabet explores a signal task's own life).
	evs = append(evs,
		Event{ID: "signal-start-1", Type: EvSignalRequested, Actor: ActorScheduler, Attempt: 1},
		Event{ID: "approve-1", Type: EvSignalSucceeded, Actor: ActorOperator, Attempt: 1},
		Event{ID: "reject-2", Type: EvSignalFailed, Actor: ActorOperator, Attempt: 2},
		Event{ID: "signal-timeout-1", Type: EvSignalTimeout, Actor: ActorReconciler, Attempt: 1})
	return evs
}

type mcResult struct {
	States, Transitions int
	Violations          []string
}

type mcNode struct {
	s    Snapshot
	hist []Transition
}

// snapshotKey identifies a snapshot up to the order in which its events were
// applied: two snapshots that differ only in the order (and so the sequence
// numbers) of their remembered event ids behave the same for every future
// event, so the search visits one of them. That reduction keeps the
// exhaustive search in seconds.
func snapshotKey(s Snapshot) string {
	ids := make([]string, len(s.Recent))
	for i, r := range s.Recent {
		ids[i] = r.ID + ">" + string(r.To)
	}
	slices.Sort(ids)
	s.Recent = nil
	s.Seq = 0
	b, err := json.Marshal(struct {
		S   Snapshot
		IDs []string
	}{s, ids})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// attemptsOf is every attempt's latest record: from the history's records,
// then from the snapshot's (the newest).
func attemptsOf(hist []Transition, s Snapshot) map[int]AttemptRecord {
	out := map[int]AttemptRecord{}
	for _, tr := range hist {
		if tr.AttemptRecord != nil {
			out[tr.AttemptRecord.N] = *tr.AttemptRecord
		}
	}
	for _, a := range s.Attempts {
		out[a.N] = a
	}
	return out
}

// checkEdge checks invariants 1-4 and 6-10 on one step s --e--> d, and
// invariant 5 on the history that led to d. It returns the violations.
func checkEdge(apply applyFunc, s Snapshot, hist []Transition, e Event, d Decision, now time.Time, p Policy) []string {
	var v []string
	bad := func(inv int, format string, args ...any) {
		v = append(v, fmt.Sprintf("invariant %d: %s in %s (attempt %d): %s", inv, e, s.State, s.Attempt, fmt.Sprintf(format, args...)))
	}
	n := d.Snapshot
	changed := !n.EqualState(s) || n.Lease != s.Lease
	if d.Outcome == Rejected && changed {
		bad(0, "a rejected event changed the snapshot")
	}
	if d.Err != nil && strings.Contains(d.Err.Error(), ErrTableViolation.Error()) {
		bad(0, "decision outside the table: %v", d.Err)
	}
	// 1. At most one attempt accepted into RUNNING: a claimed attempt keeps
	// its worker, and at most one attempt is running at a time.
	// The snapshot holds the latest MaxInlineAttempts records only: the
	// others are the history's (each record carries its attempt as it
	// stood), so both checks look at every attempt the history knows.
	before, after := attemptsOf(hist, s), attemptsOf(hist, n)
	if d.Transition != nil && d.Transition.AttemptRecord != nil {
		after[d.Transition.AttemptRecord.N] = *d.Transition.AttemptRecord
	}
	for nr, a := range before {
		b, ok := after[nr]
		if !ok {
			bad(1, "attempt %d forgotten", nr)
			continue
		}
		if a.WorkerID != "" && b.WorkerID != a.WorkerID {
			bad(1, "attempt %d changed worker %q -> %q", nr, a.WorkerID, b.WorkerID)
		}
		if a.Claimed() && !b.StartedAt.Equal(a.StartedAt) {
			bad(1, "attempt %d claimed twice", nr)
		}
	}
	live := 0
	for _, a := range after {
		if a.Claimed() && a.EndedAt.IsZero() {
			live++
		}
	}
	if live > 1 {
		bad(1, "%d attempts running at once", live)
	}
	if n.State == StateRunning {
		if cur, ok := n.Current(); !ok || !cur.Claimed() {
			bad(1, "RUNNING without a claimed current attempt")
		}
	}
	// 2. No automatic event leaves a terminal state.
	if s.State.Terminal() && e.Actor != ActorOperator && changed {
		bad(2, "automatic event changed a terminal instance to %s", n.State)
	}
	// 3. A stale event never changes the instance, whatever the decision says.
	isStale := e.Attempt >= 1 && e.Attempt < s.Attempt && (e.Type.Fenced() || e.Type == EvDispatched)
	if isStale && changed {
		bad(3, "event of attempt %d changed the instance (current %d) to %s", e.Attempt, s.Attempt, n.State)
	}
	if isStale && d.Outcome != Stale && d.Outcome != Duplicate {
		bad(3, "older attempt's event classified %s", d.Outcome)
	}
	// 4. Applying an event twice equals applying it once.
	if d.Outcome == Applied || d.Outcome == Refreshed {
		again := apply(n, e, now, p)
		if !again.Snapshot.EqualState(n) || again.Snapshot.Lease != n.Lease {
			bad(4, "second delivery changed the snapshot (%s)", again.Outcome)
		}
		if d.Outcome == Applied && again.Outcome != Duplicate {
			bad(4, "second delivery was %s, not duplicate", again.Outcome)
		}
	}
	// 5. Replay reproduces the snapshot.
	h := hist
	if d.Outcome == Applied && d.Transition != nil {
		h = append(append([]Transition(nil), hist...), *d.Transition)
	}
	if r, err := Replay(h); err != nil || !r.EqualState(n) {
		bad(5, "replay differs (err %v)", err)
	}
	// 6. Every non-terminal state but PAUSED has a timer that will fire.
	at, kind := n.Timer()
	switch {
	case n.State.Terminal() || n.State == StatePaused:
		if kind != TimerNone {
			bad(6, "%s has timer %s", n.State, kind)
		}
	case n.State != StateNone && (kind == TimerNone || at.IsZero()):
		bad(6, "%s has no timer", n.State)
	case n.State != StateNone && kind.State() != n.State:
		// The metrics read an indexed timer's state from its kind.
		bad(6, "%s's timer %s reads as state %q", n.State, kind, kind.State())
	}
	// 7. A success reported by the current attempt is never lost.
	if cur, ok := s.Current(); ok && e.Type == EvSucceeded && e.Attempt == s.Attempt && !s.State.Terminal() &&
		cur.Claimed() && cur.Outcome.Undecided() && !cur.Signal() {
		if _, dup := s.Seen(e.ID); !dup && n.State != StateSucceeded {
			bad(7, "current attempt's success left the instance %s (%s: %v)", n.State, d.Outcome, d.Err)
		}
	}
	// 7s. A signal task's success signal for the current attempt, while it
	// waits, is never lost either.
	if e.Type == EvSignalSucceeded && e.Attempt == s.Attempt && s.State == StateRunning && s.SignalAttempt() {
		if _, dup := s.Seen(e.ID); !dup && n.State != StateSucceeded {
			bad(7, "current signal attempt's success left the instance %s (%s: %v)", n.State, d.Outcome, d.Err)
		}
	}
	// 10. A signal event never applies to a worker's attempt.
	if signalEvent(e.Type) && d.Outcome == Applied && !s.SignalAttempt() {
		bad(10, "%s applied to attempt %d, which a worker runs", e.Type, s.Attempt)
	}
	// 10. A signal task's attempt has no lease and is never LOST or
	// CANCELLING; waiting, its one timer is the run timeout.
	if n.SignalAttempt() {
		if n.State == StateLost || n.State == StateCancelling {
			bad(10, "signal attempt %d is %s", n.Attempt, n.State)
		}
		if n.Lease != (Lease{}) {
			bad(10, "signal attempt %d has a lease", n.Attempt)
		}
		if _, kind := n.Timer(); n.State == StateRunning && kind != TimerSignal {
			bad(10, "running signal attempt has timer %q", kind)
		}
		if e.Actor == ActorWorker && (d.Outcome == Applied || d.Outcome == Refreshed) && s.SignalAttempt() && e.Attempt == s.Attempt {
			bad(10, "a worker's %s applied to a signal attempt", e.Type)
		}
	}
	// 11. A worker's fenced commit lands only for an attempt that owns its
	// task: in an owning state the current attempt is claimed and has not
	// ended (attempt numbers never going back, 9, keeps an older attempt's
	// commit out).
	if n.State.AttemptOwnsTask() {
		if cur, ok := n.Current(); !ok || !cur.Claimed() || !cur.EndedAt.IsZero() {
			bad(11, "%s owned by attempt %d, which is not claimed and running", n.State, n.Attempt)
		}
	}
	// 8. Retries never exceed the policy's maximum.
	if n.Spent > p.Retry.MaxAttempts || n.Resubmits > p.MaxResubmits {
		bad(8, "spent %d of %d, resubmits %d of %d", n.Spent, p.Retry.MaxAttempts, n.Resubmits, p.MaxResubmits)
	}
	budget := 0
	for _, a := range n.Attempts {
		if a.SpendsBudget {
			budget++
		}
	}
	if manual := countManualRetries(h); manual == 0 && budget > p.Retry.MaxAttempts {
		bad(8, "%d budget attempts without a manual retry", budget)
	}
	// 9. Attempt numbers never go back: a scheduler that derives an
	// attempt's token from its number never sends one token twice.
	if n.Attempt < s.Attempt {
		bad(9, "attempt went back from %d to %d", s.Attempt, n.Attempt)
	}
	return v
}

func countManualRetries(h []Transition) int {
	n := 0
	for _, tr := range h {
		if tr.Event == EvManualRetry {
			n++
		}
	}
	return n
}

// modelCheck runs breadth-first search over every snapshot reachable from
// the empty instance with the alphabet, checking every edge.
func modelCheck(apply applyFunc, evs []Event, p Policy, maxStates int) mcResult {
	now := t0
	var res mcResult
	seen := map[string]bool{}
	queue := []mcNode{{}}
	seen[snapshotKey(Snapshot{})] = true
	for len(queue) > 0 && len(seen) <= maxStates {
		cur := queue[0]
		queue = queue[1:]
		res.States++
		for _, e := range evs {
			d := apply(cur.s, e, now, p)
			res.Transitions++
			if v := checkEdge(apply, cur.s, cur.hist, e, d, now, p); len(v) > 0 {
				res.Violations = append(res.Violations, v...)
				if len(res.Violations) > 20 {
					return res
				}
			}
			if d.Outcome != Applied && d.Outcome != Refreshed {
				continue
			}
			k := snapshotKey(d.Snapshot)
			if seen[k] {
				continue
			}
			seen[k] = true
			h := cur.hist
			if d.Transition != nil {
				h = append(append([]Transition(nil), cur.hist...), *d.Transition)
			}
			queue = append(queue, mcNode{s: d.Snapshot, hist: h})
		}
	}
	if len(queue) > 0 {
		res.Violations = append(res.Violations, fmt.Sprintf("state bound %d reached with %d unexplored", maxStates, len(queue)))
	}
	return res
}

const mcMaxStates = 2_000_000

func TestModelCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("exhaustive exploration; run without -short")
	}
	res := modelCheck(Apply, alphabet(), checkPolicy(), mcMaxStates)
	t.Logf("alphabet: %d events; bound: MaxAttempts 2, MaxResubmits 1, 3 dispatches, 2 racing workers", len(alphabet()))
	fmt.Printf("model check: %d states, %d transitions, %d violations\n", res.States, res.Transitions, len(res.Violations))
	for _, v := range res.Violations {
		t.Error(v)
	}
	if res.States < 1000 {
		t.Fatalf("only %d states reached: the alphabet is not exercising the model", res.States)
	}
}

// TestModelCheckClearedTasks explores the operator's way back from a
// terminal state that did not run (retry with downstream: UPSTREAM_FAILED
// or SKIPPED back to CREATED), twice, through a first attempt's life. It
// is a separate, smaller alphabet: folded into the full one it multiplies
// every state by the ways of reaching CREATED.
func TestModelCheckClearedTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("exhaustive exploration; run without -short")
	}
	keep := map[string]bool{
		"created": true, "deps": true, "cancel": true, "pause-1": true, "resume-1": true,
		"override-ok": true, "manual-retry": true, "dispatch-1": true, "claim-1a": true,
		"ok-1": true, "fail-1": true,
	}
	var evs []Event
	for _, e := range alphabet() {
		if keep[e.ID] {
			evs = append(evs, e)
		}
	}
	sc := func(id string, t EventType) Event { return Event{ID: id, Type: t, Actor: ActorScheduler} }
	op := func(id string) Event {
		return Event{ID: id, Type: EvOverrideCleared, Actor: ActorOperator, Operator: "ana", Reason: "model check"}
	}
	evs = append(evs, sc("upstream-failed", EvDepsUpstreamFailed), sc("skipped", EvDepsSkipped), op("clear-1"), op("clear-2"))
	if len(evs) != len(keep)+4 {
		t.Fatalf("alphabet has %d events, want %d: an id above is gone from alphabet()", len(evs), len(keep)+4)
	}
	res := modelCheck(Apply, evs, checkPolicy(), mcMaxStates)
	t.Logf("cleared tasks: %d states, %d transitions", res.States, res.Transitions)
	for _, v := range res.Violations {
		t.Error(v)
	}
	if res.States < 100 {
		t.Fatalf("only %d states reached", res.States)
	}
}

// ignoreAttempt is a deliberately broken transition function: it treats
// every event as if it came from the current attempt.
func ignoreAttempt(s Snapshot, e Event, now time.Time, p Policy) Decision {
	if e.Type.Fenced() {
		e.Attempt = s.Attempt
	}
	return Apply(s, e, now, p)
}

// forgetEventIDs is another broken one: it never recognises a duplicate.
func forgetEventIDs(s Snapshot, e Event, now time.Time, p Policy) Decision {
	s.Recent = nil
	d := Apply(s, e, now, p)
	return d
}

// budgetless ignores the retry budget.
func budgetless(s Snapshot, e Event, now time.Time, p Policy) Decision {
	p.Retry.MaxAttempts = 100
	return Apply(s, e, now, p)
}

func TestModelCheckCatchesBrokenModels(t *testing.T) {
	for name, tc := range map[string]struct {
		apply applyFunc
		inv   string
	}{
		"ignores the attempt number": {ignoreAttempt, "invariant 3"},
		"forgets event ids":          {forgetEventIDs, "invariant 4"},
		"ignores the retry budget":   {budgetless, "invariant 8"},
	} {
		t.Run(name, func(t *testing.T) {
			res := modelCheck(tc.apply, alphabet(), checkPolicy(), 200_000)
			found := false
			for _, v := range res.Violations {
				found = found || strings.HasPrefix(v, tc.inv)
			}
			if !found {
				t.Fatalf("model check missed the defect; %d violations: %v", len(res.Violations), res.Violations[:min(3, len(res.Violations))])
			}
		})
	}
}

// FuzzApply feeds random event sequences and checks the invariants on every
// step; nothing may panic.
func FuzzApply(f *testing.F) {
	f.Add([]byte{0, 1, 20, 12, 30, 31, 2, 22, 12, 30})
	f.Add([]byte{0, 1, 20, 12, 4, 12, 13, 40, 9, 9, 9})
	f.Add([]byte{0, 1, 20, 35, 36, 37, 38, 39, 10, 11})
	evs := alphabet()
	p := checkPolicy()
	p.Retry.InitialInterval = time.Second
	p.Retry.MaxInterval = time.Minute
	p.Timeouts = Timeouts{Queue: 3 * time.Second, Run: time.Minute, Heartbeat: 2 * time.Second, Cancel: 2 * time.Second}
	p.EvidenceWindow = 4 * time.Second
	p.DepsRecheck = time.Second
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Snapshot
		var hist []Transition
		now := t0
		for i := 0; i+1 < len(data) && i < 400; i += 2 {
			e := evs[int(data[i])%len(evs)]
			e.ID = fmt.Sprintf("%s#%d", e.ID, data[i+1]%3) // sometimes the same id, sometimes a new one
			if data[i+1]&0x80 != 0 && e.Attempt > 0 {
				e.Attempt = int(data[i+1]&0x3) + 1
			}
			now = now.Add(time.Duration(data[i+1]&0x7) * time.Second)
			d := Apply(s, e, now, p)
			if v := checkEdge(Apply, s, hist, e, d, now, p); len(v) > 0 {
				t.Fatalf("%v", v)
			}
			if d.Outcome == Applied {
				hist = append(hist, *d.Transition)
			}
			if d.Outcome == Applied || d.Outcome == Refreshed {
				s = d.Snapshot
			}
		}
	})
}

func BenchmarkApply(b *testing.B) {
	p := DefaultPolicy()
	p.Retry.Jitter = JitterNone
	var s Snapshot
	for _, e := range []Event{
		{ID: "c", Type: EvCreated, Actor: ActorScheduler},
		{ID: "d", Type: EvDepsMet, Actor: ActorScheduler},
		{ID: "q", Type: EvDispatched, Actor: ActorExecutor, Attempt: 1},
	} {
		s = Apply(s, e, t0, p).Snapshot
	}
	claim := Event{ID: "s", Type: EvStarted, Actor: ActorWorker, Attempt: 1, WorkerID: "w"}
	b.ReportAllocs()
	for b.Loop() {
		d := Apply(s, claim, t0, p)
		if d.Outcome != Applied {
			b.Fatal(d.Err)
		}
	}
}
