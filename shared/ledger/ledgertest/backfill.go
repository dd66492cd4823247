package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

var backfillCases = []Case{
	{"BackfillReleaseAndSettle", backfillReleaseAndSettle},
	{"BackfillReleaseRace", backfillReleaseRace},
	{"BackfillListingAndTimer", backfillListingAndTimer},
	{"ManualRunMarksItsSlot", manualRunMarksItsSlot},
	{"UnfinishedRunsIgnoringBackfills", unfinishedIgnoringBackfills},
}

// unfinishedIgnoringBackfills: HasUnfinishedRuns leaves out the runs of
// the triggers it is told to ignore, and only those.
func unfinishedIgnoringBackfills(t *testing.T, h *Harness) {
	ctx := context.Background()
	b, err := h.Store.CreateBackfill(ctx, NewBackfill("skipper", 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	h.MustCreate(t, ReleaseRun(b))
	for _, c := range []struct {
		ignore []statemodel.Trigger
		want   bool
	}{{nil, true}, {[]statemodel.Trigger{statemodel.TriggerBackfill}, false}, {[]statemodel.Trigger{statemodel.TriggerManual}, true}} {
		if busy, err := h.Store.HasUnfinishedRuns(ctx, "skipper", c.ignore...); err != nil || busy != c.want {
			t.Fatalf("HasUnfinishedRuns ignoring %v: %t, %v; want %t", c.ignore, busy, err, c.want)
		}
	}
	h.MustCreate(t, NewRun("skipper", "main"))
	if busy, err := h.Store.HasUnfinishedRuns(ctx, "skipper", statemodel.TriggerBackfill); err != nil || !busy {
		t.Fatalf("HasUnfinishedRuns ignoring backfills, with a manual run unfinished: %t, %v; want true", busy, err)
	}
}

// NewBackfill is a backfill of job with one pending slot per hour from
// T0's hour on.
func NewBackfill(job string, slots, maxActive int) ledger.Backfill {
	from := T0.Truncate(time.Hour)
	b := ledger.Backfill{
		ID: fmt.Sprintf("01BF%022d", runSeq.Add(1)), Job: job, From: from, To: from.Add(time.Duration(slots) * time.Hour),
		MaxActive: maxActive, Params: []byte(`{"b":1}`), Slots: slots,
	}
	for i := range slots {
		b.Pending = append(b.Pending, from.Add(time.Duration(i)*time.Hour))
	}
	return b
}

// ReleaseRun is the run releasing b's oldest pending slot.
func ReleaseRun(b ledger.Backfill) ledger.NewRun {
	nr := NewRun(b.Job, "main")
	nr.Trigger, nr.BackfillID, nr.ClaimSlot = statemodel.TriggerBackfill, b.ID, true
	nr.LogicalTime = b.Pending[0]
	nr.Release = &b
	return nr
}

func mustBackfill(t *testing.T, h *Harness, id string) ledger.Backfill {
	t.Helper()
	b, err := h.Store.GetBackfill(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// backfillReleaseAndSettle: a release creates the run and moves its slot
// from Pending to Active in one write; a release from a stale copy, past
// max_active, or of a taken slot writes nothing; UpdateBackfill is a
// compare-and-set that refuses counts that do not add up, and a backfill
// with nothing left ends (state derived, end time set, no timer).
func backfillReleaseAndSettle(t *testing.T, h *Harness) {
	ctx := context.Background()
	nb := NewBackfill("bf", 3, 1)
	nb.Priority = 2 // kept for its runs
	b, err := h.Store.CreateBackfill(ctx, nb)
	if err != nil || b.Version != 1 || b.State != statemodel.BackfillRunning || b.TimerAt.IsZero() || b.CreatedAt.IsZero() {
		t.Fatalf("CreateBackfill: %+v, %v; want RUNNING at version 1 with a timer", b, err)
	}
	if _, err := h.Store.CreateBackfill(ctx, b); !errors.Is(err, ledger.ErrAlreadyExists) {
		t.Fatalf("the same id again: %v, want ErrAlreadyExists", err)
	}
	first := ReleaseRun(b)
	v := h.MustCreate(t, first)
	if v.Run.Trigger != statemodel.TriggerBackfill || v.Run.BackfillID != b.ID || !v.Run.LogicalTime.Equal(b.Pending[0]) {
		t.Fatalf("released run %+v", v.Run)
	}
	got := mustBackfill(t, h, b.ID)
	if got.Version != 2 || len(got.Pending) != 2 || len(got.Active) != 1 || got.Active[0].Run != first.ID || !got.Active[0].Slot.Equal(b.Pending[0]) || got.Priority != 2 {
		t.Fatalf("after a release: %+v", got)
	}
	// A copy read before the release no longer releases.
	stale := ReleaseRun(b)
	stale.LogicalTime = b.Pending[1]
	stale.Release.Pending = b.Pending[1:]
	if _, err := h.CreateRun(ctx, stale, h.Clock.Now()); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("release from a stale copy: %v, want ErrVersionConflict", err)
	}
	// max_active 1: the next slot waits for the active run.
	if _, err := h.CreateRun(ctx, ReleaseRun(got), h.Clock.Now()); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("release past max_active: %v, want invalid input", err)
	}
	for _, nr := range []ledger.NewRun{stale} {
		if _, err := h.Store.GetRun(ctx, nr.ID); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a refused release wrote run %s (%v)", nr.ID, err)
		}
	}
	// The run ended: settle it.
	settled := got
	settled.Active, settled.Succeeded = nil, 1
	bad := settled
	bad.Succeeded = 2
	if _, err := h.Store.UpdateBackfill(ctx, bad); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("counts that do not add up: %v, want invalid input", err)
	}
	got, err = h.Store.UpdateBackfill(ctx, settled)
	if err != nil || got.Version != 3 || got.Succeeded != 1 || len(got.Active) != 0 {
		t.Fatalf("settle: %+v, %v", got, err)
	}
	// WakeAt brings the backstop forward, and is not kept.
	woken := got
	woken.WakeAt = h.Clock.Now()
	if got, err = h.Store.UpdateBackfill(ctx, woken); err != nil || !got.TimerAt.Equal(woken.WakeAt) || !got.WakeAt.IsZero() {
		t.Fatalf("UpdateBackfill with WakeAt now: timer %s (%v), want %s", got.TimerAt, err, woken.WakeAt)
	}
	if read := mustBackfill(t, h, b.ID); !read.TimerAt.Equal(woken.WakeAt) {
		t.Fatalf("read back: timer %s, want %s", read.TimerAt, woken.WakeAt)
	}
	if _, err := h.Store.UpdateBackfill(ctx, settled); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("settle again from version 2: %v, want ErrVersionConflict", err)
	}
	// Another run holds the next slot: the release writes nothing.
	other := NewRun("bf", "main")
	other.Trigger, other.ClaimSlot, other.LogicalTime = statemodel.TriggerSchedule, true, got.Pending[0]
	h.MustCreate(t, other)
	taken := ReleaseRun(got)
	_, err = h.CreateRun(ctx, taken, h.Clock.Now())
	var ex *ledger.ExistingRunError
	if !errors.Is(err, ledger.ErrSlotTaken) || !errors.As(err, &ex) || ex.RunID != other.ID {
		t.Fatalf("release of a taken slot: %v, want ErrSlotTaken naming %s", err, other.ID)
	}
	if again := mustBackfill(t, h, b.ID); again.Version != got.Version {
		t.Fatalf("a refused release changed the backfill: version %d, want %d", again.Version, got.Version)
	}
	// The slot counts as existing; the last one is dropped by a cancel.
	got.Pending, got.Existing, got.Cancelled, got.CancelRequested = nil, 1, 1, true
	ended, err := h.Store.UpdateBackfill(ctx, got)
	if err != nil || ended.State != statemodel.BackfillCancelled || !ended.TimerAt.IsZero() || ended.EndedAt.IsZero() || ended.Unfinished() {
		t.Fatalf("ended backfill: %+v, %v; want CANCELLED, ended, no timer", ended, err)
	}
	if read := mustBackfill(t, h, b.ID); read.State != ended.State || read.Existing != 1 || read.Created() != 2 || !read.EndedAt.Equal(ended.EndedAt) {
		t.Fatalf("read back: %+v", read)
	}
	if _, err := h.Store.GetBackfill(ctx, "01BFABSENT"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("an absent backfill: %v", err)
	}
	bad = NewBackfill("bf", 2, 101)
	if _, err := h.Store.CreateBackfill(ctx, bad); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("max_active 101: %v, want invalid input", err)
	}
	bad = NewBackfill("bf", 2, 1)
	bad.Slots = 3
	if _, err := h.Store.CreateBackfill(ctx, bad); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("counts that do not add up: %v, want invalid input", err)
	}
}

// backfillReleaseRace: releases racing from one copy create exactly one
// run; the others write nothing.
func backfillReleaseRace(t *testing.T, h *Harness) {
	ctx := context.Background()
	b, err := h.Store.CreateBackfill(ctx, NewBackfill("race", 4, 4))
	if err != nil {
		t.Fatal(err)
	}
	got := Race(6, func(int) error {
		_, err := h.CreateRun(ctx, ReleaseRun(b), h.Clock.Now())
		return err
	})
	won := 0
	for _, err := range got {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ledger.ErrVersionConflict) && !errors.Is(err, ledger.ErrSlotTaken):
			t.Fatalf("a losing release: %v", err)
		}
	}
	runs, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: "race"})
	if won != 1 || err != nil || len(runs) != 1 {
		t.Fatalf("%d releases won, %d runs (%v); want 1", won, len(runs), err)
	}
	if after := mustBackfill(t, h, b.ID); len(after.Active) != 1 || len(after.Pending) != 3 {
		t.Fatalf("after the race: %+v", after)
	}
}

// backfillListingAndTimer: a job's backfills list newest first and page;
// an unfinished backfill's backstop is due at its timer, an ended one has
// none; TakenSlots tells which slots hold a run.
func backfillListingAndTimer(t *testing.T, h *Harness) {
	ctx := context.Background()
	var ids []string
	for range 3 {
		b := NewBackfill("listed", 2, 1)
		b.TimerAt = h.Clock.Now()
		if _, err := h.Store.CreateBackfill(ctx, b); err != nil {
			t.Fatal(err)
		}
		ids = append([]string{b.ID}, ids...)
	}
	if _, err := h.Store.CreateBackfill(ctx, NewBackfill("elsewhere", 1, 1)); err != nil {
		t.Fatal(err)
	}
	var seen []string
	token := ""
	for {
		page, next, err := h.Store.ListBackfills(ctx, "listed", 2, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page {
			seen = append(seen, b.ID)
		}
		if next == "" {
			break
		}
		token = next
	}
	if fmt.Sprint(seen) != fmt.Sprint(ids) {
		t.Fatalf("listed %v, want %v (newest first)", seen, ids)
	}
	if _, _, err := h.Store.ListBackfills(ctx, "listed", 2, "bogus"); !errors.Is(err, ledger.ErrInvalidPageToken) {
		t.Fatalf("a bad token: %v", err)
	}
	due, _ := allDue(t, h, h.Clock.Now(), 0)
	found := map[string]bool{}
	for _, d := range due {
		if d.Item == ledger.TimerOfBackfill {
			if d.Kind != ledger.TimerKindBackfill || d.Job != "listed" {
				t.Fatalf("backfill timer %+v", d)
			}
			found[d.Backfill] = true
		}
	}
	if len(found) != 3 {
		t.Fatalf("due backfill timers %v, want the 3 due ones", found)
	}
	empty := NewBackfill("listed", 0, 1)
	empty.To = empty.From.Add(time.Hour)
	if b, err := h.Store.CreateBackfill(ctx, empty); err != nil || b.State != statemodel.BackfillSucceeded || !b.TimerAt.IsZero() {
		t.Fatalf("a backfill with nothing to run: %+v, %v; want SUCCEEDED without a timer", b, err)
	}
	slot := NewRun("listed", "main")
	slot.Trigger, slot.ClaimSlot, slot.LogicalTime = statemodel.TriggerSchedule, true, T0.Add(time.Hour)
	h.MustCreate(t, slot)
	taken, err := h.Store.TakenSlots(ctx, "listed", []time.Time{T0, T0.Add(time.Hour)})
	if err != nil || fmt.Sprint(taken) != "[false true]" {
		t.Fatalf("TakenSlots: %v, %v; want [false true]", taken, err)
	}
}

// manualRunMarksItsSlot: a manual run with an explicit logical time marks
// its slot without claiming it: a second manual run of that time is
// created too, and a claim of the slot finds it taken by the first.
func manualRunMarksItsSlot(t *testing.T, h *Harness) {
	ctx := context.Background()
	at := T0.Add(24 * time.Hour)
	var made []string
	for range 2 {
		nr := NewRun("marked", "main")
		nr.LogicalTime, nr.MarkSlot = at, true
		h.MustCreate(t, nr)
		made = append(made, nr.ID)
	}
	claim := NewRun("marked", "main")
	claim.Trigger, claim.ClaimSlot, claim.LogicalTime = statemodel.TriggerSchedule, true, at
	_, err := h.CreateRun(ctx, claim, h.Clock.Now())
	var ex *ledger.ExistingRunError
	if !errors.Is(err, ledger.ErrSlotTaken) || !errors.As(err, &ex) || ex.RunID != made[0] {
		t.Fatalf("claim of a marked slot: %v, want ErrSlotTaken naming %s", err, made[0])
	}
	taken, err := h.Store.TakenSlots(ctx, "marked", []time.Time{at})
	if err != nil || !taken[0] {
		t.Fatalf("TakenSlots of the marked slot: %v, %v", taken, err)
	}
	both := NewRun("marked", "main")
	both.LogicalTime, both.MarkSlot, both.ClaimSlot = at.Add(time.Hour), true, true
	if _, err := h.CreateRun(ctx, both, h.Clock.Now()); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("a run that claims and marks: %v, want invalid input", err)
	}
}
