package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store/memstore"
	"github.com/runledger/runledger/statemodel"
)

// stoppingStore is a store whose next child writes or output reads fail,
// as when the process writing them stops (or a read fails) between a
// map's two writes.
type stoppingStore struct {
	scheduler.Store
	childWrites, outputReads atomic.Int32
}

func (s *stoppingStore) CreateChildren(ctx context.Context, insts []ledger.Instance) error {
	if s.childWrites.Add(-1) >= 0 {
		return errors.New("the process stopped before writing its children")
	}
	return s.Store.CreateChildren(ctx, insts)
}

func (s *stoppingStore) GetOutputs(ctx context.Context, run string, tasks []string) (map[string][]byte, error) {
	if s.outputReads.Add(-1) >= 0 {
		return nil, errors.New("outputs: throttled")
	}
	return s.Store.GetOutputs(ctx, run, tasks)
}

func newStoppingFixture() (*fixture, *stoppingStore) {
	c := newClock()
	q := newMemQueue()
	pool := q.create(fmt.Sprintf("sched%d-pool", seq.Add(1)))
	st := &stoppingStore{Store: memstore.New(memstore.WithClock(c.Now), memstore.WithTimerHorizon(ledger.IndexEveryTimer))}
	return assemble(st, q, pool, c, "", nil), st
}

func okDriver(f *fixture, seed uint64) *mapDriver {
	d := &mapDriver{f: f, rng: rand.New(rand.NewPCG(seed, 9)), inputs: map[string]map[string]json.RawMessage{}}
	d.complete = func(env protocol.Envelope, ans protocol.ClaimAnswer) protocol.Completion {
		return protocol.Completion{Outcome: protocol.OutcomeSucceeded, Output: json.RawMessage(`"ok"`)}
	}
	return d
}

// TestMapBackstopWritesReleasedChildren: a release whose children were
// never written (the process stopped between the release write and the
// children's) leaves the map with children released and missing; the
// run's backstop writes and dispatches them, and the map ends, each child
// run once.
func TestMapBackstopWritesReleasedChildren(t *testing.T) {
	t.Run("memstore", func(t *testing.T) {
		f, st := newStoppingFixture()
		backstopWritesReleasedChildren(t, f, st)
	})
	t.Run("dynamodb", func(t *testing.T) {
		var st *stoppingStore
		f := newEmulatorFixtureWrapped(t, nil, func(s scheduler.Store) scheduler.Store {
			st = &stoppingStore{Store: s}
			return st
		})
		backstopWritesReleasedChildren(t, f, st)
	})
}

func backstopWritesReleasedChildren(t *testing.T, f *fixture, st *stoppingStore) {
	ctx := context.Background()
	st.childWrites.Store(1)
	f.createJob(t, `{"name":"m","retry":{"max_attempts":1},"tasks":[{"id":"each","map":{"over":"[0,1,2,3,4]","max_parallel":2}}]}`)
	v := f.trigger(t, "m", time.Time{})
	if envs := f.drainEnvelopes(t); len(envs) != 0 {
		t.Fatalf("%d children dispatched, want none (their write failed)", len(envs))
	}
	if m := f.readRun(t, v.Run.ID).Maps["each"]; m.Next != 2 || m.Running != 2 {
		t.Fatalf("map after the lost write %+v, want 2 released and not ended", m)
	}
	// The run's timer: the first backstop sees the map, the next finds it
	// unchanged and looks for its missing children.
	for range 2 {
		if err := f.svc.AdvanceRun(ctx, v.Run.ID); err != nil {
			t.Fatal(err)
		}
	}
	okDriver(f, 1).run(t, v.Run.ID)
	view := f.readRun(t, v.Run.ID)
	if view.Run.ExecutionState != statemodel.RunSucceeded {
		t.Errorf("run %s, want SUCCEEDED", view.Run.ExecutionState)
	}
	if m := view.Maps["each"]; m.Succeeded != 5 || m.Running != 0 || m.Next != 5 {
		t.Errorf("counts %+v", m)
	}
	children, _, err := f.svc.Maps().Children(ctx, v.Run.ID, "each", 100, "")
	if err != nil || len(children) != 5 {
		t.Fatalf("%d children (%v)", len(children), err)
	}
	for _, c := range children {
		if c.Snapshot.State != statemodel.StateSucceeded || c.Snapshot.Attempt != 1 {
			t.Errorf("child %s is %s after %d attempts", c.Key.Task, c.Snapshot.State, c.Snapshot.Attempt)
		}
	}
}

// TestMapBackstopRendersOverAgain: over whose inputs could not be read (a
// transient error, not a bad over) leaves the map task RUNNING, not
// FAILED, and the run's backstop renders it again.
func TestMapBackstopRendersOverAgain(t *testing.T) {
	ctx := context.Background()
	f, st := newStoppingFixture()
	f.createJob(t, `{"name":"m","retry":{"max_attempts":1},"tasks":[{"id":"list"},
		{"id":"each","depends_on":["list"],"map":{"over":"{{json .Inputs.list}}","max_parallel":2}}]}`)
	v := f.trigger(t, "m", time.Time{})
	envs := f.drainEnvelopes(t)
	if len(envs) != 1 {
		t.Fatalf("%d envelopes, want list's", len(envs))
	}
	if _, err := f.svc.Workers().Claim(ctx, refOf(envs[0]), envs[0].Token, "w@boot", "c"); err != nil {
		t.Fatal(err)
	}
	st.outputReads.Store(1)
	c := protocol.Completion{Run: envs[0].Run, Task: envs[0].Task, Attempt: 1, EventID: "done", Outcome: protocol.OutcomeSucceeded, Output: json.RawMessage(`[1,2,3]`)}
	if _, err := f.svc.Workers().Complete(ctx, c, envs[0].Token); err != nil {
		t.Fatal(err)
	}
	view := f.readRun(t, v.Run.ID)
	if inst := taskOf(t, view, "each"); inst.Snapshot.State != statemodel.StateRunning {
		cur, _ := inst.Snapshot.Current()
		t.Fatalf("map task %s (%q) after its inputs' read failed, want RUNNING", inst.Snapshot.State, cur.ErrorCategory)
	}
	if _, ok := view.Maps["each"]; ok {
		t.Fatal("a map item was written with no over rendered")
	}
	if err := f.svc.AdvanceRun(ctx, v.Run.ID); err != nil {
		t.Fatal(err)
	}
	okDriver(f, 2).run(t, v.Run.ID)
	view = f.readRun(t, v.Run.ID)
	if view.Run.ExecutionState != statemodel.RunSucceeded {
		t.Errorf("run %s, want SUCCEEDED", view.Run.ExecutionState)
	}
	if m := view.Maps["each"]; m.Total != 3 || m.Succeeded != 3 {
		t.Errorf("counts %+v", m)
	}
}

// TestMapChildRetryReopensASucceededMap: a map task that SUCCEEDED with a
// failure tolerated is reopened by an operator's retry of the failed
// child, and its run with it; it ends again from its children's counts.
func TestMapChildRetryReopensASucceededMap(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.createJob(t, `{"name":"m","retry":{"max_attempts":1},"tasks":[{"id":"each","map":{"over":"[0,1,2]","max_parallel":3,"tolerated_failures":1}}]}`)
	v := f.trigger(t, "m", time.Time{})
	d := okDriver(f, 3)
	fail := true
	d.complete = func(env protocol.Envelope, ans protocol.ClaimAnswer) protocol.Completion {
		if env.Task == "each[1]" && fail {
			return protocol.Completion{Outcome: protocol.OutcomeFailed, ErrorCategory: "boom", Retryable: new(bool)}
		}
		return protocol.Completion{Outcome: protocol.OutcomeSucceeded, Output: json.RawMessage(`"ok"`)}
	}
	d.run(t, v.Run.ID)
	view := f.readRun(t, v.Run.ID)
	if view.Run.ExecutionState != statemodel.RunSucceeded || view.Tasks[0].Instance.Snapshot.State != statemodel.StateSucceeded {
		t.Fatalf("run %s, map task %s, want both SUCCEEDED (one failure tolerated)", view.Run.ExecutionState, view.Tasks[0].Instance.Snapshot.State)
	}
	fail = false
	if err := f.svc.RetryTask(ctx, ledger.InstanceKey{Run: v.Run.ID, Task: "each[1]"}, scheduler.Retry{Operator: "ana", Reason: "fixed"}); err != nil {
		t.Fatal(err)
	}
	view = f.readRun(t, v.Run.ID)
	if st := view.Tasks[0].Instance.Snapshot.State; st.Terminal() || view.Run.ExecutionState.Terminal() {
		t.Fatalf("after its child's retry: map task %s, run %s, want both reopened", st, view.Run.ExecutionState)
	}
	d.run(t, v.Run.ID)
	view = f.readRun(t, v.Run.ID)
	if view.Run.ExecutionState != statemodel.RunSucceeded || view.Tasks[0].Instance.Snapshot.State != statemodel.StateSucceeded {
		t.Errorf("after the retried child succeeded: run %s, map task %s", view.Run.ExecutionState, view.Tasks[0].Instance.Snapshot.State)
	}
	if m := view.Maps["each"]; m.Succeeded != 3 || m.Failed != 0 || m.Running != 0 {
		t.Errorf("counts %+v", m)
	}
	if out, _, err := f.st.GetMapOutput(ctx, v.Run.ID, "each"); err != nil || string(out) != `["ok","ok","ok"]` {
		t.Errorf("output %s (%v)", out, err)
	}
}

func taskOf(t *testing.T, v ledger.RunView, task string) ledger.Instance {
	t.Helper()
	for _, tv := range v.Tasks {
		if tv.Instance.Key.Task == task {
			return tv.Instance
		}
	}
	t.Fatalf("run %s has no task %s", v.Run.ID, task)
	return ledger.Instance{}
}
