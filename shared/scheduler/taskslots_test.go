package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/statemodel"
)

// inQueue takes every envelope in the pool's queue now.
func (f *fixture) inQueue(t *testing.T) []protocol.Envelope {
	t.Helper()
	var out []protocol.Envelope
	for {
		msgs, err := f.q.Receive(context.Background(), f.pool, queue.ReceiveOptions{MaxMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return out
		}
		for _, m := range msgs {
			env, err := protocol.ParseEnvelope(m.Body)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, env)
		}
	}
}

// slotWaits is the limiter each task of a run waits in for a slot.
func (f *fixture) slotWaits(t *testing.T, run string) map[string]string {
	t.Helper()
	w, err := f.svc.Flow().WaitingForSlot(context.Background(), f.readRun(t, run))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Two jobs whose load tasks share the pool "wh" of 2 slots, many runs of
// each: never more than 2 load attempts are in flight, a task waiting for
// a slot stays SCHEDULED and says which limiter it waits in, and every
// run ends.
func TestTaskPoolLimitsAttemptsAcrossJobs(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"etl-a","tasks":[{"id":"prep"},{"id":"load","depends_on":["prep"],"concurrency":{"limit":2,"group":"wh"}}]}`)
	f.createJob(t, `{"name":"etl-b","tasks":[{"id":"load","concurrency":{"limit":2,"group":"wh"}}]}`)
	var runs []string
	for i := range 12 {
		runs = append(runs, f.trigger(t, []string{"etl-a", "etl-b"}[i%2], time.Time{}).Run.ID)
		f.clock.Advance(time.Millisecond)
	}
	inFlight := map[string]protocol.Envelope{}
	loads, most, sawWait := 0, 0, false
	for round := 0; ; round++ {
		for _, env := range f.inQueue(t) {
			inFlight[env.Run+"/"+env.Task] = env
			if env.Task == "load" {
				loads++
			}
		}
		most = max(most, loads)
		if loads > 2 {
			t.Fatalf("round %d: %d load attempts in flight, limit 2", round, loads)
		}
		if !sawWait {
			for _, r := range runs {
				if w := f.slotWaits(t, r); w["load"] != "" {
					if w["load"] != "wh/" {
						t.Fatalf("waiting_for_slot %q, want wh/", w["load"])
					}
					if st := f.readRun(t, r).Tasks; st[len(st)-1].Instance.Snapshot.State != statemodel.StateScheduled {
						t.Fatalf("a task waiting for a slot is %s", st[len(st)-1].Instance.Snapshot.State)
					}
					sawWait = true
					break
				}
			}
		}
		if len(inFlight) == 0 {
			break
		}
		// The oldest-keyed attempt ends (map order: any one).
		for k, env := range inFlight {
			f.finish(t, env, protocol.OutcomeSucceeded)
			delete(inFlight, k)
			if env.Task == "load" {
				loads--
			}
			break
		}
	}
	if most != 2 || !sawWait {
		t.Fatalf("at most %d load attempts in flight (want 2), a task seen waiting: %v", most, sawWait)
	}
	for _, r := range runs {
		if v := f.readRun(t, r); v.Run.ExecutionState != statemodel.RunSucceeded {
			t.Fatalf("run %s of %s: %s", r, v.Run.Job, v.Run.ExecutionState)
		}
	}
	if st, err := f.st.GetLimiter(ctx, "task:wh/"); err != nil || st.Active != 0 || st.Waiting != 0 {
		t.Fatalf("the pool at the end: %+v, %v", st, err)
	}
}

// A task going UP_FOR_RETRY gives its slot back: another job's task takes
// it during the retry interval, and the retry, due, waits for a slot and
// is dispatched when that task ends.
func TestSlotGivenBackDuringRetry(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"flaky","retry":{"max_attempts":2,"initial_interval":"10m","jitter":"none"},
		"tasks":[{"id":"load","concurrency":{"limit":1,"group":"one"}}]}`)
	f.createJob(t, `{"name":"steady","tasks":[{"id":"load","concurrency":{"limit":1,"group":"one"}}]}`)
	flaky := f.trigger(t, "flaky", time.Time{})
	first := f.nextEnvelope(t)
	f.clock.Advance(time.Millisecond)
	steady := f.trigger(t, "steady", time.Time{})
	if got := f.inQueue(t); len(got) != 0 {
		t.Fatalf("dispatched beyond the slot: %+v", got)
	}
	if w := f.slotWaits(t, steady.Run.ID); w["load"] != "one/" {
		t.Fatalf("steady's load waits for %v", w)
	}
	if _, err := f.svc.Workers().Claim(ctx, refOf(first), first.Token, "w1", "claim"); err != nil {
		t.Fatal(err)
	}
	yes := true
	if _, err := f.svc.Workers().Complete(ctx, protocol.Completion{Run: first.Run, Task: first.Task, Attempt: 1, EventID: "fail",
		Outcome: protocol.OutcomeFailed, ErrorCategory: "boom", Retryable: &yes}, first.Token); err != nil {
		t.Fatal(err)
	}
	if st := f.readRun(t, flaky.Run.ID).Tasks[0].Instance.Snapshot.State; st != statemodel.StateUpForRetry {
		t.Fatalf("flaky's load: %s", st)
	}
	other := f.nextEnvelope(t)
	if other.Run != steady.Run.ID {
		t.Fatalf("the freed slot went to %s, want steady's run", other.Run)
	}
	// The retry falls due while steady's task holds the slot: it waits.
	f.clock.Advance(11 * time.Minute)
	f.tick(t, f.svc)
	if got := f.inQueue(t); len(got) != 0 {
		t.Fatalf("the retry was dispatched beyond the slot: %+v", got)
	}
	if w := f.slotWaits(t, flaky.Run.ID); w["load"] != "one/" {
		t.Fatalf("the due retry waits for %v", w)
	}
	f.finish(t, other, protocol.OutcomeSucceeded)
	retry := f.nextEnvelope(t)
	if retry.Run != flaky.Run.ID || retry.Attempt != 2 {
		t.Fatalf("after steady ended: %s attempt %d, want flaky's attempt 2", retry.Run, retry.Attempt)
	}
	f.finish(t, retry, protocol.OutcomeSucceeded)
	if st, err := f.st.GetLimiter(ctx, "task:one/"); err != nil || st.Active != 0 || st.Waiting != 0 {
		t.Fatalf("the pool at the end: %+v, %v", st, err)
	}
}

// A task waiting for a slot that is cancelled leaves the queue: the slot
// goes to the next task, the cancelled one is never dispatched.
func TestCancelledSlotWaiterLeavesTheQueue(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"q","tasks":[{"id":"load","concurrency":{"limit":1}}]}`)
	var runs []string
	for range 3 {
		runs = append(runs, f.trigger(t, "q", time.Time{}).Run.ID)
		f.clock.Advance(time.Millisecond)
	}
	first := f.nextEnvelope(t)
	if first.Run != runs[0] {
		t.Fatalf("dispatched %s first", first.Run)
	}
	if err := f.svc.CancelRun(ctx, runs[1], "not needed"); err != nil {
		t.Fatal(err)
	}
	if v := f.readRun(t, runs[1]); v.Run.ExecutionState != statemodel.RunCancelled {
		t.Fatalf("the cancelled waiter: %s", v.Run.ExecutionState)
	}
	if st, _ := f.st.GetLimiter(ctx, "task:q/"); st.Waiting != 1 {
		t.Fatalf("after the cancel %d wait, want 1", st.Waiting)
	}
	f.finish(t, first, protocol.OutcomeSucceeded)
	next := f.nextEnvelope(t)
	if next.Run != runs[2] {
		t.Fatalf("the slot went to %s, want %s", next.Run, runs[2])
	}
	f.finish(t, next, protocol.OutcomeSucceeded)
	if got := f.inQueue(t); len(got) != 0 {
		t.Fatalf("the cancelled task was dispatched: %+v", got)
	}
	if st, err := f.st.GetLimiter(ctx, "task:q/"); err != nil || st.Active != 0 || st.Waiting != 0 {
		t.Fatalf("the pool at the end: %+v, %v", st, err)
	}
}

// A slot whose release was lost (a crash between a task's end and the
// limiter's write) is repaired by the waiting task's timer: the ticker's
// pass releases it and the waiting task is dispatched.
func TestLostSlotReleaseRepairedByTheTicker(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"rep","tasks":[{"id":"load","concurrency":{"limit":1}}]}`)
	a := f.trigger(t, "rep", time.Time{})
	env := f.nextEnvelope(t)
	f.clock.Advance(time.Millisecond)
	b := f.trigger(t, "rep", time.Time{})
	f.finish(t, env, protocol.OutcomeSucceeded)
	if got := f.nextEnvelope(t); got.Run != b.Run.ID {
		t.Fatalf("hand-off dispatched %s", got.Run)
	}
	c := f.trigger(t, "rep", time.Time{})
	// The crash: a's ended task holds the slot again, b's gone.
	st, _ := f.st.GetLimiter(ctx, "task:rep/")
	if err := f.st.WriteLimiter(ctx, ledger.LimiterWrite{Name: "task:rep/", Expected: st.Version, State: st.Release(), DeleteAdmitted: b.Run.ID + "/load"}); err != nil {
		t.Fatal(err)
	}
	st, _ = f.st.GetLimiter(ctx, "task:rep/")
	lost := st
	lost.Active++
	lost.Version++
	if err := f.st.WriteLimiter(ctx, ledger.LimiterWrite{Name: "task:rep/", Expected: st.Version, State: lost,
		PutAdmitted: &ledger.Admitted{RunID: a.Run.ID + "/load", AdmittedAt: f.clock.Now()}}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute)
	f.tick(t, f.svc)
	if got := f.nextEnvelope(t); got.Run != c.Run.ID {
		t.Fatalf("after the repair dispatched %s, want %s", got.Run, c.Run.ID)
	}
}

// A paused task gives its place back and takes one again when resumed: a
// run paused while its task waits for a slot leaves the queue, and once
// resumed its task is dispatched when the slot is free.
func TestPausedSlotWaiterGivesItsPlaceBack(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"p","tasks":[{"id":"load","concurrency":{"limit":1}}]}`)
	a := f.trigger(t, "p", time.Time{})
	env := f.nextEnvelope(t)
	f.clock.Advance(time.Millisecond)
	b := f.trigger(t, "p", time.Time{})
	if err := f.svc.PauseRun(ctx, b.Run.ID, "later"); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.st.GetLimiter(ctx, "task:p/"); st.Waiting != 0 || st.Active != 1 {
		t.Fatalf("after the pause: %+v", st)
	}
	f.finish(t, env, protocol.OutcomeSucceeded)
	if got := f.inQueue(t); len(got) != 0 {
		t.Fatalf("a paused task was dispatched: %+v", got)
	}
	if err := f.svc.ResumeRun(ctx, b.Run.ID, "now"); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute)
	f.tick(t, f.svc)
	if got := f.nextEnvelope(t); got.Run != b.Run.ID {
		t.Fatalf("after the resume dispatched %s", got.Run)
	}
	_ = a
}

// A map task's children share their map task's limiter: with 6 children
// released at once and 2 slots, 2 are in flight at a time, and the map
// ends with every child run.
func TestMapChildrenShareTheirTaskPool(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"m","tasks":[{"id":"each","map":{"over":"[0,1,2,3,4,5]","max_parallel":6},"concurrency":{"limit":2,"group":"wh"}}]}`)
	run := f.trigger(t, "m", time.Time{})
	ran := 0
	for {
		got := f.inQueue(t)
		if len(got) == 0 {
			break
		}
		if len(got) > 2 {
			t.Fatalf("%d children in flight, limit 2", len(got))
		}
		for _, env := range got {
			if !strings.HasPrefix(env.Task, "each[") {
				t.Fatalf("not a child: %s", env.Task)
			}
			f.finish(t, env, protocol.OutcomeSucceeded)
			ran++
		}
	}
	if v := f.readRun(t, run.Run.ID); ran != 6 || v.Run.ExecutionState != statemodel.RunSucceeded {
		t.Fatalf("%d children ran, run %s", ran, v.Run.ExecutionState)
	}
	if st, err := f.st.GetLimiter(ctx, "task:wh/"); err != nil || st.Active != 0 || st.Waiting != 0 {
		t.Fatalf("the pool at the end: %+v, %v", st, err)
	}
}
