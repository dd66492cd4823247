package scheduler_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// TestSingleTaskRunWritesItsRunTwice: a single-task run's item is written
// at its creation and at its end, nothing between; while its task runs,
// the run reads RUNNING (ReadRun, and the listing's status filter) from
// its task, its item still QUEUED at the version it was created with.
func TestSingleTaskRunWritesItsRunTwice(t *testing.T) {
	var mu sync.Mutex
	var ops []string
	f := newEmulatorFixtureWith(t, []store.Option{store.WithCapacityReports(func(r store.CapacityReport) {
		mu.Lock()
		defer mu.Unlock()
		ops = append(ops, r.Operation)
	})})
	ctx := context.Background()
	run, envl := f.runningJob(t, `{"name":"j"}`, "w@boot")
	created, err := f.st.GetRun(ctx, run)
	if err != nil || created.ExecutionState != statemodel.RunQueued {
		t.Fatalf("stored run %+v (%v), want QUEUED: no write for its start", created, err)
	}
	if got := f.readRun(t, run).Run; got.ExecutionState != statemodel.RunRunning || got.Status != statemodel.StatusRunning {
		t.Fatalf("ReadRun of a run whose task runs: %s/%s, want RUNNING", got.ExecutionState, got.Status)
	}
	for st, want := range map[statemodel.Status]bool{statemodel.StatusRunning: true, statemodel.StatusPending: false} {
		runs, _, err := f.svc.ListRuns(ctx, ledger.RunFilter{Job: "j", Status: st})
		if err != nil {
			t.Fatal(err)
		}
		if listed := slices.ContainsFunc(runs, func(r ledger.Run) bool { return r.ID == run }); listed != want {
			t.Fatalf("listed under %s: %t, want %t", st, listed, want)
		}
	}
	c := protocol.Completion{Run: run, Task: envl.Task, Attempt: envl.Attempt, EventID: "done-1", Outcome: protocol.OutcomeSucceeded}
	if _, err := f.svc.Workers().Complete(ctx, c, envl.Token); err != nil {
		t.Fatal(err)
	}
	ended := f.readRun(t, run).Run
	if ended.ExecutionState != statemodel.RunSucceeded || ended.Version != created.Version+1 {
		t.Fatalf("ended run %s at version %d, want SUCCEEDED at %d: one write after its creation", ended.ExecutionState, ended.Version, created.Version+1)
	}
	mu.Lock()
	defer mu.Unlock()
	// Left out: the job's own writes, and the task's steps (and its history's spill).
	notRun := []string{"create_job", "put_run_spec", "transition", "spill_history"}
	runWrites := slices.DeleteFunc(slices.Clone(ops), func(op string) bool { return slices.Contains(notRun, op) })
	if !slices.Equal(runWrites, []string{"create_run", "update_run_state"}) {
		t.Fatalf("the run's writes: %v (all: %v), want create_run, update_run_state", runWrites, ops)
	}
}
