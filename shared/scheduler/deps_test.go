package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// A manual run of a job with depends_on_jobs needs an explicit logical
// time: the trigger's own time matches no upstream run.
func TestDependentManualRunNeedsLogicalTime(t *testing.T) {
	f := newFixture(t)
	f.createJob(t, `{"name":"up"}`)
	f.createJob(t, `{"name":"down","depends_on_jobs":[{"job":"up"}]}`)
	_, _, err := f.svc.TriggerRun(context.Background(), scheduler.TriggerRequest{Job: "down"})
	var je *jobspec.Error
	if !errors.As(err, &je) || je.Code != jobspec.CodeInvalidField || je.Field != "logical_time" {
		t.Fatalf("trigger without logical_time: %v, want invalid_field naming logical_time", err)
	}
	runs, _, err := f.st.ListRuns(context.Background(), store.RunFilter{Job: "down"})
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
	waiting, err := f.svc.WaitingFor(ctx, v)
	if err != nil || len(waiting) != 1 || waiting[0] != (protocol.WaitingFor{Job: "up", LogicalTime: logical, Require: statemodel.RequirePublished}) {
		t.Fatalf("waiting for %+v (%v), want up at %s, no run yet", waiting, err, logical)
	}
	up := f.trigger(t, "up", logical) // QUEUED: no worker serves the pool
	waiting, err = f.svc.WaitingFor(ctx, f.readRun(t, v.Run.ID))
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
	h, err := store.FullHistory(ctx, f.st, store.InstanceKey{Run: v.Run.ID, Task: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if last := h[len(h)-1]; last.Event != statemodel.EvDepsTimeout || last.Reason != "dependency_timeout" {
		t.Fatalf("task a's last record: %s reason %q, want %s with reason dependency_timeout", last.Event, last.Reason, statemodel.EvDepsTimeout)
	}
	if waiting, err := f.svc.WaitingFor(ctx, after); err != nil || waiting != nil {
		t.Fatalf("a finished run still waits for %+v (%v)", waiting, err)
	}
}

// A run whose spec cannot be read does not count its job dependencies as
// met: its root task keeps waiting.
func TestUnreadableSpecCountsAsNotMet(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	nr := store.NewRun{ID: f.svc.NewID(), Job: "broken", LogicalTime: f.clock.Now(), Trigger: statemodel.TriggerManual, Spec: []byte(`{"name":`),
		Tasks: []store.NewTask{{ID: "main", Pool: "default", Policy: statemodel.DefaultPolicy()}}}
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
