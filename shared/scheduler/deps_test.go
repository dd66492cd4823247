package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// A manual run of a job with depends_on_jobs needs an explicit logical
// time: the trigger's own time matches no upstream run.
func TestDependentManualRunNeedsLogicalTime(t *testing.T) {
	f := newFixture(t)
	f.createJob(t, `{"name":"up"}`)
	f.createJob(t, `{"name":"down","depends_on_jobs":[{"job":"up"}]}`)
	_, _, err := f.svc.Triggers().TriggerRun(context.Background(), scheduler.TriggerRequest{Job: "down"})
	var je *jobspec.Error
	if !errors.As(err, &je) || je.Code != protocol.CodeInvalidField || je.Field != "logical_time" {
		t.Fatalf("trigger without logical_time: %v, want invalid_field naming logical_time", err)
	}
	runs, _, err := f.st.ListRuns(context.Background(), ledger.RunFilter{Job: "down"})
	if err != nil || len(runs) != 0 {
		t.Fatalf("a refused trigger wrote runs: %d %v", len(runs), err)
	}
	// The upstream job has no dependencies: its manual runs need none.
	f.trigger(t, "up", time.Time{})
}

// While it waits the run says for what; once its dependency timeout has
// passed, its waiting tasks end UPSTREAM_FAILED with reason
// dependency_timeout, and the run FAILED.
func TestDependencyTimeoutEndsTheWait(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"up"}`)
	f.createJob(t, `{"name":"down","timeouts":{"dependency":"1h"},"tasks":[{"id":"a"},{"id":"b","depends_on":["a"]}],"depends_on_jobs":[{"job":"up"}]}`)
	logical := time.Date(2029, 12, 31, 0, 0, 0, 0, time.UTC)
	v := f.trigger(t, "down", logical)
	waiting, err := f.svc.Jobs().WaitingFor(ctx, v)
	if err != nil || len(waiting) != 1 || waiting[0] != (protocol.WaitingFor{Job: "up", LogicalTime: logical, Require: statemodel.RequirePublished}) {
		t.Fatalf("waiting for %+v (%v), want up at %s, no run yet", waiting, err, logical)
	}
	up := f.trigger(t, "up", logical) // QUEUED: no worker serves the pool
	waiting, err = f.svc.Jobs().WaitingFor(ctx, f.readRun(t, v.Run.ID))
	if err != nil || len(waiting) != 1 || waiting[0].Run != up.Run.ID {
		t.Fatalf("waiting for %+v (%v), want up's run %s", waiting, err, up.Run.ID)
	}

	f.clock.Advance(59 * time.Minute)
	f.tick(t, f.svc)
	if st := f.readRun(t, v.Run.ID).Tasks[0].Instance.Snapshot.State; st != statemodel.StateCreated {
		t.Fatalf("task a is %s before the dependency timeout, want CREATED", st)
	}
	f.clock.Advance(2 * time.Minute)
	f.tick(t, f.svc)
	after := f.readRun(t, v.Run.ID)
	for _, tv := range after.Tasks {
		if st := tv.Instance.Snapshot.State; st != statemodel.StateUpstreamFailed {
			t.Fatalf("task %s is %s after the dependency timeout, want UPSTREAM_FAILED", tv.Instance.Key.Task, st)
		}
	}
	if after.Run.ExecutionState != statemodel.RunFailed {
		t.Fatalf("run %s after the dependency timeout, want FAILED", after.Run.ExecutionState)
	}
	h, err := ledger.FullHistory(ctx, f.st, ledger.InstanceKey{Run: v.Run.ID, Task: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if last := h[len(h)-1]; last.Event != statemodel.EvDepsTimeout || last.Reason != "dependency_timeout" {
		t.Fatalf("task a's last record: %s reason %q, want %s with reason dependency_timeout", last.Event, last.Reason, statemodel.EvDepsTimeout)
	}
	if waiting, err := f.svc.Jobs().WaitingFor(ctx, after); err != nil || waiting != nil {
		t.Fatalf("a finished run still waits for %+v (%v)", waiting, err)
	}
}

// The dependency timeout fires at its time, not at the run's backstop nor
// at its tasks' dependency recheck: the run's timer falls due at creation
// + timeout, and the first tick at or after it ends the waiting task
// UPSTREAM_FAILED (dependency_timeout); a cleanup task (all_done) then
// runs, and the run's timer goes back to its backstop.
func TestDependencyTimeoutFiresAtItsTime(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name":"up"}`)
	f.createJob(t, `{"name":"down","timeouts":{"dependency":"5s"},"depends_on_jobs":[{"job":"up"}],
		"tasks":[{"id":"a"},{"id":"cleanup","depends_on":["a"],"trigger_rule":"all_done"}]}`)
	v := f.trigger(t, "down", time.Date(2029, 12, 31, 0, 0, 0, 0, time.UTC))
	timeout := v.Run.CreatedAt.Add(5 * time.Second)
	if !v.Run.TimerAt.Equal(timeout) || !v.Run.DependencyTimeoutAt.Equal(timeout) {
		t.Fatalf("new run's timer %s, dependency timeout %s; want both at creation + 5s = %s", v.Run.TimerAt, v.Run.DependencyTimeoutAt, timeout)
	}
	state := func(view ledger.RunView, task string) statemodel.InstanceState {
		for _, tv := range view.Tasks {
			if tv.Instance.Key.Task == task {
				return tv.Instance.Snapshot.State
			}
		}
		t.Fatalf("no task %s", task)
		return ""
	}

	f.clock.Advance(5*time.Second - time.Millisecond)
	f.tick(t, f.svc)
	if st := state(f.readRun(t, v.Run.ID), "a"); st != statemodel.StateCreated {
		t.Fatalf("task a is %s just before its dependency timeout, want CREATED", st)
	}
	f.clock.Advance(time.Millisecond)
	f.tick(t, f.svc)
	after := f.readRun(t, v.Run.ID)
	if st := state(after, "a"); st != statemodel.StateUpstreamFailed {
		t.Fatalf("task a is %s at the first tick at its dependency timeout %s, want UPSTREAM_FAILED", st, timeout)
	}
	h, err := ledger.FullHistory(ctx, f.st, ledger.InstanceKey{Run: v.Run.ID, Task: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if last := h[len(h)-1]; last.Event != statemodel.EvDepsTimeout || last.Reason != "dependency_timeout" || !last.ObservedAt.Equal(timeout) {
		t.Fatalf("task a's last record: %s reason %q at %s, want %s with reason dependency_timeout at %s",
			last.Event, last.Reason, last.ObservedAt, statemodel.EvDepsTimeout, timeout)
	}
	if st := state(after, "cleanup"); st != statemodel.StateQueued {
		t.Fatalf("cleanup (all_done) is %s after a ended, want QUEUED", st)
	}
	if r := after.Run; r.ExecutionState.Terminal() || !r.TimerAt.Equal(timeout.Add(ledger.DefaultRunBackstop)) {
		t.Fatalf("run %s with timer %s after its dependency timeout, want live with its backstop %s",
			r.ExecutionState, r.TimerAt, timeout.Add(ledger.DefaultRunBackstop))
	}
}

// A run that waits on other jobs sends one delay message for its
// dependency timeout (SQS's delay fires it on time where the ticker runs
// once a minute); the message, handled at that time, ends the wait.
func TestDependencyTimeoutArmsADelayMessage(t *testing.T) {
	f := newFixture(t)
	mq := f.q.(*memQueue)
	delay := mq.create(fmt.Sprintf("sched%d-delay", seq.Add(1)))
	f.svc = mustNew(f.st, f.q, scheduler.Config{Pools: map[string]string{"default": f.pool}, Now: f.clock.Now, DelayQueueURL: delay})
	f.createJob(t, `{"name":"up"}`)
	f.createJob(t, `{"name":"down","timeouts":{"dependency":"3s"},"depends_on_jobs":[{"job":"up"}]}`)
	f.createJob(t, `{"name":"free"}`)
	f.trigger(t, "free", time.Time{}) // waits on no job: no message
	v := f.trigger(t, "down", time.Date(2029, 12, 31, 0, 0, 0, 0, time.UTC))
	timers := mq.bodies(delay)
	if len(timers) != 1 {
		t.Fatalf("delay queue holds %d messages, want one for the dependency timeout", len(timers))
	}
	var tm protocol.Timer
	if err := json.Unmarshal([]byte(timers[0]), &tm); err != nil || tm.Run != v.Run.ID || tm.Task != "" || !tm.At.Equal(v.Run.CreatedAt.Add(3*time.Second)) {
		t.Fatalf("timer %+v (%v), want run %s, no task, at %s", tm, err, v.Run.ID, v.Run.CreatedAt.Add(3*time.Second))
	}
	f.clock.Advance(3 * time.Second)
	f.deliver(t, json.RawMessage(timers[0]))
	after := f.readRun(t, v.Run.ID)
	if st := after.Tasks[0].Instance.Snapshot.State; st != statemodel.StateUpstreamFailed || after.Run.ExecutionState != statemodel.RunFailed {
		t.Fatalf("after the delay message: task %s, run %s; want UPSTREAM_FAILED, FAILED", st, after.Run.ExecutionState)
	}
}

// A run whose spec cannot be read does not count its job dependencies as
// met: its root task keeps waiting.
func TestUnreadableSpecCountsAsNotMet(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	nr := ledger.NewRun{ID: f.svc.NewID(), Job: "broken", LogicalTime: f.clock.Now(), Trigger: statemodel.TriggerManual, Spec: []byte(`{"name":`),
		Tasks: []ledger.NewTask{{ID: "main", Pool: "default", Policy: statemodel.DefaultPolicy()}}}
	if _, err := f.st.CreateRun(ctx, nr, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.AdvanceRun(ctx, nr.ID); err != nil {
		t.Fatal(err)
	}
	if st := f.readRun(t, nr.ID).Tasks[0].Instance.Snapshot.State; st != statemodel.StateCreated {
		t.Fatalf("task of a run with an unreadable spec is %s, want CREATED (not met)", st)
	}
}
