package ledgertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

var heldCases = []Case{
	{"TransitionFromWhatTheCallerHolds", transitionFromHeld},
	{"TransitionFromAStaleCopy", transitionFromStaleCopy},
	{"RefusalFromAStaleCopyIsConfirmed", staleCopyRefusalConfirmed},
	{"DuplicateFromAStaleCopyAnswersTheStateThatStands", duplicateFromStaleCopy},
	{"TransitionAllInOneWrite", transitionAll},
	{"CreateRunScheduled", createRunScheduled},
	{"RunShownRunningOnceATaskStarted", runShownRunning},
	{"RunStoredRunningStillReadsAndEnds", runStoredRunning},
	{"RunDeadline", runDeadline},
	{"RunDependencyTimeout", runDependencyTimeout},
}

// transitionFromHeld: Result.Instance is the instance as written, so a
// caller goes on from it without a read, step after step.
func transitionFromHeld(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("held", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.Clock.Now()
	held := v.Tasks[0].Instance
	for i, e := range []statemodel.Event{Ev(statemodel.EvDepsMet, 0), Dispatch(1), Started(1, "w"), Succeeded(1)} {
		res, err := h.Store.TransitionFrom(ctx, held, e, now, Policy())
		if err != nil || res.Outcome != statemodel.Applied {
			t.Fatalf("step %d %s from the held instance: %s, %v", i, e.Type, res.Outcome, err)
		}
		stored := h.MustInstance(t, key)
		if !res.Instance.Snapshot.EqualState(stored.Snapshot) || !res.Snapshot.EqualState(stored.Snapshot) ||
			!res.Instance.TimerAt.Equal(stored.TimerAt) || res.Instance.TimerKind != stored.TimerKind || res.Instance.Key != key {
			t.Fatalf("step %d: the result's instance %+v is not the stored one %+v", i, res.Instance.Snapshot, stored.Snapshot)
		}
		held = res.Instance
	}
	if held.Snapshot.State != statemodel.StateSucceeded {
		t.Fatalf("state %s, want SUCCEEDED", held.Snapshot.State)
	}
	// The same event again from the held instance: a duplicate.
	res, err := h.Store.TransitionFrom(ctx, held, Ev(statemodel.EvDepsMet, 0), now, Policy())
	if res.Outcome != statemodel.Rejected || !errors.Is(err, statemodel.ErrIllegalTransition) {
		t.Fatalf("deps.met on a finished instance: %s, %v; want rejected", res.Outcome, err)
	}
}

// transitionFromAStaleCopy: a decision made from a copy another writer has
// moved past is never written: the event is decided again on the stored
// instance (a lost claim race is rejected; a cancel request meets the
// running attempt and asks it to stop).
func transitionFromStaleCopy(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("stale-copy", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.ToQueued(t, key)
	queued := h.MustInstance(t, key)
	won := h.Step(t, key, Started(1, "w"), now)

	res, err := h.Store.TransitionFrom(ctx, queued, Started(1, "late"), now, Policy())
	if res.Outcome != statemodel.Rejected || err == nil {
		t.Fatalf("a claim decided from the QUEUED copy after another won: %s, %v; want rejected", res.Outcome, err)
	}
	cur, _ := res.Snapshot.Current()
	if cur.WorkerID != "w" {
		t.Fatalf("the rejection answers attempt %+v, want the winner's", cur)
	}
	cancel := Ev(statemodel.EvCancelRequested, 0)
	cancel.Operator, cancel.Reason = "ops", "stop"
	res, err = h.Store.TransitionFrom(ctx, queued, cancel, now, Policy())
	if err != nil || res.Outcome != statemodel.Applied || res.Snapshot.State != statemodel.StateCancelling {
		t.Fatalf("a cancel decided from the QUEUED copy: %s %s, %v; want applied to the RUNNING instance (CANCELLING)", res.Outcome, res.Snapshot.State, err)
	}
	stored := h.MustInstance(t, key)
	if stored.Snapshot.State != statemodel.StateCancelling || stored.Snapshot.Version != won.Snapshot.Version+1 {
		t.Fatalf("stored %s v%d, want CANCELLING v%d", stored.Snapshot.State, stored.Snapshot.Version, won.Snapshot.Version+1)
	}
}

// transitionAll: events applied in order in one call, each decided on the
// snapshot the one before it left; the sequence stops at the first event
// that does not apply, keeping the ones before it.
func transitionAll(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("all", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.Clock.Now()
	dispatch := Dispatch(1)
	dispatch.Executor = "lambda"
	res, err := h.Store.TransitionAll(ctx, v.Tasks[0].Instance, []statemodel.Event{Ev(statemodel.EvDepsMet, 0), dispatch}, now, Policy())
	if err != nil || res.Outcome != statemodel.Applied || res.Stopped || res.Snapshot.State != statemodel.StateQueued {
		t.Fatalf("deps.met and dispatch: %s %s stopped %t, %v; want applied, QUEUED", res.Outcome, res.Snapshot.State, res.Stopped, err)
	}
	if hist := h.FullHistory(t, key); len(hist) != 3 || hist[1].To != statemodel.StateScheduled || hist[2].To != statemodel.StateQueued {
		t.Fatalf("history %+v, want created, SCHEDULED, QUEUED", hist)
	}
	if trs := res.Transitions; len(trs) != 2 || trs[0].To != statemodel.StateScheduled || trs[1].To != statemodel.StateQueued || trs[1].Seq != 3 {
		t.Fatalf("result's transitions %+v, want SCHEDULED (seq 2) and QUEUED (seq 3)", trs)
	}
	res, err = h.Store.TransitionAll(ctx, res.Instance, []statemodel.Event{Started(1, "w"), Started(1, "x")}, now, Policy())
	if res.Outcome != statemodel.Rejected || !res.Stopped || err == nil {
		t.Fatalf("two claims in one sequence: %s stopped %t, %v; want the second rejected", res.Outcome, res.Stopped, err)
	}
	if trs := res.Transitions; len(trs) != 1 || trs[0].To != statemodel.StateRunning {
		t.Fatalf("stopped sequence's transitions %+v, want the one written (RUNNING)", trs)
	}
	stored := h.MustInstance(t, key)
	if cur, _ := stored.Snapshot.Current(); stored.Snapshot.State != statemodel.StateRunning || cur.WorkerID != "w" ||
		cur.Executor != "lambda" || cur.ExecutorID != dispatch.ExecutorID {
		t.Fatalf("stored %s claimed by %q, executor %q %q; want RUNNING claimed by w, executor lambda %s",
			stored.Snapshot.State, cur.WorkerID, cur.Executor, cur.ExecutorID, dispatch.ExecutorID)
	}
	if _, err := h.Store.TransitionAll(ctx, stored, nil, now, Policy()); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("no event: %v, want invalid input", err)
	}
}

// createRunScheduled: a task created SCHEDULED carries its deps.met in the
// creating write: two records, the dispatch timer due now, which is near,
// so not in the timers index (ledger.IndexedTimer).
func createRunScheduled(t *testing.T, h *Harness) {
	nr := NewRun("scheduled", "root", "child")
	nr.Tasks[0].Scheduled = true
	nr.Tasks[1].DependsOn = []string{"root"}
	v := h.MustCreate(t, nr)
	root, child := v.Tasks[1].Instance, v.Tasks[0].Instance // by task id
	if _, kind := root.Snapshot.Timer(); root.Key.Task != "root" || root.Snapshot.State != statemodel.StateScheduled ||
		kind != statemodel.TimerDispatch || root.TimerKind != statemodel.TimerNone || !root.TimerAt.IsZero() {
		t.Fatalf("root %s, timer %s, indexed %s at %s; want SCHEDULED with the dispatch timer, not indexed",
			root.Snapshot.State, kind, root.TimerKind, root.TimerAt)
	}
	if child.Snapshot.State != statemodel.StateCreated {
		t.Fatalf("child %s, want CREATED", child.Snapshot.State)
	}
	hist := h.FullHistory(t, root.Key)
	if len(hist) != 2 || hist[0].Event != statemodel.EvCreated || hist[1].Event != statemodel.EvDepsMet {
		t.Fatalf("root history %+v, want created then deps.met", hist)
	}
	if stored := h.MustInstance(t, root.Key); !stored.Snapshot.EqualState(root.Snapshot) {
		t.Fatalf("the view's root %+v is not the stored %+v", root.Snapshot, stored.Snapshot)
	}
}

// runShownRunning: no write moves a run from QUEUED to RUNNING; ReadRun
// and ListRuns (and its status filter) show it RUNNING once a task of it
// started, from its tasks, while the run item stays as created.
func runShownRunning(t *testing.T, h *Harness) {
	ctx := context.Background()
	nr := NewRun("shown", "main", "after")
	nr.Tasks[1].DependsOn = []string{"main"}
	v := h.MustCreate(t, nr)
	key := ledger.InstanceKey{Run: v.Run.ID, Task: "main"}
	h.ToQueued(t, key)
	wantShown(t, h, v.Run, statemodel.RunQueued) // dispatched is not started
	h.Step(t, key, Started(1, "w"), h.Clock.Now())
	wantShown(t, h, v.Run, statemodel.RunRunning)
	h.Step(t, key, Succeeded(1), h.Clock.Now())
	// Still RUNNING though the task ended: the run's end is its advance's
	// to store, and the other task has not run.
	wantShown(t, h, v.Run, statemodel.RunRunning)
	stored, err := h.Store.GetRun(ctx, v.Run.ID)
	if err != nil || stored.ExecutionState != statemodel.RunQueued || stored.Version != v.Run.Version {
		t.Fatalf("stored run %s at version %d (%v); want QUEUED at %d: no write for the start", stored.ExecutionState, stored.Version, err, v.Run.Version)
	}
	ended, err := h.Store.UpdateRunState(ctx, stored, ledger.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: stored.PublicationState})
	if err != nil || ended.ExecutionState != statemodel.RunSucceeded {
		t.Fatalf("end the run from QUEUED: %+v, %v", ended, err)
	}
	wantShown(t, h, v.Run, statemodel.RunSucceeded)
	if busy, err := h.Store.HasUnfinishedRuns(ctx, "shown"); err != nil || busy {
		t.Fatalf("an ended run is unfinished: %t %v", busy, err)
	}
}

// runStoredRunning: a run whose RUNNING state was written, as every run's
// was before its start was derived, reads RUNNING, is listed so, and ends.
func runStoredRunning(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("stored-running", "main"))
	running, err := h.Store.UpdateRunState(ctx, v.Run, ledger.RunUpdate{ExecutionState: statemodel.RunRunning, PublicationState: v.Run.PublicationState})
	if err != nil {
		t.Fatalf("store RUNNING: %v", err)
	}
	wantShown(t, h, v.Run, statemodel.RunRunning) // its task never started
	if busy, err := h.Store.HasUnfinishedRuns(ctx, "stored-running"); err != nil || !busy {
		t.Fatalf("a RUNNING run is not unfinished: %t %v", busy, err)
	}
	if _, err := h.Store.UpdateRunState(ctx, running, ledger.RunUpdate{ExecutionState: statemodel.RunFailed, PublicationState: running.PublicationState}); err != nil {
		t.Fatalf("end a run stored RUNNING: %v", err)
	}
	wantShown(t, h, v.Run, statemodel.RunFailed)
}

// wantShown fails unless ReadRun and ListRuns show run in state, and the
// listing's status filter finds it under state's status only.
func wantShown(t *testing.T, h *Harness, run ledger.Run, state statemodel.RunState) {
	t.Helper()
	ctx := context.Background()
	v, err := h.Store.ReadRun(ctx, run.ID)
	if err != nil || v.Run.ExecutionState != state || v.Run.Status != state.Status() {
		t.Fatalf("ReadRun: %s/%s (%v); want %s", v.Run.ExecutionState, v.Run.Status, err, state)
	}
	for _, st := range []statemodel.Status{"", statemodel.StatusPending, statemodel.StatusRunning, state.Status()} {
		runs, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: run.Job, Status: st, Limit: 10})
		if err != nil {
			t.Fatalf("ListRuns %q: %v", st, err)
		}
		want := st == "" || st == state.Status()
		if found := len(runs) == 1 && runs[0].ID == run.ID; found != want || len(runs) > 1 {
			t.Fatalf("ListRuns of status %q: %+v; want the run listed: %t", st, runs, want)
		}
		if len(runs) == 1 && runs[0].ExecutionState != state {
			t.Fatalf("ListRuns of status %q shows %s, want %s", st, runs[0].ExecutionState, state)
		}
	}
}

// staleCopyRefusalConfirmed: a decision from the caller's copy that writes
// nothing (a rejection, a duplicate) is confirmed against the instance as
// it stands before it is answered, so a stale copy costs a read, never a
// wrong answer: a claim decided from a CREATED copy of a QUEUED instance
// wins.
func staleCopyRefusalConfirmed(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("stale-nothing", "main"))
	key := v.Tasks[0].Instance.Key
	created := v.Tasks[0].Instance
	h.ToQueued(t, key)
	claim := Started(1, "w")
	res, err := h.Store.TransitionFrom(ctx, created, claim, h.Clock.Now(), Policy())
	if err != nil || res.Outcome != statemodel.Applied || res.Snapshot.State != statemodel.StateRunning {
		t.Fatalf("a claim decided from the CREATED copy of a QUEUED instance: %s %s, %v; want applied: a refusal from a held copy is confirmed against the instance as it stands", res.Outcome, res.Snapshot.State, err)
	}
	again, err := h.Store.TransitionFrom(ctx, created, claim, h.Clock.Now(), Policy())
	if err != nil || again.Outcome != statemodel.Duplicate || again.Snapshot.State != statemodel.StateRunning {
		t.Fatalf("the same claim again from the CREATED copy: %s %s, %v; want a duplicate answering RUNNING", again.Outcome, again.Snapshot.State, err)
	}
	other := Started(1, "w2")
	if res, err := h.Store.TransitionFrom(ctx, created, other, h.Clock.Now(), Policy()); res.Outcome != statemodel.Rejected || err == nil || res.Snapshot.State != statemodel.StateRunning {
		t.Fatalf("another worker's claim from the CREATED copy: %s %s, %v; want rejected against the RUNNING instance", res.Outcome, res.Snapshot.State, err)
	}
}

// duplicateFromStaleCopy: two deliveries of one completion decided from
// the same RUNNING copy: the first is applied, the second is a duplicate
// that answers the state that stands (SUCCEEDED), not the copy's.
func duplicateFromStaleCopy(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("dup-copy", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.ToQueued(t, key)
	running := h.Step(t, key, Started(1, "w"), now).Instance
	done := Succeeded(1)
	first, err := h.Store.TransitionFrom(ctx, running, done, now, Policy())
	if err != nil || first.Outcome != statemodel.Applied {
		t.Fatalf("the first delivery: %s, %v", first.Outcome, err)
	}
	again, err := h.Store.TransitionFrom(ctx, running, done, now, Policy())
	if err != nil || again.Outcome != statemodel.Duplicate || again.Snapshot.State != statemodel.StateSucceeded ||
		again.First != (statemodel.SeenEvent{ID: done.ID, Seq: first.Transition.Seq, To: statemodel.StateSucceeded}) {
		t.Fatalf("the second delivery from the RUNNING copy: %s %s first %+v, %v; want a duplicate answering SUCCEEDED", again.Outcome, again.Snapshot.State, again.First, err)
	}
}

// runDeadline: a run's deadline round-trips, its timer falls due at the
// deadline at the latest (at creation and when re-armed), and
// MarkDeadlineMissed records the miss once, only while the run is
// unfinished, putting the timer back to the backstop.
func runDeadline(t *testing.T, h *Harness) {
	ctx := context.Background()
	now := h.Clock.Now()
	nr := NewRun("deadline", "main")
	nr.DeadlineAt = now.Add(time.Second)
	v := h.MustCreate(t, nr)
	run, err := h.Store.GetRun(ctx, v.Run.ID)
	if err != nil || !run.DeadlineAt.Equal(nr.DeadlineAt) || !run.TimerAt.Equal(run.DeadlineAt) || !run.DeadlineMissedAt.IsZero() {
		t.Fatalf("created run %+v (%v): want deadline %s, the timer at it, not missed", run, err, nr.DeadlineAt)
	}
	if re, err := h.Store.RearmRunBackstop(ctx, run); err != nil || !re.TimerAt.Equal(run.DeadlineAt) {
		t.Fatalf("re-armed before the miss is recorded: timer %s (%v), want the deadline %s", re.TimerAt, err, run.DeadlineAt)
	}
	at := h.Clock.Advance(2 * time.Second)
	marked, ok, err := h.Store.MarkDeadlineMissed(ctx, run)
	if err != nil || !ok || marked.DeadlineMissedAt.IsZero() || !marked.TimerAt.After(at.Add(time.Second)) {
		t.Fatalf("mark missed: %+v %t %v; want recorded, the timer back to the backstop", marked, ok, err)
	}
	stored, err := h.Store.GetRun(ctx, run.ID)
	if err != nil || !stored.DeadlineMissedAt.Equal(marked.DeadlineMissedAt) || !stored.TimerAt.Equal(marked.TimerAt) || stored.Version != run.Version {
		t.Fatalf("stored %+v (%v), want the mark %s and timer %s at version %d", stored, err, marked.DeadlineMissedAt, marked.TimerAt, run.Version)
	}
	if _, ok, err := h.Store.MarkDeadlineMissed(ctx, run); err != nil || ok {
		t.Fatalf("second mark: %t %v, want false", ok, err)
	}
	if re, err := h.Store.RearmRunBackstop(ctx, stored); err != nil || !re.TimerAt.After(at.Add(time.Second)) {
		t.Fatalf("re-armed after the miss: timer %s (%v), want the backstop", re.TimerAt, err)
	}

	nr = NewRun("deadline", "main")
	nr.DeadlineAt = at.Add(time.Second)
	done := h.MustCreate(t, nr)
	fin, err := h.Store.UpdateRunState(ctx, done.Run, ledger.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired})
	if err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(2 * time.Second)
	if _, ok, err := h.Store.MarkDeadlineMissed(ctx, fin); err != nil || ok {
		t.Fatalf("mark a finished run: %t %v, want false", ok, err)
	}
	if _, _, err := h.Store.MarkDeadlineMissed(ctx, v.Run); err != nil {
		t.Fatalf("a refused mark is no error: %v", err)
	}
	plain := h.MustCreate(t, NewRun("deadline", "main"))
	if _, _, err := h.Store.MarkDeadlineMissed(ctx, plain.Run); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("a run without deadline: %v, want invalid input", err)
	}
}

// runDependencyTimeout: a run created with a dependency timeout sooner
// than its backstop carries its timer at that time, listed due then and
// not before; writes before it keep it there; a write at or after it (the
// pass that ends the waiting tasks) puts the timer back to the backstop. A
// sooner deadline comes first, and once missed the dependency timeout is
// next.
func runDependencyTimeout(t *testing.T, h *Harness) {
	ctx := context.Background()
	now := h.Clock.Now()
	runDue := func(id string, at time.Time) bool {
		t.Helper()
		timers, _ := allDue(t, h, at, 0)
		for _, d := range timers {
			if d.Item == ledger.TimerOfRun && d.Run == id {
				return true
			}
		}
		return false
	}
	nr := NewRun("deps-timeout", "main")
	nr.DependencyTimeoutAt = now.Add(3 * time.Second)
	v := h.MustCreate(t, nr)
	if !v.Run.DependencyTimeoutAt.Equal(nr.DependencyTimeoutAt) || !v.Run.TimerAt.Equal(nr.DependencyTimeoutAt) {
		t.Fatalf("created run: dependency timeout %s, timer %s; want both %s", v.Run.DependencyTimeoutAt, v.Run.TimerAt, nr.DependencyTimeoutAt)
	}
	run, err := h.Store.GetRun(ctx, v.Run.ID)
	if err != nil || !run.DependencyTimeoutAt.Equal(nr.DependencyTimeoutAt) || !run.TimerAt.Equal(nr.DependencyTimeoutAt) {
		t.Fatalf("stored run %+v (%v): want the dependency timeout %s and the timer at it", run, err, nr.DependencyTimeoutAt)
	}
	if read, err := h.Store.ReadRun(ctx, v.Run.ID); err != nil || !read.Run.DependencyTimeoutAt.Equal(nr.DependencyTimeoutAt) {
		t.Fatalf("read run %+v (%v): want the dependency timeout %s", read.Run, err, nr.DependencyTimeoutAt)
	}
	if runDue(run.ID, nr.DependencyTimeoutAt.Add(-time.Millisecond)) || !runDue(run.ID, nr.DependencyTimeoutAt) {
		t.Fatalf("the run's timer is not listed due exactly from its dependency timeout %s", nr.DependencyTimeoutAt)
	}

	// Before the timeout: a re-arm and a stored state keep the timer there.
	h.Clock.Advance(time.Second)
	if re, err := h.Store.RearmRunBackstop(ctx, run); err != nil || !re.TimerAt.Equal(nr.DependencyTimeoutAt) {
		t.Fatalf("re-armed before the dependency timeout: timer %s (%v), want %s", re.TimerAt, err, nr.DependencyTimeoutAt)
	}
	run, err = h.Store.UpdateRunState(ctx, run, ledger.RunUpdate{ExecutionState: statemodel.RunQueued, PublicationState: statemodel.PublicationNotRequired})
	if err != nil || !run.TimerAt.Equal(nr.DependencyTimeoutAt) {
		t.Fatalf("stored before the dependency timeout: timer %s (%v), want %s", run.TimerAt, err, nr.DependencyTimeoutAt)
	}

	// At the timeout: the pass's write goes back to the backstop.
	at := h.Clock.Advance(2 * time.Second)
	run, err = h.Store.UpdateRunState(ctx, run, ledger.RunUpdate{ExecutionState: statemodel.RunRunning, PublicationState: statemodel.PublicationNotRequired})
	if err != nil || !run.TimerAt.Equal(at.Add(ledger.DefaultRunBackstop)) {
		t.Fatalf("stored at the dependency timeout: timer %s (%v), want the backstop %s", run.TimerAt, err, at.Add(ledger.DefaultRunBackstop))
	}
	if stored, err := h.Store.GetRun(ctx, run.ID); err != nil || !stored.TimerAt.Equal(run.TimerAt) || !stored.DependencyTimeoutAt.Equal(nr.DependencyTimeoutAt) {
		t.Fatalf("stored %+v (%v), want timer %s and the dependency timeout kept", stored, err, run.TimerAt)
	}
	if runDue(run.ID, at) {
		t.Fatal("the run's timer is still due after the pass at its dependency timeout")
	}
	if re, err := h.Store.RearmRunBackstop(ctx, run); err != nil || !re.TimerAt.Equal(at.Add(ledger.DefaultRunBackstop)) {
		t.Fatalf("re-armed after the dependency timeout: timer %s (%v), want the backstop", re.TimerAt, err)
	}

	// A sooner deadline comes first; once recorded missed, the dependency
	// timeout is next. One later than the backstop leaves the backstop.
	now = h.Clock.Now()
	nr = NewRun("deps-timeout", "main")
	nr.DeadlineAt, nr.DependencyTimeoutAt = now.Add(time.Second), now.Add(3*time.Second)
	dl := h.MustCreate(t, nr)
	if !dl.Run.TimerAt.Equal(nr.DeadlineAt) {
		t.Fatalf("timer %s, want the sooner deadline %s", dl.Run.TimerAt, nr.DeadlineAt)
	}
	h.Clock.Advance(2 * time.Second)
	marked, ok, err := h.Store.MarkDeadlineMissed(ctx, dl.Run)
	if err != nil || !ok || !marked.TimerAt.Equal(nr.DependencyTimeoutAt) {
		t.Fatalf("deadline missed: timer %s (%t %v), want the dependency timeout %s", marked.TimerAt, ok, err, nr.DependencyTimeoutAt)
	}
	now = h.Clock.Now()
	nr = NewRun("deps-timeout", "main")
	nr.DependencyTimeoutAt = now.Add(ledger.DefaultRunBackstop + time.Minute)
	if far := h.MustCreate(t, nr); !far.Run.TimerAt.Equal(now.Add(ledger.DefaultRunBackstop)) {
		t.Fatalf("timer %s, want the backstop %s before a later dependency timeout", far.Run.TimerAt, now.Add(ledger.DefaultRunBackstop))
	}
}
