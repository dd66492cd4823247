package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
	"github.com/runledger/runledger/statemodel/limiter"
)

var limiterCases = []Case{
	{"limiter admits up to its limit and queues in priority order", testLimiterOrder},
	{"limiter admissions stay exact under racing entries, leaves and hand-offs", testLimiterRace},
	{"limiter refuses an entry beyond its queue", testLimiterQueueFull},
	{"limiter passes a paused waiting run over and drops a withdrawn one", testLimiterPauseWithdraw},
	{"limiter write conditions refuse a stale version and write nothing", testLimiterConditions},
	{"limiter rate window admits again once it slides", testLimiterRate},
	{"limiter raised limit admits the queue", testLimiterRaise},
	{"limiter live entry lands only while its run is unfinished", testLimiterLiveEntry},
	{"limiter write carries other runs' items together, all or none", testLimiterWriteTogether},
	{"limiter marks a run's admission on its run item, and it outlives the room", testLimiterMarksRun},
}

func place(i int, prio int) limiter.Place {
	return limiter.Place{Priority: prio, CreatedAt: T0.Add(time.Duration(i) * time.Millisecond), RunID: fmt.Sprintf("run-%03d", i)}
}

func enter(t *testing.T, h *Harness, name string, limit int, p limiter.Place) ledger.Entered {
	t.Helper()
	e, err := h.Turns.EnterLimiter(context.Background(), h.Store, ledger.Entry{Limiter: name, Limit: limit, Place: p}, h.Clock.Now())
	if err != nil {
		t.Fatalf("enter %s: %v", p.RunID, err)
	}
	return e
}

// exact checks that the limiter's counters are its items.
func exact(t *testing.T, h *Harness, name string) limiter.State {
	t.Helper()
	ctx := context.Background()
	st, err := h.Store.GetLimiter(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	adm, err := h.Store.ListAdmitted(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := h.Store.ListWaiting(ctx, name, limiter.MaxWaiting)
	if err != nil {
		t.Fatal(err)
	}
	if st.Active != len(adm) || st.Waiting != len(ws) {
		t.Fatalf("counters active %d waiting %d, items %d and %d", st.Active, st.Waiting, len(adm), len(ws))
	}
	return st
}

func testLimiterOrder(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "orders/c1"
	if e := enter(t, h, name, 1, place(0, 3)); !e.Admitted || !e.AdmittedAt.Equal(T0) {
		t.Fatalf("first entry: %+v", e)
	}
	// Waiting: a priority-3 run, then a priority-1 run created later, then
	// a priority-5 one: admitted 1, 3, 5.
	for _, p := range []limiter.Place{place(1, 3), place(2, 1), place(3, 5)} {
		if e := enter(t, h, name, 1, p); e.Admitted || e.Reason != limiter.ReasonConcurrency {
			t.Fatalf("entry %s: %+v", p.RunID, e)
		}
	}
	// A repeated entry of the admitted run, racing as the ticker's repair
	// may, finds it admitted and writes nothing.
	if again := enter(t, h, name, 1, place(0, 3)); !again.Admitted {
		t.Fatalf("a repeated entry of the admitted run: %+v", again)
	}
	if again, err := ledger.FindInLimiter(ctx, h.Store, name, place(0, 3)); err != nil || !again.Admitted {
		t.Fatalf("the admitted run found as %+v, %v", again, err)
	}
	if w, err := ledger.FindInLimiter(ctx, h.Store, name, place(1, 3)); err != nil || w.Admitted || w.Reason == "" {
		t.Fatalf("a waiting run found as %+v, %v", w, err)
	}
	ws, err := h.Store.ListWaiting(ctx, name, 10)
	if err != nil || len(ws) != 3 || ws[0].RunID != "run-002" || ws[1].RunID != "run-001" || ws[2].RunID != "run-003" {
		t.Fatalf("queue %+v, %v", ws, err)
	}
	for i, want := range []string{"run-002", "run-001", "run-003"} {
		prev := []string{"run-000", "run-002", "run-001"}[i]
		if left, err := h.Turns.LeaveLimiter(ctx, h.Store, name, prev); err != nil || !left {
			t.Fatalf("leave %s: %v %v", prev, left, err)
		}
		if left, err := h.Turns.LeaveLimiter(ctx, h.Store, name, prev); err != nil || left {
			t.Fatalf("second leave %s: %v %v", prev, left, err)
		}
		got, err := h.Turns.AdmitNext(ctx, h.Store, name, limiter.Rate{}, h.Clock.Now())
		if err != nil || len(got) != 1 || got[0].RunID != want {
			t.Fatalf("hand-off %d: %+v, %v; want %s", i, got, err, want)
		}
		exact(t, h, name)
	}
	if got, err := h.Turns.AdmitNext(ctx, h.Store, name, limiter.Rate{}, h.Clock.Now()); err != nil || len(got) != 0 {
		t.Fatalf("a full limiter admitted %+v, %v", got, err)
	}
}

func testLimiterRace(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name, limit, runs = "race/", 3, 24
	var wg sync.WaitGroup
	errs := make(chan error, runs*4)
	for i := range runs {
		wg.Go(func() {
			turns := ledger.NewTurns() // racing as processes do: no turns
			if _, err := turns.EnterLimiter(ctx, h.Store, ledger.Entry{Limiter: name, Limit: limit, Place: place(i, 1+i%5)}, h.Clock.Now()); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	st := exact(t, h, name)
	if st.Active != limit || st.Waiting != runs-limit {
		t.Fatalf("after racing entries: %+v", st)
	}
	// Every active run ends; each ending hands on, racing the others and
	// extra passes, until every run went through. At no read are more
	// than limit runs admitted.
	done := map[string]bool{}
	var mu sync.Mutex
	for round := 0; len(done) < runs; round++ {
		if round > runs {
			t.Fatalf("runs never all admitted: %d of %d", len(done), runs)
		}
		adm, err := h.Store.ListAdmitted(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(adm) > limit {
			t.Fatalf("%d runs admitted, limit %d", len(adm), limit)
		}
		for _, a := range adm {
			wg.Go(func() {
				turns := ledger.NewTurns()
				if _, err := turns.LeaveLimiter(ctx, h.Store, name, a.RunID); err != nil {
					errs <- err
				}
				mu.Lock()
				done[a.RunID] = true
				mu.Unlock()
				for range 2 {
					if _, err := turns.AdmitNext(ctx, h.Store, name, limiter.Rate{}, h.Clock.Now()); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		exact(t, h, name)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := exact(t, h, name); st.Active != 0 || st.Waiting != 0 {
		t.Fatalf("at the end: %+v", st)
	}
}

func testLimiterQueueFull(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "full/"
	// The counters alone decide: a limiter item at the bound.
	if err := h.Store.WriteLimiter(ctx, ledger.LimiterWrite{Name: name, State: limiter.State{Limit: 1, Active: 1, Waiting: limiter.MaxWaiting, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	_, err := h.Turns.EnterLimiter(ctx, h.Store, ledger.Entry{Limiter: name, Limit: 1, Place: place(1, 3)}, T0)
	if !errors.Is(err, ledger.ErrLimitQueueFull) {
		t.Fatalf("err = %v, want ErrLimitQueueFull", err)
	}
	if ws, _ := h.Store.ListWaiting(ctx, name, 10); len(ws) != 0 {
		t.Fatalf("a refused entry wrote %+v", ws)
	}
	if st, _ := h.Store.GetLimiter(ctx, name); st.Version != 1 {
		t.Fatalf("a refused entry changed the limiter: %+v", st)
	}
}

func testLimiterPauseWithdraw(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "pause/"
	enter(t, h, name, 1, place(0, 3))
	enter(t, h, name, 1, place(1, 1))
	enter(t, h, name, 1, place(2, 3))
	enter(t, h, name, 1, place(3, 3))
	if ok, err := h.Turns.PauseWaiting(ctx, h.Store, name, place(1, 1), true); err != nil || !ok {
		t.Fatalf("pause: %v %v", ok, err)
	}
	if ok, err := h.Turns.WithdrawWaiting(ctx, h.Store, name, place(2, 3)); err != nil || !ok {
		t.Fatalf("withdraw: %v %v", ok, err)
	}
	if ok, err := h.Turns.WithdrawWaiting(ctx, h.Store, name, place(2, 3)); err != nil || ok {
		t.Fatalf("second withdraw: %v %v", ok, err)
	}
	if _, err := h.Turns.LeaveLimiter(ctx, h.Store, name, "run-000"); err != nil {
		t.Fatal(err)
	}
	got, err := h.Turns.AdmitNext(ctx, h.Store, name, limiter.Rate{}, T0)
	if err != nil || len(got) != 1 || got[0].RunID != "run-003" {
		t.Fatalf("admitted %+v, %v: want run-003, the paused run passed over", got, err)
	}
	ws, _ := h.Store.ListWaiting(ctx, name, 10)
	if len(ws) != 1 || ws[0].RunID != "run-001" || !ws[0].Paused {
		t.Fatalf("queue %+v: the paused run keeps its place", ws)
	}
	if ok, err := h.Turns.PauseWaiting(ctx, h.Store, name, place(1, 1), false); err != nil || !ok {
		t.Fatalf("resume: %v %v", ok, err)
	}
	h.Turns.LeaveLimiter(ctx, h.Store, name, "run-003")
	if got, err := h.Turns.AdmitNext(ctx, h.Store, name, limiter.Rate{}, T0); err != nil || len(got) != 1 || got[0].RunID != "run-001" {
		t.Fatalf("after resume: %+v, %v", got, err)
	}
	exact(t, h, name)
}

func testLimiterConditions(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "cond/"
	enter(t, h, name, 2, place(0, 3))
	st := exact(t, h, name)
	stale := ledger.LimiterWrite{Name: name, Expected: st.Version - 1, State: st.Release(), DeleteAdmitted: "run-000"}
	if err := h.Store.WriteLimiter(ctx, stale); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("stale version: %v", err)
	}
	twice := ledger.LimiterWrite{Name: name, Expected: st.Version, State: st, PutAdmitted: &ledger.Admitted{RunID: "run-000", AdmittedAt: T0}}
	if err := h.Store.WriteLimiter(ctx, twice); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("a second admitted item: %v", err)
	}
	gone := ledger.LimiterWrite{Name: name, Expected: st.Version, State: st, DeleteWaiting: &limiter.Place{Priority: 3, CreatedAt: T0, RunID: "nobody"}}
	if err := h.Store.WriteLimiter(ctx, gone); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("deleting a waiting item not there: %v", err)
	}
	fresh := ledger.LimiterWrite{Name: "cond-new/", Expected: 3, State: limiter.State{Version: 4}}
	if err := h.Store.WriteLimiter(ctx, fresh); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("a version on a limiter never written: %v", err)
	}
	if after := exact(t, h, name); after.Version != st.Version || after.Active != 1 {
		t.Fatalf("refused writes changed the limiter: %+v", after)
	}
}

func testLimiterRate(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "rate/"
	r := limiter.Rate{Runs: 1, Per: time.Minute}
	e1, err := h.Turns.EnterLimiter(ctx, h.Store, ledger.Entry{Limiter: name, Rate: r, Place: place(0, 3)}, T0)
	if err != nil || !e1.Admitted {
		t.Fatalf("first: %+v %v", e1, err)
	}
	e2, err := h.Turns.EnterLimiter(ctx, h.Store, ledger.Entry{Limiter: name, Rate: r, Place: place(1, 3)}, T0.Add(time.Second))
	if err != nil || e2.Admitted || e2.Reason != limiter.ReasonRateLimit {
		t.Fatalf("second: %+v %v", e2, err)
	}
	st := exact(t, h, name)
	if at := st.RateRoomAt(r, T0.Add(time.Second)); !at.Equal(T0.Add(time.Minute)) {
		t.Fatalf("room at %v", at)
	}
	if got, _ := h.Turns.AdmitNext(ctx, h.Store, name, r, T0.Add(59*time.Second)); len(got) != 0 {
		t.Fatalf("admitted inside the window: %+v", got)
	}
	if got, err := h.Turns.AdmitNext(ctx, h.Store, name, r, T0.Add(time.Minute)); err != nil || len(got) != 1 || !got[0].AdmittedAt.Equal(T0.Add(time.Minute)) {
		t.Fatalf("after the window: %+v %v", got, err)
	}
}

func testLimiterRaise(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "raise/"
	for i := range 4 {
		enter(t, h, name, 1, place(i, 3))
	}
	if ok, err := h.Turns.SetLimiterLimit(ctx, h.Store, name, 3); err != nil || !ok {
		t.Fatalf("raise: %v %v", ok, err)
	}
	got, err := h.Turns.AdmitNext(ctx, h.Store, name, limiter.Rate{}, T0)
	if err != nil || len(got) != 2 || got[0].RunID != "run-001" || got[1].RunID != "run-002" {
		t.Fatalf("after the raise: %+v %v", got, err)
	}
	if ok, err := h.Turns.SetLimiterLimit(ctx, h.Store, name, 1); err != nil || !ok {
		t.Fatalf("lower: %v %v", ok, err)
	}
	if st := exact(t, h, name); st.Active != 3 || st.Limit != 1 {
		t.Fatalf("lowering stopped something: %+v", st)
	}
}

// testLimiterLiveEntry: an entry that asks for its run alive (Entry.Live)
// lands while the run is unfinished, and once the run ended, or for a run
// never created, answers ErrRunEnded and writes nothing.
func testLimiterLiveEntry(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "live/"
	live := h.MustCreate(t, NewRun("live", "a"))
	ended := h.MustCreate(t, NewRun("live", "a"))
	if _, err := h.Store.UpdateRunState(ctx, ended.Run, ledger.RunUpdate{ExecutionState: statemodel.RunCancelled, PublicationState: statemodel.PublicationNotRequired}); err != nil {
		t.Fatal(err)
	}
	entry := func(runID string) (ledger.Entered, error) {
		p := limiter.Place{Priority: 3, CreatedAt: T0, RunID: runID}
		return h.Turns.EnterLimiter(ctx, h.Store, ledger.Entry{Limiter: name, Limit: 1, Place: p, Live: true}, h.Clock.Now())
	}
	if e, err := entry(live.Run.ID); err != nil || !e.Admitted {
		t.Fatalf("live run's entry: %+v, %v; want admitted", e, err)
	}
	before := exact(t, h, name)
	for _, id := range []string{ended.Run.ID, RunID()} {
		if e, err := entry(id); !errors.Is(err, ledger.ErrRunEnded) {
			t.Fatalf("entry of run %s (ended or never created): %+v, %v; want ErrRunEnded", id, e, err)
		}
	}
	if after := exact(t, h, name); after.Version != before.Version || after.Waiting != 0 || after.Active != 1 {
		t.Fatalf("refused entries changed the limiter: %+v, was %+v", after, before)
	}
}

// testLimiterWriteTogether: a write's Also items land with its own in one
// write, and one failing condition among them writes none.
func testLimiterWriteTogether(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "together/"
	admit := func(i int) ledger.LimiterWrite {
		p := place(i, 3)
		return ledger.LimiterWrite{PutAdmitted: &ledger.Admitted{RunID: p.RunID, AdmittedAt: T0}, AbsentWaiting: &p}
	}
	w := admit(0)
	w.Name, w.State, w.Also = name, limiter.State{Limit: 5, Active: 3, Version: 3}, []ledger.LimiterWrite{admit(1), admit(2)}
	if err := h.Store.WriteLimiter(ctx, w); err != nil {
		t.Fatalf("three entries in one write: %v", err)
	}
	st := exact(t, h, name)
	if st.Active != 3 {
		t.Fatalf("after three entries in one write: %+v", st)
	}
	// run-003 is new, run-001 is admitted already: none of it lands.
	again := admit(3)
	again.Name, again.Expected, again.State = name, st.Version, limiter.State{Limit: 5, Active: 5, Version: st.Version + 2}
	again.Also = []ledger.LimiterWrite{admit(1)}
	if err := h.Store.WriteLimiter(ctx, again); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("a write whose second run is admitted already: %v, want ErrVersionConflict", err)
	}
	if after := exact(t, h, name); after.Version != st.Version || after.Active != 3 {
		t.Fatalf("a refused write changed the limiter: %+v", after)
	}
}

// testLimiterMarksRun: a marked entry that waits says where on its run
// item, the hand-off that admits it sets its admission (when and where)
// in the same write, and the run keeps it once it has left; a mark of a run that
// is not there refuses the whole write.
func testLimiterMarksRun(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "marked/"
	first := h.MustCreate(t, NewRun("marked", "a"))
	second := h.MustCreate(t, NewRun("marked", "b"))
	entry := func(v ledger.RunView) ledger.Entered {
		t.Helper()
		p := limiter.Place{Priority: 3, CreatedAt: v.Run.CreatedAt, RunID: v.Run.ID}
		e, err := h.Turns.EnterLimiter(ctx, h.Store, ledger.Entry{Limiter: name, Limit: 1, Place: p, Live: true, MarkRun: true}, h.Clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	stored := func(id string) ledger.Run {
		t.Helper()
		r, err := h.Store.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	at := h.Clock.Now()
	if e := entry(first); !e.Admitted {
		t.Fatalf("first entry waits: %+v", e)
	}
	if r := stored(first.Run.ID); !r.AdmittedAt.Equal(at) || r.AdmittedIn != name {
		t.Fatalf("first run's mark %s in %q; want %s in %s", r.AdmittedAt, r.AdmittedIn, at, name)
	}
	if e := entry(second); e.Admitted {
		t.Fatalf("second entry admitted beyond the limit: %+v", e)
	}
	if r := stored(second.Run.ID); !r.AdmittedAt.IsZero() || r.AdmittedIn != "" || r.WaitingIn != name {
		t.Fatalf("waiting run's mark: admitted %s in %q, waiting in %q; want waiting in %s", r.AdmittedAt, r.AdmittedIn, r.WaitingIn, name)
	}
	h.Clock.Advance(time.Minute)
	left, got, err := h.Turns.LeaveAndAdmitNext(ctx, h.Store, name, first.Run.ID, limiter.Rate{}, h.Clock.Now())
	if err != nil || !left || len(got) != 1 || got[0].RunID != second.Run.ID {
		t.Fatalf("leave and hand-off: %v %+v %v", left, got, err)
	}
	if r := stored(second.Run.ID); !r.AdmittedAt.Equal(h.Clock.Now()) || r.AdmittedIn != name || r.WaitingIn != "" {
		t.Fatalf("handed-on run's mark %s in %q; want %s", r.AdmittedAt, r.AdmittedIn, h.Clock.Now())
	}
	if r := stored(first.Run.ID); !r.AdmittedAt.Equal(at) {
		t.Fatalf("the run that left lost its mark: %s", r.AdmittedAt)
	}
	before := exact(t, h, name)
	ghost := RunID()
	err = h.Store.WriteLimiter(ctx, ledger.LimiterWrite{Name: name, Expected: before.Version, State: before.Touch(),
		PutWaiting: &ledger.Waiting{Place: limiter.Place{Priority: 3, CreatedAt: T0, RunID: ghost}, MarkRun: true},
		Mark:       &ledger.RunMark{RunID: ghost}})
	if !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("a mark of a run that is not there: %v; want a refused write", err)
	}
	if after := exact(t, h, name); after.Version != before.Version {
		t.Fatalf("the refused write changed the limiter: %+v, was %+v", after, before)
	}
}
