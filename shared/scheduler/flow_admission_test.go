package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/scheduler/triggers"
)

// A trigger's priority is stored on its run and orders the queue: a later
// run of priority 1 is admitted before an older one of the job's 3; the
// waiting runs' admission says why and where they wait, the admitted
// one's when.
func TestFlowTriggerPriorityAndAdmission(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"solo","concurrency":{"limit":1}}`)
	first := f.trigger(t, "solo", time.Time{})
	f.clock.Advance(time.Millisecond)
	older := f.trigger(t, "solo", time.Time{})
	f.clock.Advance(time.Millisecond)
	urgent, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "solo", Priority: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.readRun(t, urgent.Run.ID).Run.Priority; got != 1 {
		t.Fatalf("stored priority %d, want 1", got)
	}
	if got := scheduler.RunPriority(f.readRun(t, older.Run.ID).Run); got != 3 {
		t.Fatalf("default priority %d, want 3", got)
	}
	adm, err := f.svc.Flow().Admission(ctx, f.readRun(t, first.Run.ID))
	if err != nil || adm == nil || adm.State != protocol.AdmissionAdmitted || adm.Limiter != "solo/" || adm.AdmittedAt.IsZero() {
		t.Fatalf("first run's admission %+v, %v", adm, err)
	}
	for id, place := range map[string]int{urgent.Run.ID: 1, older.Run.ID: 2} {
		adm, err := f.svc.Flow().Admission(ctx, f.readRun(t, id))
		if err != nil || adm == nil || adm.State != protocol.AdmissionWaiting || adm.Reason != "concurrency" || adm.Place != place {
			t.Fatalf("run %s: admission %+v, %v; want waiting for concurrency at %d", id, adm, err, place)
		}
	}
	env := f.nextEnvelope(t)
	f.finish(t, env, protocol.OutcomeSucceeded)
	if got := f.nextEnvelope(t); got.Run != urgent.Run.ID {
		t.Fatalf("the hand-off dispatched %s, want the priority 1 run %s", got.Run, urgent.Run.ID)
	}
}

// A job without limits has no admission.
func TestFlowNoAdmissionWithoutLimits(t *testing.T) {
	f := newFixture(t)
	f.createJob(t, `{"name":"free"}`)
	v := f.trigger(t, "free", time.Time{})
	adm, err := f.svc.Flow().Admission(context.Background(), f.readRun(t, v.Run.ID))
	if err != nil || adm != nil {
		t.Fatalf("admission %+v, %v; want none", adm, err)
	}
}

// Raising a limit by a job update admits waiting runs in the update's
// request, not at the next run's end.
func TestFlowRaisedLimitAdmitsAtOnce(t *testing.T) {
	for _, key := range []string{"", "{{.Params.customer}}"} {
		t.Run("key="+key, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			def := func(limit int) string {
				return fmt.Sprintf(`{"name":"orders","concurrency":{"limit":%d,"key":%q}}`, limit, key)
			}
			f.createJob(t, def(1))
			var runs []string
			for range 3 {
				runs = append(runs, f.triggerWith(t, "orders", `{"customer":"a"}`).Run.ID)
				f.clock.Advance(time.Millisecond)
			}
			if got := f.nextEnvelope(t); got.Run != runs[0] {
				t.Fatalf("dispatched %s, want the first run", got.Run)
			}
			j, err := jobspec.Parse([]byte(def(3)), f.svc.Jobs().ParseOptions())
			if err != nil {
				t.Fatal(err)
			}
			cur, err := f.st.GetJob(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.svc.Jobs().UpdateJob(ctx, j, cur.Version); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for range 2 {
				got[f.nextEnvelope(t).Run] = true
			}
			if !got[runs[1]] || !got[runs[2]] {
				t.Fatalf("after the raise dispatched %v, want %v", got, runs[1:])
			}
		})
	}
}

// A backfill's runs take the backfill body's priority, else the job's plus
// one (at most 5).
func TestFlowBackfillPriority(t *testing.T) {
	for _, c := range []struct{ job, body, want int }{{2, 0, 3}, {5, 0, 5}, {3, 1, 1}} {
		t.Run(fmt.Sprintf("job%d_body%d", c.job, c.body), func(t *testing.T) {
			f := newFixture(t)
			f.createJob(t, fmt.Sprintf(`{"name":"daily","schedule":{"cron":"0 0 * * *","timezone":"UTC"},"priority":%d}`, c.job))
			_, err := f.svc.Triggers().CreateBackfill(context.Background(), triggers.BackfillRequest{
				Job: "daily", From: backfillDay, To: backfillDay.AddDate(0, 0, 1), Priority: c.body,
			})
			if err != nil {
				t.Fatal(err)
			}
			runs := f.runsBySlot(t, "daily")[backfillDay]
			if len(runs) != 1 || runs[0].Priority != c.want {
				t.Fatalf("backfill runs %+v, want one of priority %d", runs, c.want)
			}
		})
	}
}
