package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// A run from POST /runs is manual and one from the schedule's slot is
// schedule, and neither names a backfill.
func TestRunsCarryTheirTrigger(t *testing.T) {
	f := newFixture(t)
	f.createJob(t, `{"name":"every","schedule":{"cron":"* * * * *","timezone":"UTC"}}`)
	manual := f.trigger(t, "every", time.Time{})
	if manual.Run.Trigger != statemodel.TriggerManual || manual.Run.BackfillID != "" {
		t.Fatalf("triggered run: trigger %q backfill %q, want manual", manual.Run.Trigger, manual.Run.BackfillID)
	}
	f.clock.Advance(time.Minute)
	f.tick(t, f.svc)
	runs, _, err := f.st.ListRuns(context.Background(), ledger.RunFilter{Job: "every"})
	if err != nil || len(runs) != 2 {
		t.Fatalf("runs of the job: %d, %v; want the manual one and the slot's", len(runs), err)
	}
	for _, r := range runs {
		want := statemodel.TriggerSchedule
		if r.ID == manual.Run.ID {
			want = statemodel.TriggerManual
		}
		if r.Trigger != want {
			t.Fatalf("run %s: trigger %q, want %q", r.ID, r.Trigger, want)
		}
	}
}
