package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel/limiter"
)

// fillLimiter writes a limiter item as 10,000 waiting runs leave it.
func (f *fixture) fillLimiter(t *testing.T, name string) {
	t.Helper()
	st := limiter.State{Limit: 1, Active: 1, Waiting: limiter.MaxWaiting, Version: 1}
	if err := f.st.WriteLimiter(context.Background(), ledger.LimiterWrite{Name: name, State: st}); err != nil {
		t.Fatal(err)
	}
}

// A trigger into a limiter with 10,000 runs waiting is refused
// (ErrLimitQueueFull, the API's 429) and creates no run; a schedule slot
// then is missed (missed_slots) and the schedule moves on.
func TestFlowQueueFullRefusesTriggerAndMissesSlot(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name": "minutely", "schedule": {"cron": "* * * * *", "catchup": "none"}, "concurrency": {"limit": 1}}`)
	f.fillLimiter(t, "minutely/")
	_, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "minutely"})
	if !errors.Is(err, ledger.ErrLimitQueueFull) {
		t.Fatalf("trigger into a full queue: %v", err)
	}
	if runs, _, err := f.st.ListRuns(ctx, ledger.RunFilter{Job: "minutely"}); err != nil || len(runs) != 0 {
		t.Fatalf("a refused trigger created %d runs (%v)", len(runs), err)
	}
	next := f.job(t, "minutely").NextFireAt
	f.clock.Advance(next.Sub(f.clock.Now()) + time.Second)
	f.tick(t, f.svc)
	j := f.job(t, "minutely")
	if j.MissedSlots != 1 || !j.NextFireAt.After(next) {
		t.Fatalf("missed %d (want 1), next fire %s (want after %s)", j.MissedSlots, j.NextFireAt, next)
	}
	if runs := f.slotRuns(t, "minutely"); len(runs) != 0 {
		t.Fatalf("a slot into a full queue made %d runs", len(runs))
	}
}
