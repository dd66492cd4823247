package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
)

var jobCases = []Case{
	{"Jobs", jobs},
	{"ScheduleCatchup", scheduleCatchup},
	{"DependencyEdges", dependencyEdges},
	{"DeleteJobIfIdle", deleteJobIfIdle},
}

// jobs: create, read, list, compare-and-set update, pause, next fire,
// delete; a job is due at its next fire unless paused.
func jobs(t *testing.T, h *Harness) {
	ctx := context.Background()
	fire := T0.Add(time.Hour)
	j, err := h.Store.CreateJob(ctx, ledger.Job{Name: "nightly", Spec: []byte(`{"cron":"0 2 * * *"}`), NextFireAt: fire})
	if err != nil || j.Version != 1 || !j.CreatedAt.Equal(T0) || !j.UpdatedAt.Equal(T0) {
		t.Fatalf("create: %+v %v", j, err)
	}
	if _, err := h.Store.CreateJob(ctx, ledger.Job{Name: "nightly"}); !errors.Is(err, ledger.ErrAlreadyExists) {
		t.Fatalf("create twice: %v", err)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if _, err := h.Store.CreateJob(ctx, ledger.Job{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	token := ""
	for {
		page, next, err := h.Store.ListJobs(ctx, 2, token)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 {
			t.Fatalf("a page of %d jobs with limit 2", len(page))
		}
		for _, j := range page {
			names = append(names, j.Name)
		}
		if next == "" {
			break
		}
		token = next
	}
	if !slices.Equal(names, []string{"a", "b", "c", "d", "nightly"}) {
		t.Fatalf("listed %v", names)
	}
	if _, _, err := h.Store.ListJobs(ctx, 2, "not-a-token"); !errors.Is(err, ledger.ErrInvalidPageToken) {
		t.Fatalf("a made-up token: %v, want invalid token", err)
	}

	// Due at its next fire, not before; a paused job never.
	jobDue := func(at time.Time) []time.Time {
		t.Helper()
		timers, _ := allDue(t, h, at, 0)
		var out []time.Time
		for _, d := range timers {
			if d.Item == ledger.TimerOfJob {
				if d.Job != "nightly" || d.Kind != ledger.TimerKindJobFire {
					t.Errorf("job timer %+v", d)
				}
				out = append(out, d.At)
			}
		}
		return out
	}
	far := fire.Add(1000 * time.Hour)
	if got := jobDue(fire.Add(-time.Second)); len(got) != 0 {
		t.Fatalf("the job is due before its fire: %v", got)
	}
	if got := jobDue(fire); len(got) != 1 || !got[0].Equal(fire) {
		t.Fatalf("job timers at its fire: %v, want %s", got, fire)
	}

	upd, err := h.Store.UpdateJob(ctx, ledger.Job{Name: "nightly", Spec: []byte(`{"cron":"0 3 * * *"}`), NextFireAt: fire.Add(time.Hour)}, 1)
	if err != nil || upd.Version != 2 || string(upd.Spec) != `{"cron":"0 3 * * *"}` || !upd.CreatedAt.Equal(T0) {
		t.Fatalf("update: %+v %v", upd, err)
	}
	if _, err := h.Store.UpdateJob(ctx, ledger.Job{Name: "nightly"}, 1); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("update from version 1 again: %v", err)
	}
	if _, err := h.Store.UpdateJob(ctx, ledger.Job{Name: "nope"}, 1); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("update of a missing job: %v", err)
	}
	paused, err := h.Store.SetJobPaused(ctx, "nightly", true)
	if err != nil || !paused.Paused || paused.Version != 3 {
		t.Fatalf("pause: %+v %v", paused, err)
	}
	if again, err := h.Store.SetJobPaused(ctx, "nightly", true); err != nil || again.Version != 3 {
		t.Fatalf("pausing a paused job: %+v %v, want version 3 unchanged", again, err)
	}
	if got := jobDue(far); len(got) != 0 {
		t.Fatalf("a paused job is due: %v", got)
	}
	// The ticker's view of the fire time: a paused job's schedule does not
	// move, and stays out of the due timers.
	at := func(next time.Time) ledger.SchedulePosition { return ledger.SchedulePosition{NextFireAt: next} }
	move := func(version int64, from, to time.Time) ledger.ScheduleMove {
		return ledger.ScheduleMove{Version: version, From: at(from), To: at(to)}
	}
	if _, err := h.Store.MoveSchedule(ctx, "nightly", move(3, fire.Add(time.Hour), fire.Add(25*time.Hour))); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("move a paused job's schedule: %v, want conflict", err)
	}
	if got := jobDue(far); len(got) != 0 {
		t.Fatalf("a paused job is due: %v", got)
	}
	resumed, err := h.Store.SetJobPaused(ctx, "nightly", false)
	if err != nil || resumed.Paused || !resumed.NextFireAt.Equal(fire.Add(time.Hour)) || resumed.Version != 4 {
		t.Fatalf("resume: %+v %v", resumed, err)
	}
	// It advances only from the stored position and version.
	if _, err := h.Store.MoveSchedule(ctx, "nightly", move(4, fire, fire.Add(24*time.Hour))); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("advance from a fire time that is not stored: %v", err)
	}
	if _, err := h.Store.MoveSchedule(ctx, "nightly", move(3, fire.Add(time.Hour), fire.Add(24*time.Hour))); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("advance decided from an older version: %v", err)
	}
	if _, err := h.Store.MoveSchedule(ctx, "nope", move(1, fire, fire)); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("advance a missing job: %v", err)
	}
	moved, err := h.Store.MoveSchedule(ctx, "nightly", move(4, fire.Add(time.Hour), fire.Add(25*time.Hour)))
	if err != nil || !moved.NextFireAt.Equal(fire.Add(25*time.Hour)) || moved.Version != 4 || moved.MissedSlots != 0 {
		t.Fatalf("advance: %+v %v", moved, err)
	}
	if got := jobDue(far); len(got) != 1 || !got[0].Equal(fire.Add(25*time.Hour)) {
		t.Fatalf("job timers %v, want its next fire", got)
	}
	if _, err := h.Store.MoveSchedule(ctx, "nightly", move(4, fire.Add(25*time.Hour), time.Time{})); err != nil {
		t.Fatalf("no next fire: %v", err)
	}
	if got := jobDue(far); len(got) != 0 {
		t.Fatalf("a job without a next fire is due: %v", got)
	}
	if _, err := h.Store.MoveSchedule(ctx, "nightly", move(4, time.Time{}, fire)); err != nil {
		t.Fatalf("a next fire again: %v", err)
	}
	if err := h.Store.DeleteJobIfIdle(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.GetJob(ctx, "nightly"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := h.Store.DeleteJobIfIdle(ctx, "nightly"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if got := jobDue(far); len(got) != 0 {
		t.Fatalf("a deleted job is due: %v", got)
	}
}

// dependencyEdges: a job's dependents follow its upstream jobs through
// create, update (refused updates move nothing) and delete.
func dependencyEdges(t *testing.T, h *Harness) {
	ctx := context.Background()
	dependents := func(job string) []string {
		t.Helper()
		got, err := h.Store.ListDependents(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if _, err := h.Store.CreateJob(ctx, ledger.Job{Name: "down", Upstream: []string{"up2", "up1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.CreateJob(ctx, ledger.Job{Name: "side", Upstream: []string{"up1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.CreateJob(ctx, ledger.Job{Name: "down", Upstream: []string{"up3"}}); !errors.Is(err, ledger.ErrAlreadyExists) {
		t.Fatalf("second create: %v, want already exists", err)
	}
	if got := dependents("up1"); !slices.Equal(got, []string{"down", "side"}) {
		t.Fatalf("dependents of up1: %v", got)
	}
	if got := dependents("up3"); len(got) != 0 {
		t.Fatalf("a refused create left edges: dependents of up3 %v", got)
	}
	j, err := h.Store.GetJob(ctx, "down")
	if err != nil || !slices.Equal(j.Upstream, []string{"up1", "up2"}) {
		t.Fatalf("stored upstream %v %v", j.Upstream, err)
	}
	if _, err := h.Store.UpdateJob(ctx, ledger.Job{Name: "down", Upstream: []string{"up2", "up3"}}, 1); err != nil {
		t.Fatal(err)
	}
	if got := dependents("up1"); !slices.Equal(got, []string{"side"}) {
		t.Fatalf("dependents of up1 after the update: %v", got)
	}
	if got := dependents("up3"); !slices.Equal(got, []string{"down"}) {
		t.Fatalf("dependents of up3 after the update: %v", got)
	}
	if _, err := h.Store.UpdateJob(ctx, ledger.Job{Name: "down", Upstream: []string{"up1"}}, 1); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("stale update: %v, want version conflict", err)
	}
	if got := dependents("up1"); !slices.Equal(got, []string{"side"}) {
		t.Fatalf("a refused update moved edges: dependents of up1 %v", got)
	}
	if _, err := h.Store.SetJobPaused(ctx, "down", true); err != nil {
		t.Fatal(err)
	}
	if got := dependents("up3"); !slices.Equal(got, []string{"down"}) {
		t.Fatalf("pausing moved edges: dependents of up3 %v", got)
	}
	if err := h.Store.DeleteJobIfIdle(ctx, "down"); err != nil {
		t.Fatal(err)
	}
	for _, up := range []string{"up2", "up3"} {
		if got := dependents(up); len(got) != 0 {
			t.Fatalf("dependents of %s after delete: %v", up, got)
		}
	}
	many := make([]string, ledger.MaxUpstreamJobs+1)
	for i := range many {
		many[i] = fmt.Sprintf("u%d", i)
	}
	for name, up := range map[string][]string{"too many": many, "itself": {"loop"}, "twice": {"a", "a"}} {
		if _, err := h.Store.CreateJob(ctx, ledger.Job{Name: "loop", Upstream: up}); !errors.Is(err, ledger.ErrInvalidInput) {
			t.Errorf("%s: %v, want invalid input", name, err)
		}
	}
	if _, err := h.Store.CreateJob(ctx, ledger.Job{Name: "loop", Upstream: []string{"a#b"}}); !errors.Is(err, ledger.ErrInvalidKey) {
		t.Errorf("an upstream job with the key separator: %v, want invalid key", err)
	}
}

// scheduleCatchup: a schedule position with pending catch-up runs is due
// at its first catch-up slot; moves add the slots they skip to
// missed_slots; a resume moves the position in the same conditional write;
// an update replaces the position and keeps the count.
func scheduleCatchup(t *testing.T, h *Harness) {
	ctx := context.Background()
	next := T0.Add(time.Hour)
	if _, err := h.Store.CreateJob(ctx, ledger.Job{Name: "hourly", Spec: []byte(`{"rate":"1h"}`), NextFireAt: T0}); err != nil {
		t.Fatal(err)
	}
	dueAt := func() []time.Time {
		t.Helper()
		timers, _ := allDue(t, h, T0.Add(1000*time.Hour), 0)
		var out []time.Time
		for _, d := range timers {
			if d.Item == ledger.TimerOfJob {
				out = append(out, d.At)
			}
		}
		return out
	}
	pending := ledger.SchedulePosition{NextFireAt: next, CatchupNext: T0.Add(-3 * time.Hour), CatchupLast: T0.Add(-time.Hour)}
	j, err := h.Store.MoveSchedule(ctx, "hourly", ledger.ScheduleMove{Version: 1, From: ledger.SchedulePosition{NextFireAt: T0}, To: pending, Missed: 5})
	if err != nil || !samePos(j.Position(), pending) || j.MissedSlots != 5 || j.Version != 1 {
		t.Fatalf("decide a catch-up: %+v %v", j, err)
	}
	if got := dueAt(); len(got) != 1 || !got[0].Equal(pending.CatchupNext) {
		t.Fatalf("due %v, want at the first catch-up slot %s", got, pending.CatchupNext)
	}
	// A second decision from the position the first one left is refused:
	// its slots are decided already.
	if _, err := h.Store.MoveSchedule(ctx, "hourly", ledger.ScheduleMove{Version: 1, From: ledger.SchedulePosition{NextFireAt: T0}, To: pending, Missed: 5}); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("a decision from a position that moved on: %v, want conflict", err)
	}
	// So is a move from the same next fire but another catch-up range.
	other := pending
	other.CatchupNext = T0.Add(-2 * time.Hour)
	if _, err := h.Store.MoveSchedule(ctx, "hourly", ledger.ScheduleMove{Version: 1, From: other, To: ledger.SchedulePosition{NextFireAt: next}}); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("a move from another catch-up range: %v, want conflict", err)
	}
	if _, err := h.Store.MoveSchedule(ctx, "hourly", ledger.ScheduleMove{Version: 1, From: pending, To: pending, Missed: -1}); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("a negative count: %v, want invalid input", err)
	}
	// A batch of runs started: the range moves on.
	half := pending
	half.CatchupNext = T0.Add(-time.Hour)
	if j, err = h.Store.MoveSchedule(ctx, "hourly", ledger.ScheduleMove{Version: 1, From: pending, To: half}); err != nil || !samePos(j.Position(), half) || j.MissedSlots != 5 {
		t.Fatalf("move the range: %+v %v", j, err)
	}
	if got := dueAt(); len(got) != 1 || !got[0].Equal(half.CatchupNext) {
		t.Fatalf("due %v, want %s", got, half.CatchupNext)
	}

	// Paused: out of the timers, and only a resume moves it.
	if _, err := h.Store.SetJobPaused(ctx, "hourly", true); err != nil {
		t.Fatal(err)
	}
	if got := dueAt(); len(got) != 0 {
		t.Fatalf("a paused job with a catch-up range is due: %v", got)
	}
	resumedAt := ledger.SchedulePosition{NextFireAt: next.Add(24 * time.Hour)}
	if _, err := h.Store.ResumeJob(ctx, "hourly", ledger.ScheduleMove{Version: 1, From: half, To: resumedAt, Missed: 2}); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("resume decided from an older version: %v, want conflict", err)
	}
	if _, err := h.Store.ResumeJob(ctx, "hourly", ledger.ScheduleMove{Version: 2, From: pending, To: resumedAt, Missed: 2}); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("resume from another position: %v, want conflict", err)
	}
	j, err = h.Store.ResumeJob(ctx, "hourly", ledger.ScheduleMove{Version: 2, From: half, To: resumedAt, Missed: 2})
	if err != nil || j.Paused || j.Version != 3 || !samePos(j.Position(), resumedAt) || j.MissedSlots != 7 || !j.UpdatedAt.Equal(T0) {
		t.Fatalf("resume: %+v %v", j, err)
	}
	if got, err := h.Store.GetJob(ctx, "hourly"); err != nil || !samePos(got.Position(), resumedAt) || got.MissedSlots != 7 || got.Paused {
		t.Fatalf("read after resume: %+v %v", got, err)
	}
	if got := dueAt(); len(got) != 1 || !got[0].Equal(resumedAt.NextFireAt) {
		t.Fatalf("due %v after resume, want %s", got, resumedAt.NextFireAt)
	}
	if _, err := h.Store.ResumeJob(ctx, "hourly", ledger.ScheduleMove{Version: 3, From: resumedAt, To: resumedAt}); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("resume a running job: %v, want conflict", err)
	}
	// A move of a running job with MoveSchedule's own condition.
	if _, err := h.Store.MoveSchedule(ctx, "hourly", ledger.ScheduleMove{Version: 3, From: resumedAt, To: pending, Missed: 1}); err != nil {
		t.Fatal(err)
	}
	// An update replaces the position (the new definition's) and keeps
	// the count.
	upd, err := h.Store.UpdateJob(ctx, ledger.Job{Name: "hourly", Spec: []byte(`{"rate":"2h"}`), NextFireAt: next}, 3)
	if err != nil || !samePos(upd.Position(), ledger.SchedulePosition{NextFireAt: next}) || upd.MissedSlots != 8 {
		t.Fatalf("update: %+v %v", upd, err)
	}
	if got, err := h.Store.GetJob(ctx, "hourly"); err != nil || !samePos(got.Position(), upd.Position()) || got.MissedSlots != 8 {
		t.Fatalf("read after update: %+v %v", got, err)
	}
}

func samePos(a, b ledger.SchedulePosition) bool {
	return a.NextFireAt.Equal(b.NextFireAt) && a.CatchupNext.Equal(b.CatchupNext) && a.CatchupLast.Equal(b.CatchupLast)
}
