package scheduler_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// finish claims and completes the envelope's attempt with outcome.
func (f *fixture) finish(t *testing.T, env protocol.Envelope, outcome protocol.Outcome) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "w@boot", "claim"); err != nil {
		t.Fatalf("claim %s: %v", env.Task, err)
	}
	c := protocol.Completion{Run: env.Run, Task: env.Task, Attempt: env.Attempt, EventID: "done", Outcome: outcome}
	if outcome == protocol.OutcomeFailed {
		no := false
		c.ErrorCategory, c.Retryable = "boom", &no
	}
	if _, err := f.svc.Workers().Complete(ctx, c, env.Token); err != nil {
		t.Fatalf("complete %s %s: %v", env.Task, outcome, err)
	}
}

func states(v ledger.RunView) map[string]statemodel.InstanceState {
	out := map[string]statemodel.InstanceState{}
	for _, t := range v.Tasks {
		out[t.Instance.Key.Task] = t.Instance.Snapshot.State
	}
	return out
}

// Retry with downstream: a chain a -> b -> c whose b failed ends with c
// UPSTREAM_FAILED and the run FAILED. Retrying b with downstream returns c
// to CREATED (an override.cleared record by the operator), the run is
// RUNNING again with no end time, and once b and c succeed the run
// SUCCEEDED with every record kept. a and alert, which succeeded, are
// left alone.
func TestRetryWithDownstreamRerunsTheBranch(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"j","tasks":[{"id":"a"},{"id":"b","depends_on":["a"]},{"id":"c","depends_on":["b"]},{"id":"alert","depends_on":["b"],"trigger_rule":"one_failed"}]}`)
	v := f.trigger(t, "j", f.clock.Now())
	f.finish(t, f.nextEnvelope(t), "succeeded") // a
	f.finish(t, f.nextEnvelope(t), "failed")    // b
	f.finish(t, f.nextEnvelope(t), "succeeded") // alert, which ran because b failed
	failed := f.readRun(t, v.Run.ID)
	if failed.Run.ExecutionState != statemodel.RunFailed || failed.Run.EndedAt.IsZero() {
		t.Fatalf("run %s ended %v after b failed (tasks %v), want FAILED with an end", failed.Run.ExecutionState, failed.Run.EndedAt, states(failed))
	}
	before := states(failed)
	if before["c"] != statemodel.StateUpstreamFailed {
		t.Fatalf("c is %s, want UPSTREAM_FAILED", before["c"])
	}

	// A task that did not fail cannot be retried, with or without its
	// downstream, and the refusal clears nothing.
	err := f.svc.RetryTask(ctx, ledger.InstanceKey{Run: v.Run.ID, Task: "a"}, scheduler.Retry{Operator: "ann", Downstream: true})
	if !errors.Is(err, statemodel.ErrIllegalTransition) {
		t.Fatalf("retry of a SUCCEEDED task: %v, want illegal transition", err)
	}
	if got := states(f.readRun(t, v.Run.ID)); !maps.Equal(got, before) {
		t.Fatalf("a refused retry changed the tasks: %v, was %v", got, before)
	}

	if err := f.svc.RetryTask(ctx, ledger.InstanceKey{Run: v.Run.ID, Task: "b"}, scheduler.Retry{Operator: "ann", Reason: "fixed the input", Downstream: true}); err != nil {
		t.Fatal(err)
	}
	again := f.readRun(t, v.Run.ID)
	got := states(again)
	if got["a"] != statemodel.StateSucceeded || got["alert"] != statemodel.StateSucceeded || got["c"] != statemodel.StateCreated {
		t.Fatalf("after the retry: %v, want a and alert SUCCEEDED, c CREATED", got)
	}
	if again.Run.ExecutionState != statemodel.RunRunning || !again.Run.EndedAt.IsZero() {
		t.Fatalf("run %s ended %v after the retry, want RUNNING with no end", again.Run.ExecutionState, again.Run.EndedAt)
	}
	h, err := ledger.FullHistory(ctx, f.st, ledger.InstanceKey{Run: v.Run.ID, Task: "c"})
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1]
	if last.Event != statemodel.EvOverrideCleared || last.Actor != statemodel.ActorOperator || last.Scope != "downstream" || last.Operator != "ann" {
		t.Fatalf("c's last record: %s by %s scope %q operator %q", last.Event, last.Actor, last.Scope, last.Operator)
	}

	b2 := f.nextEnvelope(t)
	if b2.Task != "b" || b2.Attempt != 2 {
		t.Fatalf("dispatched %s attempt %d, want b attempt 2", b2.Task, b2.Attempt)
	}
	f.finish(t, b2, "succeeded")
	f.finish(t, f.nextEnvelope(t), "succeeded") // c
	done := f.readRun(t, v.Run.ID)
	if done.Run.ExecutionState != statemodel.RunSucceeded {
		t.Fatalf("run %s with tasks %v, want SUCCEEDED", done.Run.ExecutionState, states(done))
	}
	h, err = ledger.FullHistory(ctx, f.st, ledger.InstanceKey{Run: v.Run.ID, Task: "c"})
	if err != nil {
		t.Fatal(err)
	}
	var events []statemodel.EventType
	for _, tr := range h {
		events = append(events, tr.Event)
	}
	want := []statemodel.EventType{statemodel.EvCreated, statemodel.EvDepsUpstreamFailed, statemodel.EvOverrideCleared, statemodel.EvDepsMet, statemodel.EvDispatched, statemodel.EvStarted, statemodel.EvSucceeded}
	if !slices.Equal(events, want) {
		t.Fatalf("c's history %v, want %v", events, want)
	}
	if _, err := statemodel.Replay(h); err != nil {
		t.Fatalf("c's history does not replay: %v", err)
	}
}

// racingReads is the store with one hook run after a ReadRun has read its
// view and before the reader acts on it: another writer moving a task in
// between.
type racingReads struct {
	scheduler.Store
	hook func(ledger.RunView)
}

func (s *racingReads) ReadRun(ctx context.Context, id string) (ledger.RunView, error) {
	v, err := s.Store.ReadRun(ctx, id)
	if h := s.hook; err == nil && h != nil {
		h(v)
	}
	return v, err
}

// A retried task that fails again while the operator's request is still
// deriving the run from what it read before (a fast worker): the run ends
// FAILED, not RUNNING over a FAILED task. The completion finds the run
// still FAILED from before the retry and writes nothing, so only a check
// after the retry's own write can see the task it did not read.
func TestRetriedTaskFailingDuringTheRetryLeavesTheRunFailed(t *testing.T) {
	base := newFixture(t)
	racy := &racingReads{Store: base.st}
	f := assemble(racy, base.q, base.pool, base.clock, "", nil)
	ctx := context.Background()
	f.createJob(t, `{"name":"j","retry":{"max_attempts":1}}`)
	v := f.trigger(t, "j", f.clock.Now())
	f.finish(t, f.nextEnvelope(t), "failed")
	if r := f.readRun(t, v.Run.ID).Run; r.ExecutionState != statemodel.RunFailed {
		t.Fatalf("run %s after its task failed, want FAILED", r.ExecutionState)
	}

	// The worker finishes attempt 2 right after the retry's read of the run
	// that saw it QUEUED.
	worker := mustNew(base.st, f.q, scheduler.Config{Pools: map[string]string{"default": f.pool}, Now: f.clock.Now})
	racy.hook = func(seen ledger.RunView) {
		if states(seen)["main"] != statemodel.StateQueued {
			return
		}
		racy.hook = nil
		(&fixture{svc: worker, st: base.st, q: f.q, pool: f.pool, clock: f.clock}).finish(t, f.nextEnvelope(t), "failed")
	}
	if err := f.svc.RetryTask(ctx, ledger.InstanceKey{Run: v.Run.ID, Task: "main"}, scheduler.Retry{Operator: "ann", Reason: "again"}); err != nil {
		t.Fatal(err)
	}
	if racy.hook != nil {
		t.Fatal("the retry never read the run with its task QUEUED: the race was not staged")
	}
	got := f.readRun(t, v.Run.ID)
	if got.Run.ExecutionState != statemodel.RunFailed || states(got)["main"] != statemodel.StateFailed || got.Run.EndedAt.IsZero() {
		t.Fatalf("run %s (ended %v) with task %s after attempt 2 failed during the retry, want FAILED with an end",
			got.Run.ExecutionState, got.Run.EndedAt, states(got)["main"])
	}
}

// An operator's retry lands between a completion's read of its run and
// the completion's write: the completion derives FAILED from a view where
// the retried task is still FAILED, and the operator found nothing to
// change in the run (its other task was still running). The operator's
// action stores the run's state anyway, so the completion's
// compare-and-set fails and it derives again from a fresh read: the run
// stays RUNNING, without an end, while the retried task runs.
func TestRetryDuringASiblingsCompletionKeepsTheRunRunning(t *testing.T) {
	base := newFixture(t)
	racy := &racingReads{Store: base.st}
	f := assemble(racy, base.q, base.pool, base.clock, "", nil)
	ctx := context.Background()
	f.createJob(t, `{"name":"j","retry":{"max_attempts":1},"tasks":[{"id":"x"},{"id":"y"}]}`)
	v := f.trigger(t, "j", f.clock.Now())
	envs := map[string]protocol.Envelope{}
	for range 2 {
		env := f.nextEnvelope(t)
		envs[env.Task] = env
	}
	f.finish(t, envs["x"], "failed")
	y := envs["y"]
	if _, err := f.svc.Workers().Claim(ctx, refOf(y), y.Token, "w@boot", "claim"); err != nil {
		t.Fatal(err)
	}
	if r := f.readRun(t, v.Run.ID).Run; r.ExecutionState != statemodel.RunRunning {
		t.Fatalf("run %s with x FAILED and y RUNNING, want RUNNING", r.ExecutionState)
	}

	racy.hook = func(seen ledger.RunView) {
		if st := states(seen); st["x"] != statemodel.StateFailed || st["y"] != statemodel.StateRunning {
			return
		}
		racy.hook = nil
		if err := f.svc.RetryTask(ctx, ledger.InstanceKey{Run: v.Run.ID, Task: "x"}, scheduler.Retry{Operator: "ann", Reason: "again"}); err != nil {
			t.Fatal(err)
		}
	}
	c := protocol.Completion{Run: y.Run, Task: y.Task, Attempt: y.Attempt, EventID: "done", Outcome: protocol.OutcomeSucceeded}
	if _, err := f.svc.Workers().Complete(ctx, c, y.Token); err != nil {
		t.Fatal(err)
	}
	if racy.hook != nil {
		t.Fatal("the completion never read the run with x FAILED and y RUNNING: the race was not staged")
	}
	got := f.readRun(t, v.Run.ID)
	if got.Run.ExecutionState != statemodel.RunRunning || !got.Run.EndedAt.IsZero() || states(got)["x"] != statemodel.StateQueued {
		t.Fatalf("run %s (ended %v) with tasks %v, want RUNNING with no end while x's retry is queued",
			got.Run.ExecutionState, got.Run.EndedAt, states(got))
	}
}

// A timer's advance and a sibling's completion race over a task whose
// upstream failed while its writer crashed before advancing. The
// completion read the run before the upstream failed; the timer read it
// before the completion's write; the completion's fresh read came before
// the timer wrote the verdict, so the completion's own verdict write was
// refused. Each one's view misses the other's write: the refused one
// reads again instead of deriving from what it held, and the run ends
// FAILED.
func TestRefusedVerdictReadsTheRunAgain(t *testing.T) {
	base := newFixture(t)
	racy := &racingReads{Store: base.st}
	f := assemble(racy, base.q, base.pool, base.clock, "", nil)
	ctx := context.Background()
	f.createJob(t, `{"name":"j","retry":{"max_attempts":1},"tasks":[{"id":"a"},{"id":"b","depends_on":["a"]},{"id":"c"}]}`)
	v := f.trigger(t, "j", f.clock.Now())
	envs := map[string]protocol.Envelope{}
	for range 2 {
		env := f.nextEnvelope(t)
		envs[env.Task] = env
		if _, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "w@boot", "claim"); err != nil {
			t.Fatal(err)
		}
	}

	timerRead, goTimer, timerDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var reads atomic.Int32
	racy.hook = func(ledger.RunView) {
		switch reads.Add(1) {
		case 1: // the completion's read, before its write
			// a fails, and its writer crashes before advancing the run.
			no := false
			if _, err := ledger.New(base.st).Transition(ctx, ledger.InstanceKey{Run: v.Run.ID, Task: "a"}, statemodel.Event{
				ID: "w:a:fail", Type: statemodel.EvFailed, Actor: statemodel.ActorWorker, Attempt: 1, ErrorCategory: "boom", Retryable: &no,
			}, f.clock.Now(), ledger.StoredPolicy(nil)); err != nil {
				t.Error(err)
			}
			go func() { timerDone <- f.svc.AdvanceRun(ctx, v.Run.ID) }()
			<-timerRead
		case 2: // the timer's read: a FAILED, b CREATED, c still RUNNING
			close(timerRead)
			<-goTimer
		case 3: // the completion's fresh read: b still CREATED
			close(goTimer)
			if err := <-timerDone; err != nil {
				t.Error(err)
			}
		}
	}
	c := envs["c"]
	if _, err := f.svc.Workers().Complete(ctx, protocol.Completion{Run: c.Run, Task: c.Task, Attempt: c.Attempt, EventID: "done", Outcome: protocol.OutcomeSucceeded}, c.Token); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n < 3 {
		t.Fatalf("%d reads of the run: the race was not staged", n)
	}
	got := f.readRun(t, v.Run.ID)
	if st := states(got); st["b"] != statemodel.StateUpstreamFailed || st["c"] != statemodel.StateSucceeded ||
		got.Run.ExecutionState != statemodel.RunFailed || got.Run.EndedAt.IsZero() {
		t.Fatalf("run %s (ended %v) with tasks %v, want FAILED with b UPSTREAM_FAILED", got.Run.ExecutionState, got.Run.EndedAt, st)
	}
}
