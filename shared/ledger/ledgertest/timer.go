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

	// 10 live instances whose dependency backstop (CREATED + 1 min) will be
	// due, and 5 whose backstop is an hour away.
	dueTasks := make([]string, 10)
	for i := range dueTasks {
		dueTasks[i] = fmt.Sprintf("due%02d", i)
	}
	due := h.MustCreate(t, NewRun("live", dueTasks...))
	later := NewRun("live", "later0", "later1", "later2", "later3", "later4")
	for i := range later.Tasks {
		later.Tasks[i].Policy.DepsRecheck = time.Hour
	}
	h.MustCreate(t, later)

	at := now.Add(2 * time.Minute) // past the 1-min backstops, before the 5-min run backstops
	got, shards := allDue(t, h, at, 3)
	var gotTasks []string
	for _, d := range got {
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

// instanceTimerFollowsState: an instance's timer is its state's (the
// snapshot's Timer), due from its time on, and gone once the instance
// ends.
func instanceTimerFollowsState(t *testing.T, h *Harness) {
	v := h.MustCreate(t, NewRun("timers", "main"))
	key := v.Tasks[0].Instance.Key
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
	check := func(step string, wantKind statemodel.TimerKind, wantAt time.Time) {
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
	now := h.Clock.Now()
	check("created", statemodel.TimerDepsRecheck, now.Add(p.DepsRecheck))
	h.ToQueued(t, key)
	check("queued", statemodel.TimerQueueTimeout, now.Add(p.Timeouts.Queue))
	h.Step(t, key, Started(1, "w"), now)
	check("running", statemodel.TimerLease, now.Add(p.Timeouts.Heartbeat))
	h.Step(t, key, Succeeded(1), now)
	if inst := h.MustInstance(t, key); !inst.TimerAt.IsZero() || inst.TimerKind != statemodel.TimerNone {
		t.Fatalf("succeeded: stored timer %s at %s, want none", inst.TimerKind, inst.TimerAt)
	}
	if got := instanceDue(now.Add(1000 * time.Hour)); len(got) != 0 {
		t.Fatalf("a finished instance is due: %+v", got)
	}
}
