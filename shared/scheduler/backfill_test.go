package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/triggers"
	"github.com/runledger/runledger/statemodel"
)

const dailyJob = `{"name":"daily","schedule":{"cron":"0 0 * * *","timezone":"UTC"},"timeouts":{"queue":"24h"}}`

// backfillDay is the first slot the backfill tests run: before the
// fixture's clock (2030-01-02), so the schedule itself fires none of them.
var backfillDay = time.Date(2029, 6, 1, 0, 0, 0, 0, time.UTC)

func (f *fixture) backfill(t *testing.T, days, maxActive int) ledger.Backfill {
	t.Helper()
	b, err := f.svc.Triggers().CreateBackfill(context.Background(), triggers.BackfillRequest{
		Job: "daily", From: backfillDay, To: backfillDay.AddDate(0, 0, days), MaxActive: maxActive,
		Params: []byte(`{"mode":"backfill"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runsBySlot lists the job's runs by logical time.
func (f *fixture) runsBySlot(t *testing.T, job string) map[time.Time][]ledger.Run {
	t.Helper()
	out := map[time.Time][]ledger.Run{}
	token := ""
	for {
		runs, next, err := f.st.ListRuns(context.Background(), ledger.RunFilter{Job: job, Token: token, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			out[r.LogicalTime] = append(out[r.LogicalTime], r)
		}
		if next == "" {
			return out
		}
		token = next
	}
}

// unfinished counts the backfill's runs that have not ended.
func (f *fixture) unfinished(t *testing.T, id string) int {
	t.Helper()
	n := 0
	for _, runs := range f.runsBySlot(t, "daily") {
		for _, r := range runs {
			if r.BackfillID == id && !r.ExecutionState.Terminal() {
				n++
			}
		}
	}
	return n
}

// A backfill of 10 daily slots with max_active 3 releases the oldest 3 at
// once, the next as each ends, never more than 3 unfinished, each slot
// once, with the backfill's params; it ends SUCCEEDED with its counts.
func TestBackfillReleasesOldestFirstWithinMaxActive(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, dailyJob)
	b := f.backfill(t, 10, 3)
	if b.Slots != 10 || b.Created() != 10 || b.Existing != 0 || len(b.Active) != 3 || len(b.Pending) != 7 || b.State != statemodel.BackfillRunning {
		t.Fatalf("after POST: %+v; want 10 slots, 3 released", b)
	}
	for i, a := range b.Active {
		if want := backfillDay.AddDate(0, 0, i); !a.Slot.Equal(want) {
			t.Fatalf("released slot %d is %s, want %s (oldest first)", i, a.Slot, want)
		}
	}
	done := 0
	for done < 10 {
		if n := f.unfinished(t, b.ID); n > 3 || n == 0 {
			t.Fatalf("%d of the backfill's runs unfinished after %d ended, want 1 to 3", n, done)
		}
		env := f.nextEnvelope(t)
		if env.Job != "daily" || string(env.Params) != `{"mode":"backfill"}` {
			t.Fatalf("envelope %+v: want the backfill's params", env)
		}
		if want := backfillDay.AddDate(0, 0, done); !env.LogicalTime.Equal(want) {
			t.Fatalf("run %d has slot %s, want %s (oldest first)", done, env.LogicalTime, want)
		}
		f.finish(t, env, protocol.OutcomeSucceeded)
		done++
	}
	got, err := f.svc.Triggers().GetBackfill(ctx, b.ID)
	if err != nil || got.State != statemodel.BackfillSucceeded || got.Succeeded != 10 || got.Unfinished() || got.EndedAt.IsZero() {
		t.Fatalf("after every run: %+v, %v; want SUCCEEDED with 10 succeeded", got, err)
	}
	slots := f.runsBySlot(t, "daily")
	for i := range 10 {
		runs := slots[backfillDay.AddDate(0, 0, i)]
		if len(runs) != 1 || runs[0].Trigger != statemodel.TriggerBackfill || runs[0].BackfillID != b.ID {
			t.Fatalf("slot %d has runs %+v, want one backfill run", i, runs)
		}
	}
}

// A slot with a run already (a manual run of that logical time) is
// existing; a second backfill of the range posted while the first runs
// never creates a slot twice; one posted after both ended finds every slot
// existing and is SUCCEEDED at once.
func TestBackfillNeverRunsASlotTwice(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, dailyJob)
	f.trigger(t, "daily", backfillDay.AddDate(0, 0, 2))
	f.nextEnvelope(t) // the manual run's: left queued
	first := f.backfill(t, 6, 2)
	if first.Existing != 1 || first.Created() != 5 {
		t.Fatalf("first backfill: existing %d created %d, want 1 and 5", first.Existing, first.Created())
	}
	second := f.backfill(t, 6, 2)
	if second.Existing != 3 {
		t.Fatalf("second backfill: existing %d, want 3 (the manual run's and the first's two released)", second.Existing)
	}
	for range 5 {
		f.finish(t, f.nextEnvelope(t), protocol.OutcomeSucceeded)
	}
	for _, id := range []string{first.ID, second.ID} {
		b, err := f.svc.Triggers().GetBackfill(ctx, id)
		if err != nil || b.Unfinished() || b.State != statemodel.BackfillSucceeded {
			t.Fatalf("backfill %s: %+v, %v; want ended SUCCEEDED", id, b, err)
		}
	}
	a, _ := f.svc.Triggers().GetBackfill(ctx, first.ID)
	b, _ := f.svc.Triggers().GetBackfill(ctx, second.ID)
	if a.Succeeded+b.Succeeded != 5 || a.Existing+b.Existing != 6+1 {
		t.Fatalf("runs %d+%d, existing %d+%d; want 5 runs in all and every other slot existing", a.Succeeded, b.Succeeded, a.Existing, b.Existing)
	}
	for slot, runs := range f.runsBySlot(t, "daily") {
		if len(runs) != 1 {
			t.Fatalf("slot %s has %d runs, want 1", slot, len(runs))
		}
	}
	third := f.backfill(t, 6, 2)
	if third.Existing != 6 || third.Created() != 0 || third.State != statemodel.BackfillSucceeded {
		t.Fatalf("third backfill: %+v; want 6 existing, SUCCEEDED", third)
	}
	list, _, err := f.svc.Triggers().ListBackfills(ctx, "daily", 10, "")
	if err != nil || len(list) != 3 || list[0].ID != third.ID || list[2].ID != first.ID {
		t.Fatalf("listing: %d backfills, %v; want 3, newest first", len(list), err)
	}
}

// Cancel drops the unreleased slots (counted cancelled) and cancels the
// unfinished runs, queued ones at once; the backfill is CANCELLED, and a
// second cancel of the ended backfill is an illegal transition.
func TestBackfillCancel(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, dailyJob)
	b := f.backfill(t, 5, 2)
	got, err := f.svc.Triggers().CancelBackfill(ctx, b.ID, "")
	if err != nil || got.State != statemodel.BackfillCancelled || got.Cancelled != 5 || got.Unfinished() {
		t.Fatalf("after cancel: %+v, %v; want CANCELLED, 5 cancelled, ended", got, err)
	}
	for _, a := range b.Active {
		if st := f.readRun(t, a.Run).Run.ExecutionState; st != statemodel.RunCancelled {
			t.Fatalf("run %s is %s, want CANCELLED", a.Run, st)
		}
	}
	if _, err := f.svc.Triggers().CancelBackfill(ctx, b.ID, ""); !errors.Is(err, statemodel.ErrIllegalTransition) {
		t.Fatalf("cancel an ended backfill: %v, want ErrIllegalTransition", err)
	}
	if _, err := f.svc.Triggers().CancelBackfill(ctx, "01NOSUCHBACKFILL", ""); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("cancel an unknown backfill: %v, want ErrNotFound", err)
	}
	if n := len(f.runsBySlot(t, "daily")); n != 2 {
		t.Fatalf("%d runs, want only the 2 released before the cancel", n)
	}
}

// What a crash leaves is picked up by the backstop timer: a backfill
// written without its first release, and a run that ended without its
// backfill hearing of it, are released and settled by ticks.
func TestBackfillBackstopAfterACrash(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, dailyJob)
	// The POST stopped after writing the backfill.
	b, err := f.st.CreateBackfill(ctx, ledger.Backfill{
		ID: f.svc.NewID(), Job: "daily", From: backfillDay, To: backfillDay.AddDate(0, 0, 2), MaxActive: 1,
		Slots: 2, Pending: []time.Time{backfillDay, backfillDay.AddDate(0, 0, 1)}, TimerAt: f.clock.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	f.tick(t, f.svc)
	got, err := f.svc.Triggers().GetBackfill(ctx, b.ID)
	if err != nil || len(got.Active) != 1 || len(got.Pending) != 1 {
		t.Fatalf("after a tick: %+v, %v; want the first slot released", got, err)
	}
	// The run ends, but its backfill's advance is lost (as if the process
	// stopped after storing the run's final state).
	f.nextEnvelope(t)
	run := f.readRun(t, got.Active[0].Run).Run
	if _, err := f.st.UpdateRunState(ctx, run, ledger.RunUpdate{ExecutionState: statemodel.RunFailed, PublicationState: run.PublicationState}); err != nil {
		t.Fatal(err)
	}
	f.tick(t, f.svc)
	if again, _ := f.svc.Triggers().GetBackfill(ctx, b.ID); len(again.Active) != 1 || again.Active[0].Run != run.ID {
		t.Fatalf("before the backstop is due: %+v; want the ended run still active", again)
	}
	f.clock.Advance(ledger.DefaultRunBackstop + time.Second)
	f.tick(t, f.svc)
	got, err = f.svc.Triggers().GetBackfill(ctx, b.ID)
	if err != nil || got.Failed != 1 || len(got.Active) != 1 || len(got.Pending) != 0 {
		t.Fatalf("after the backstop: %+v, %v; want the failed run settled and the last slot released", got, err)
	}
	f.finish(t, f.nextEnvelope(t), protocol.OutcomeSucceeded)
	got, _ = f.svc.Triggers().GetBackfill(ctx, b.ID)
	if got.State != statemodel.BackfillFailed || got.Succeeded != 1 || got.Failed != 1 {
		t.Fatalf("at the end: %+v; want FAILED, one succeeded and one failed", got)
	}
}

// Bad requests are refused with invalid_field naming the field, and
// write nothing.
func TestBackfillRefusals(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, dailyJob)
	f.createJob(t, `{"name":"manual"}`)
	f.createJob(t, `{"name":"minutely","schedule":{"cron":"* * * * *","timezone":"UTC"}}`)
	for _, c := range []struct {
		req   triggers.BackfillRequest
		field string
	}{
		{triggers.BackfillRequest{Job: "manual", From: backfillDay, To: backfillDay.AddDate(0, 0, 1)}, "schedule"},
		{triggers.BackfillRequest{Job: "daily", From: backfillDay, To: backfillDay}, "from"},
		{triggers.BackfillRequest{Job: "daily", From: backfillDay, To: backfillDay.AddDate(0, 0, 1001)}, "to"},
		{triggers.BackfillRequest{Job: "minutely", From: backfillDay, To: backfillDay.Add(1001 * time.Minute)}, "to"},
		{triggers.BackfillRequest{Job: "daily", From: backfillDay, To: backfillDay.AddDate(0, 0, 1), MaxActive: 101}, "max_active"},
		{triggers.BackfillRequest{Job: "daily", From: backfillDay, To: backfillDay.AddDate(0, 0, 1), MaxActive: -1}, "max_active"},
		// The years 1970 to 9999 only.
		{triggers.BackfillRequest{Job: "daily", From: time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC), To: time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC)}, "from"},
		{triggers.BackfillRequest{Job: "daily", From: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), To: time.Date(10000, 1, 2, 0, 0, 0, 0, time.UTC)}, "to"},
	} {
		_, err := f.svc.Triggers().CreateBackfill(ctx, c.req)
		var je *jobspec.Error
		if !errors.As(err, &je) || je.Code != protocol.CodeInvalidField || je.Field != c.field {
			t.Fatalf("%+v: %v, want invalid_field naming %s", c.req, err, c.field)
		}
	}
	if _, err := f.svc.Triggers().CreateBackfill(ctx, triggers.BackfillRequest{Job: "absent", From: backfillDay, To: backfillDay.AddDate(0, 0, 1)}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("an unknown job: %v, want not found", err)
	}
	for _, job := range []string{"daily", "manual", "minutely"} {
		if list, _, err := f.svc.Triggers().ListBackfills(ctx, job, 10, ""); err != nil || len(list) != 0 {
			t.Fatalf("job %s has %d backfills (%v) after refusals", job, len(list), err)
		}
	}
	// Exactly 1,000 slots is allowed.
	if b, err := f.svc.Triggers().CreateBackfill(ctx, triggers.BackfillRequest{Job: "minutely", From: backfillDay, To: backfillDay.Add(1000 * time.Minute), MaxActive: 2}); err != nil || b.Slots != 1000 {
		t.Fatalf("1,000 slots: %v, %v", b.Slots, err)
	}
}

// A rate job's backfill thousands of years after its creation lists the
// slots of its grid, at the bounds of the accepted range.
func TestBackfillFarFutureRate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"hourly","schedule":{"rate":"1h"}}`)
	f.createJob(t, `{"name":"daily","schedule":{"cron":"0 0 * * *","timezone":"UTC"}}`)
	for _, c := range []struct {
		job      string
		from, to time.Time
		slots    int
	}{
		{"hourly", time.Date(9999, 12, 31, 20, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), 4},
		{"hourly", time.Date(4000, 6, 1, 0, 0, 0, 0, time.UTC), time.Date(4000, 6, 2, 0, 0, 0, 0, time.UTC), 24},
		{"daily", time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1970, 1, 4, 0, 0, 0, 0, time.UTC), 3},
	} {
		b, err := f.svc.Triggers().CreateBackfill(ctx, triggers.BackfillRequest{Job: c.job, From: c.from, To: c.to, MaxActive: 1})
		if err != nil || b.Slots != c.slots {
			t.Fatalf("%s from %s to %s: %d slots (%v), want %d", c.job, c.from, c.to, b.Slots, err, c.slots)
		}
	}
}

// The overlap policy does not govern backfill runs: a cancel_previous
// job's slot cancels its previous schedule run, not the backfill's runs.
func TestOverlapLeavesBackfillRunsAlone(t *testing.T) {
	f := newFixture(t)
	f.createJob(t, `{"name":"daily","schedule":{"cron":"* * * * *","timezone":"UTC"},"overlap":"cancel_previous","timeouts":{"queue":"24h"}}`)
	b, err := f.svc.Triggers().CreateBackfill(context.Background(), triggers.BackfillRequest{Job: "daily", From: backfillDay, To: backfillDay.Add(time.Minute)})
	if err != nil || len(b.Active) != 1 {
		t.Fatalf("backfill: %+v, %v", b, err)
	}
	f.clock.Advance(time.Minute)
	f.tick(t, f.svc)
	f.clock.Advance(time.Minute)
	f.tick(t, f.svc)
	if st := f.readRun(t, b.Active[0].Run).Run.ExecutionState; st.Terminal() {
		t.Fatalf("the backfill's run is %s after two fires of a cancel_previous job, want unfinished", st)
	}
	cancelled := 0
	for _, runs := range f.runsBySlot(t, "daily") {
		for _, r := range runs {
			if r.Trigger == statemodel.TriggerSchedule && r.ExecutionState == statemodel.RunCancelled {
				cancelled++
			}
		}
	}
	if cancelled != 1 {
		t.Fatalf("%d schedule runs cancelled, want the first fire's (%s)", cancelled, fmt.Sprint(b.ID))
	}
}

// Nor does a backfill's unfinished run make a skip job skip its slot.
func TestSkipIgnoresBackfillRuns(t *testing.T) {
	f := newFixture(t)
	f.createJob(t, `{"name":"daily","schedule":{"cron":"* * * * *","timezone":"UTC"},"overlap":"skip","timeouts":{"queue":"24h"}}`)
	b, err := f.svc.Triggers().CreateBackfill(context.Background(), triggers.BackfillRequest{Job: "daily", From: backfillDay, To: backfillDay.Add(time.Minute)})
	if err != nil || len(b.Active) != 1 {
		t.Fatalf("backfill: %+v, %v", b, err)
	}
	f.clock.Advance(time.Minute)
	f.tick(t, f.svc)
	f.clock.Advance(time.Minute)
	f.tick(t, f.svc)
	schedule := 0
	for _, runs := range f.runsBySlot(t, "daily") {
		for _, r := range runs {
			if r.Trigger == statemodel.TriggerSchedule {
				schedule++
			}
		}
	}
	// The first fire starts a run beside the backfill's; the second finds
	// that schedule run unfinished and skips.
	if schedule != 1 {
		t.Fatalf("%d schedule runs, want 1: the backfill's run does not make a slot skip, the first schedule run does", schedule)
	}
}

// The POST releases a bounded first batch, so it answers within API
// Gateway's time whatever max_active is; the backfill's timer is then due
// at once, and the next tick releases up to max_active.
func TestBackfillPostReleasesABoundedFirstBatch(t *testing.T) {
	f := newFixture(t)
	f.createJob(t, dailyJob)
	b := f.backfill(t, 30, 20)
	if len(b.Active) != 10 || len(b.Pending) != 20 || b.TimerAt.After(f.clock.Now()) {
		t.Fatalf("after POST: %d active, %d pending, timer %s; want 10, 20, due now (%s)", len(b.Active), len(b.Pending), b.TimerAt, f.clock.Now())
	}
	f.tick(t, f.svc)
	got, err := f.svc.Triggers().GetBackfill(context.Background(), b.ID)
	if err != nil || len(got.Active) != 20 || len(got.Pending) != 10 || !got.TimerAt.After(f.clock.Now()) {
		t.Fatalf("after a tick: %+v, %v; want 20 active, 10 pending, the backstop ahead", got, err)
	}
}
