package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
	"github.com/runledger/runledger/statemodel/limiter"
)

// flowStores are the fixtures a flow-control test runs on: the in-memory
// store and DynamoDB Local with the SQS emulator.
var flowStores = map[string]func(*testing.T) *fixture{
	"memstore": func(t *testing.T) *fixture { return newFixture(t) },
	"dynamodb": func(t *testing.T) *fixture { return newEmulatorFixture(t) },
}

// Limit 1: R0 runs, R1, R2 and R3 wait. R1 is cancelled and R2 paused while
// they wait; when R0 ends the hand-off passes over R2 (paused: it keeps
// its place) and admits R3. Resumed, R2 waits at the head again, and is
// admitted when R3 ends. Every admitted run, once ended, answers when it
// was admitted, and no two of them held the room at once.
func TestFlowPausedWaitingRunIsPassedOver(t *testing.T) {
	for name, mk := range flowStores {
		t.Run(name, func(t *testing.T) {
			f := mk(t)
			ctx := context.Background()
			f.createJob(t, `{"name":"solo","concurrency":{"limit":1}}`)
			var r []string
			for range 4 {
				r = append(r, f.trigger(t, "solo", time.Time{}).Run.ID)
				f.clock.Advance(time.Second)
			}
			env0 := f.nextEnvelope(t)
			if env0.Run != r[0] {
				t.Fatalf("first dispatch %s, want %s", env0.Run, r[0])
			}
			if err := f.svc.CancelRun(ctx, r[1], "not needed"); err != nil {
				t.Fatal(err)
			}
			if err := f.svc.PauseRun(ctx, r[2], "hold"); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(time.Second)
			f.finish(t, env0, protocol.OutcomeSucceeded)
			env3 := f.nextEnvelope(t)
			if env3.Run != r[3] {
				t.Fatalf("the hand-off dispatched %s, want %s (R2 is paused)", env3.Run, r[3])
			}
			v2 := f.readRun(t, r[2])
			if st := v2.Tasks[0].Instance.Snapshot; st.State != statemodel.StatePaused || st.Attempt != 0 {
				t.Fatalf("paused waiting run's task: %s attempt %d", st.State, st.Attempt)
			}
			adm, err := f.svc.Flow().Admission(ctx, v2)
			if err != nil || adm == nil || adm.State != protocol.AdmissionWaiting {
				t.Fatalf("paused waiting run's admission %+v, %v; want waiting", adm, err)
			}
			lim, err := f.st.GetLimiter(ctx, "solo/")
			if err != nil || lim.Active != 1 || lim.Waiting != 1 {
				t.Fatalf("limiter with R3 active and R2 paused: %+v, %v", lim, err)
			}

			if err := f.svc.ResumeRun(ctx, r[2], "go"); err != nil {
				t.Fatal(err)
			}
			if adm, err := f.svc.Flow().Admission(ctx, f.readRun(t, r[2])); err != nil || adm == nil || adm.State != protocol.AdmissionWaiting || adm.Place != 1 {
				t.Fatalf("resumed run's admission %+v, %v; want waiting at 1", adm, err)
			}
			f.clock.Advance(time.Second)
			f.finish(t, env3, protocol.OutcomeSucceeded)
			env2 := f.nextEnvelope(t)
			if env2.Run != r[2] {
				t.Fatalf("after R3 the hand-off dispatched %s, want the resumed %s", env2.Run, r[2])
			}
			f.clock.Advance(time.Second)
			f.finish(t, env2, protocol.OutcomeSucceeded)

			var spans []limiter.Span
			for i, id := range r {
				v := f.readRun(t, id)
				adm, err := f.svc.Flow().Admission(ctx, v)
				if err != nil {
					t.Fatal(err)
				}
				if i == 1 {
					if adm != nil || v.Run.ExecutionState != statemodel.RunCancelled {
						t.Fatalf("R1 cancelled while waiting: %s, admission %+v", v.Run.ExecutionState, adm)
					}
					continue
				}
				if !v.Run.ExecutionState.Terminal() || adm == nil || adm.State != protocol.AdmissionAdmitted || adm.AdmittedAt.IsZero() {
					t.Fatalf("R%d ended %s: admission %+v; want admitted with its time", i, v.Run.ExecutionState, adm)
				}
				list, err := f.svc.Flow().ListAdmissions(ctx, []ledger.Run{v.Run})
				if err != nil || list[0] == nil || !list[0].AdmittedAt.Equal(adm.AdmittedAt) {
					t.Fatalf("R%d in a list: %+v, %v; want %+v", i, list, err, adm)
				}
				spans = append(spans, limiter.Span{From: adm.AdmittedAt, To: v.Run.EndedAt})
			}
			if beyond := limiter.MostBeyond(spans, 1); beyond != 0 {
				t.Fatalf("%d runs beyond the limit of 1 at once: %+v", beyond, spans)
			}
			// R2 (spans[1]) was admitted only after R3 (spans[2]) ended,
			// though it came first.
			if spans[1].From.Before(spans[2].To) {
				t.Fatalf("R2 admitted at %s, before R3 ended at %s", spans[1].From, spans[2].To)
			}
		})
	}
}

// A limited run ended answers its admission time from its run item, with
// no limiter read: the room it held is given back.
func TestFlowEndedRunKeepsItsAdmissionTime(t *testing.T) {
	for name, mk := range flowStores {
		t.Run(name, func(t *testing.T) {
			f := mk(t)
			ctx := context.Background()
			f.createJob(t, `{"name":"paced","concurrency":{"limit":2},"rate_limit":{"runs":5,"per":"1m","group":"pace"}}`)
			v, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "paced"})
			if err != nil {
				t.Fatal(err)
			}
			at := f.clock.Now()
			f.clock.Advance(time.Second)
			f.finish(t, f.nextEnvelope(t), protocol.OutcomeSucceeded)
			ended := f.readRun(t, v.Run.ID)
			if !ended.Run.AdmittedAt.Equal(at) || ended.Run.AdmittedIn != "pace/" {
				t.Fatalf("stored admission %s in %q; want %s in pace/", ended.Run.AdmittedAt, ended.Run.AdmittedIn, at)
			}
			for _, name := range []string{"paced/", "pace/"} {
				if a, w, err := f.st.FindRun(ctx, name, limiter.Place{RunID: v.Run.ID}); err != nil || a != nil || w != nil {
					t.Fatalf("ended run still in limiter %s: %v %v %v", name, a, w, err)
				}
			}
			adm, err := f.svc.Flow().Admission(ctx, ended)
			if err != nil || adm == nil || adm.State != protocol.AdmissionAdmitted || adm.Limiter != "paced/" || !adm.AdmittedAt.Equal(at) {
				t.Fatalf("ended run's admission %+v, %v; want admitted in paced/ at %s", adm, err, at)
			}
		})
	}
}

// A page of runs answers each run's admission from its run item: admitted
// with its time, or waiting in the limiter after the last that admitted
// it, with the reason the limiter's counters give when it holds both a
// limit and a rate, and no place.
func TestFlowListAdmissions(t *testing.T) {
	for name, mk := range flowStores {
		t.Run(name, func(t *testing.T) {
			f := mk(t)
			ctx := context.Background()
			f.createJob(t, `{"name":"both","concurrency":{"limit":1},"rate_limit":{"runs":10,"per":"1m"}}`)
			f.createJob(t, `{"name":"two","concurrency":{"limit":5},"rate_limit":{"runs":1,"per":"1h","group":"hourly"}}`)
			var runs []ledger.Run
			for _, job := range []string{"both", "both", "two", "two"} {
				runs = append(runs, f.trigger(t, job, time.Time{}).Run)
				f.clock.Advance(time.Second)
			}
			for i := range runs {
				runs[i] = f.readRun(t, runs[i].ID).Run
			}
			got, err := f.svc.Flow().ListAdmissions(ctx, runs)
			if err != nil {
				t.Fatal(err)
			}
			want := []protocol.Admission{
				{State: protocol.AdmissionAdmitted, Limiter: "both/"},
				{State: protocol.AdmissionWaiting, Reason: "concurrency", Limiter: "both/"},
				{State: protocol.AdmissionAdmitted, Limiter: "two/"},
				// Admitted for concurrency, waiting for the hourly window.
				{State: protocol.AdmissionWaiting, Reason: "rate_limit", Limiter: "hourly/"},
			}
			for i, w := range want {
				g := got[i]
				if g == nil || g.State != w.State || g.Reason != w.Reason || g.Limiter != w.Limiter || g.Place != 0 ||
					(w.State == protocol.AdmissionAdmitted) == g.AdmittedAt.IsZero() {
					t.Errorf("run %d: %+v, want %+v", i, g, w)
				}
				if full, err := f.svc.Flow().Admission(ctx, f.readRun(t, runs[i].ID)); err != nil || full.State != w.State || full.Limiter != w.Limiter {
					t.Errorf("run %d: the run's own answer %+v, %v disagrees with the list's %+v", i, full, err, g)
				}
			}
		})
	}
}
