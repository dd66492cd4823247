package ledgertest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

var retentionCases = []Case{
	{"RunExpiresWholeAfterItsRetention", runExpires},
	{"UnfinishedRunsExpiryIsPushed", unfinishedExpiryPushed},
}

// endRun ends every task of v (deps skipped) and stores the run's end at
// the clock's now; it returns the run as stored.
func endRun(t *testing.T, h *Harness, v ledger.RunView) ledger.Run {
	t.Helper()
	ctx := context.Background()
	for _, task := range v.Tasks {
		h.Step(t, task.Instance.Key, Ev(statemodel.EvDepsSkipped, 0), h.Clock.Now())
	}
	fresh, err := h.Store.ReadRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	ended, err := h.Store.UpdateRunState(ctx, fresh.Run, ledger.RunUpdate{
		ExecutionState: statemodel.DeriveRunState(fresh.Nodes()).State, PublicationState: statemodel.DerivePublication(fresh.Nodes()),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !ended.ExecutionState.Terminal() {
		t.Fatalf("run %s is %s, want it ended", v.Run.ID, ended.ExecutionState)
	}
	return ended
}

// runExpires: a run takes its job's retention, else the store's default
// (ledger.DefaultRunRetention), and every instance of it the run's expiry;
// a run that ended within a day of its creation keeps that expiry; from
// its expiry on, the run and its instances read as gone (ErrNotFound) and
// listings leave it out, whether or not the store has deleted it yet.
func runExpires(t *testing.T, h *Harness) {
	ctx := context.Background()
	t0 := h.Clock.Now()
	nr := NewRun("keep2d", "a", "b")
	nr.Retention = 48 * time.Hour
	short := h.MustCreate(t, nr)
	long := h.MustCreate(t, NewRun("keep2d", "a"))
	if want := ledger.RunExpiry(t0, 48*time.Hour); !short.Run.ExpiresAt.Equal(want) || short.Run.Retention != 48*time.Hour {
		t.Errorf("a run of a job kept 48h expires at %s (retention %s), want %s", short.Run.ExpiresAt, short.Run.Retention, want)
	}
	if want := ledger.RunExpiry(t0, ledger.DefaultRunRetention); !long.Run.ExpiresAt.Equal(want) {
		t.Errorf("a run of the default retention expires at %s, want %s", long.Run.ExpiresAt, want)
	}
	for _, task := range short.Tasks {
		inst := h.MustInstance(t, task.Instance.Key)
		if !inst.ExpiresAt.Equal(short.Run.ExpiresAt) {
			t.Errorf("instance %s expires at %s, its run at %s", inst.Key, inst.ExpiresAt, short.Run.ExpiresAt)
		}
	}

	h.Clock.Advance(time.Hour)
	ended := endRun(t, h, short)
	if !ended.ExpiresAt.Equal(short.Run.ExpiresAt) {
		t.Errorf("a run ended an hour after its creation expires at %s, want %s kept", ended.ExpiresAt, short.Run.ExpiresAt)
	}

	listed := func() []string {
		runs, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: "keep2d"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range runs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	h.Clock.Set(ended.ExpiresAt.Add(-time.Second))
	if _, err := h.Store.GetRun(ctx, short.Run.ID); err != nil {
		t.Errorf("a second before its expiry: %v", err)
	}
	if ids := listed(); !slices.Contains(ids, short.Run.ID) {
		t.Errorf("a second before its expiry the job's runs are %v, want %s among them", ids, short.Run.ID)
	}

	h.Clock.Set(ended.ExpiresAt)
	if _, err := h.Store.GetRun(ctx, short.Run.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("GetRun of an expired run = %v, want ErrNotFound", err)
	}
	if _, err := h.Store.ReadRun(ctx, short.Run.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("ReadRun of an expired run = %v, want ErrNotFound", err)
	}
	if _, err := h.Store.GetInstance(ctx, short.Tasks[0].Instance.Key); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("GetInstance of an expired run's task = %v, want ErrNotFound", err)
	}
	if ids := listed(); slices.Contains(ids, short.Run.ID) || !slices.Contains(ids, long.Run.ID) {
		t.Errorf("at its expiry the job's runs are %v, want %s left out and %s listed", ids, short.Run.ID, long.Run.ID)
	}
	all, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.ID == short.Run.ID {
			t.Errorf("the runs' listing shows expired run %s", r.ID)
		}
	}
	h.Clock.Set(t0.Add(time.Hour)) // the harness's replay check reads every run
}

// unfinishedExpiryPushed: an unfinished run never expires: its backstop
// pass pushes the expiry of the run and of every instance of it once less
// than its retention remains, and its end pushes it again when needed, so
// a run is kept at least its retention after its end.
func unfinishedExpiryPushed(t *testing.T, h *Harness) {
	ctx := context.Background()
	t0 := h.Clock.Now()
	nr := NewRun("keep1d", "a", "b")
	nr.Retention = 24 * time.Hour
	v := h.MustCreate(t, nr)
	first := v.Run.ExpiresAt

	// Within its grace nothing moves.
	h.Clock.Advance(time.Hour)
	run, err := h.Store.RearmRunBackstop(ctx, v.Run)
	if err != nil {
		t.Fatal(err)
	}
	if !run.ExpiresAt.Equal(first) {
		t.Errorf("an hour in, the expiry moved from %s to %s", first, run.ExpiresAt)
	}

	// Past it, the backstop pass pushes the run and its instances.
	now := h.Clock.Set
	now(t0.Add(30 * time.Hour))
	stored, err := h.Store.GetRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := h.Store.RearmRunBackstop(ctx, stored)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.RunExpiry(h.Clock.Now(), 24*time.Hour)
	if !pushed.ExpiresAt.Equal(want) {
		t.Errorf("30h in, the backstop pass left the expiry at %s, want %s", pushed.ExpiresAt, want)
	}
	now(first.Add(time.Hour)) // past the first expiry: still there
	read, err := h.Store.ReadRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatalf("an unfinished run past its first expiry: %v", err)
	}
	if !read.Run.ExpiresAt.Equal(want) {
		t.Errorf("the stored run expires at %s, want %s", read.Run.ExpiresAt, want)
	}
	for _, task := range read.Tasks {
		if !task.Instance.ExpiresAt.Equal(want) {
			t.Errorf("instance %s expires at %s, its run at %s", task.Instance.Key, task.Instance.ExpiresAt, want)
		}
	}

	// Its end, with less than its retention left, pushes it again.
	ended := endRun(t, h, read)
	if end := h.Clock.Now(); ended.ExpiresAt.Before(end.Add(24 * time.Hour)) {
		t.Errorf("a run ended at %s expires at %s, less than its retention after", end, ended.ExpiresAt)
	}
	after, err := h.Store.GetRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ExpiresAt.Equal(ended.ExpiresAt) {
		t.Errorf("the stored run expires at %s, its end said %s", after.ExpiresAt, ended.ExpiresAt)
	}
	for _, task := range read.Tasks {
		if inst := h.MustInstance(t, task.Instance.Key); !inst.ExpiresAt.Equal(after.ExpiresAt) {
			t.Errorf("instance %s expires at %s, its run at %s", inst.Key, inst.ExpiresAt, after.ExpiresAt)
		}
	}
}
