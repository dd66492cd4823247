package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

const shardCount = tableschema.TimerShards

var timerCases = []Case{
	{"DueTimers", dueTimers},
	{"InstanceTimerFollowsState", instanceTimerFollowsState},
}

// dueTimers: with 1,000 finished instances in finished runs and 10 due
// ones spread over shards, the due timers of all shards are exactly the 10.
func dueTimers(t *testing.T, h *Harness) {
	ctx := context.Background()
	now := h.Clock.Now()
	const finished = 1000
	var keys []ledger.InstanceKey
	var runs []ledger.RunView
	for made := 0; made < finished; {
		n := min(ledger.MaxTasksPerRun, finished-made)
		tasks := make([]string, n)
		for i := range tasks {
			tasks[i] = fmt.Sprintf("t%03d", i)
		}
		v := h.MustCreate(t, NewRun("done", tasks...))
		runs = append(runs, v)
		for _, task := range v.Tasks {
			keys = append(keys, task.Instance.Key)
		}
		made += n
	}
	Parallel(t, 8, len(keys), func(i int) error {
		_, err := h.Store.Transition(ctx, keys[i], Ev(statemodel.EvDepsSkipped, 0), now, Policy())
		return err
	})
	for _, v := range runs {
		fresh, err := h.Store.ReadRun(ctx, v.Run.ID)
		if err != nil {
			t.Fatal(err)
		}
		d := statemodel.DeriveRunState(fresh.Nodes())
		if _, err := h.Store.UpdateRunState(ctx, fresh.Run, ledger.RunUpdate{
			ExecutionState: d.State, PublicationState: statemodel.DerivePublication(fresh.Nodes()),
		}); err != nil || d.State != statemodel.RunSucceeded {
			t.Fatalf("finish run %s (%s): %v", v.Run.ID, d.State, err)
		}
	}

	// 10 live instances whose dependency backstop (CREATED + 20 min, far
	// enough to be indexed) will be due, and 5 whose backstop is an hour
	// away.
	dueTasks := make([]string, 10)
	for i := range dueTasks {
		dueTasks[i] = fmt.Sprintf("due%02d", i)
	}
	dueRun := NewRun("live", dueTasks...)
	for i := range dueRun.Tasks {
		dueRun.Tasks[i].Policy.DepsRecheck = 20 * time.Minute
	}
	due := h.MustCreate(t, dueRun)
	later := NewRun("live", "later0", "later1", "later2", "later3", "later4")
	for i := range later.Tasks {
		later.Tasks[i].Policy.DepsRecheck = time.Hour
	}
	h.MustCreate(t, later)

	at := now.Add(21 * time.Minute) // past the 20-min backstops, before the hour
	got, shards := allDue(t, h, at, 3)
	var gotTasks []string
	for _, d := range got {
		if d.Item == ledger.TimerOfRun && d.Job == "live" {
			continue // the live runs' own backstops
		}
		if d.Item != ledger.TimerOfInstance || d.Run != due.Run.ID || d.Kind != string(statemodel.TimerDepsRecheck) || d.Job != "live" ||
			d.Instance() != (ledger.InstanceKey{Run: due.Run.ID, Task: d.Task}) {
			t.Errorf("unexpected due timer %+v", d)
		}
		gotTasks = append(gotTasks, d.Task)
	}
	slices.Sort(gotTasks)
	if !slices.Equal(gotTasks, dueTasks) {
		t.Fatalf("due timers %v, want exactly %v", gotTasks, dueTasks)
	}
	if len(shards) < 2 {
		t.Fatalf("the 10 due timers sit in %d shard(s); they should spread", len(shards))
	}
	// Finished instances and runs are never due, however late.
	all, _ := allDue(t, h, at.Add(1000*time.Hour), 0)
	for _, d := range all {
		if d.Run != due.Run.ID && d.Job != "live" {
			t.Fatalf("a finished item is due: %+v", d)
		}
	}
	for _, shard := range []int{-1, shardCount} {
		if _, _, err := h.Store.ListDueTimers(ctx, shard, at, 0, ""); !errors.Is(err, ledger.ErrInvalidInput) {
			t.Fatalf("shard %d: %v, want invalid input", shard, err)
		}
	}
}

// instanceTimerFollowsState: an instance's timer is in the index when its
// state's timer (the snapshot's Timer) is further than ledger.TimerHorizon
// from the write that set it, due from its time on; a nearer one is in no
// index (it rides a delay message and its run's backstop); none once the
// instance ends.
func instanceTimerFollowsState(t *testing.T, h *Harness) {
	p := Policy()
	instanceDue := func(at time.Time) []ledger.DueTimer {
		t.Helper()
		timers, _ := allDue(t, h, at, 0)
		var out []ledger.DueTimer
		for _, d := range timers {
			if d.Item == ledger.TimerOfInstance {
				out = append(out, d)
			}
		}
		return out
	}
	indexed := func(key ledger.InstanceKey, step string, wantKind statemodel.TimerKind, wantAt time.Time) {
		t.Helper()
		inst := h.MustInstance(t, key)
		if inst.TimerKind != wantKind || !inst.TimerAt.Equal(wantAt) {
			t.Fatalf("%s: stored timer %s at %s, want %s at %s", step, inst.TimerKind, inst.TimerAt, wantKind, wantAt)
		}
		if got := instanceDue(wantAt.Add(-time.Nanosecond)); len(got) != 0 {
			t.Fatalf("%s: due before its time: %+v", step, got)
		}
		got := instanceDue(wantAt)
		if len(got) != 1 || got[0].Kind != string(wantKind) || !got[0].At.Equal(wantAt) || got[0].Task != key.Task {
			t.Fatalf("%s: due timers %+v, want %s at %s", step, got, wantKind, wantAt)
		}
	}
	near := func(key ledger.InstanceKey, step string, wantKind statemodel.TimerKind, wantAt time.Time) {
		t.Helper()
		inst := h.MustInstance(t, key)
		if at, kind := inst.Snapshot.Timer(); kind != wantKind || !at.Equal(wantAt) {
			t.Fatalf("%s: timer %s at %s, want %s at %s", step, kind, at, wantKind, wantAt)
		}
		if inst.TimerKind != statemodel.TimerNone || !inst.TimerAt.IsZero() {
			t.Fatalf("%s: a near timer is indexed: %s at %s", step, inst.TimerKind, inst.TimerAt)
		}
		if got := instanceDue(wantAt.Add(1000 * time.Hour)); len(got) != 0 {
			t.Fatalf("%s: a near timer is listed due: %+v", step, got)
		}
	}

	// The default policy's timers are all near: a single task's life
	// puts nothing in the index.
	v := h.MustCreate(t, NewRun("timers", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.Clock.Now()
	near(key, "created", statemodel.TimerDepsRecheck, now.Add(p.DepsRecheck))
	h.ToQueued(t, key)
	near(key, "queued", statemodel.TimerQueueTimeout, now.Add(p.Timeouts.Queue))
	h.Step(t, key, Started(1, "w"), now)
	near(key, "running", statemodel.TimerLease, now.Add(p.Timeouts.Heartbeat))
	h.Step(t, key, Ev(statemodel.EvFailed, 1), now)
	near(key, "up for retry", statemodel.TimerRetry, now.Add(p.Retry.InitialInterval))

	// Far timers are indexed, each until the step that moves it.
	far := NewRun("timers", "far")
	far.Tasks[0].Policy.DepsRecheck = time.Hour
	far.Tasks[0].Policy.Timeouts.Queue = time.Hour
	far.Tasks[0].Policy.Timeouts.Heartbeat = time.Hour
	far.Tasks[0].Policy.Retry.InitialInterval = time.Hour
	far.Tasks[0].Policy.Retry.MaxInterval = time.Hour
	fv := h.MustCreate(t, far)
	fkey := fv.Tasks[0].Instance.Key
	step := func(e statemodel.Event, at time.Time) {
		t.Helper()
		// Decided with the instance's stored (far) policy.
		res, err := h.Store.Transition(context.Background(), fkey, e, at, ledger.StoredPolicy(nil))
		if err != nil || res.Outcome != statemodel.Applied {
			t.Fatalf("%s: %s, %v", e, res.Outcome, err)
		}
	}
	indexed(fkey, "created", statemodel.TimerDepsRecheck, now.Add(time.Hour))
	step(Ev(statemodel.EvDepsMet, 0), now)
	step(Dispatch(1), now)
	indexed(fkey, "queued", statemodel.TimerQueueTimeout, now.Add(time.Hour))
	step(Started(1, "w"), now)
	indexed(fkey, "running", statemodel.TimerLease, now.Add(time.Hour))
	step(Ev(statemodel.EvFailed, 1), now)
	indexed(fkey, "up for retry (initial_interval 1h)", statemodel.TimerRetry, now.Add(time.Hour))

	step(Ev(statemodel.EvRetryDue, 1), now.Add(time.Hour))
	step(Dispatch(2), now.Add(time.Hour))
	step(Started(2, "w"), now.Add(time.Hour))
	step(Succeeded(2), now.Add(time.Hour))
	if inst := h.MustInstance(t, fkey); !inst.TimerAt.IsZero() || inst.TimerKind != statemodel.TimerNone {
		t.Fatalf("succeeded: stored timer %s at %s, want none", inst.TimerKind, inst.TimerAt)
	}
	if got := instanceDue(now.Add(1000 * time.Hour)); len(got) != 0 {
		t.Fatalf("a finished instance is due: %+v", got)
	}
}
