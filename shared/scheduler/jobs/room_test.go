package jobs_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/scheduler/jobs"
	"github.com/runledger/runledger/shared/store/memstore"
	"github.com/runledger/runledger/statemodel"
)

// kernel is a kernel that compiles nothing and counts what it is told.
type kernel struct {
	forgotten int
}

func (k *kernel) CompiledJob([]byte) (*jobspec.Compiled, error) {
	return nil, errors.New("unreadable")
}
func (k *kernel) CheckGroupLimits(context.Context, jobspec.Job) error { return nil }
func (k *kernel) ApplyLimit(context.Context, jobspec.Job)             {}
func (k *kernel) ForgetEventIndex()                                   { k.forgotten++ }
func (k *kernel) RunAt(context.Context, string, time.Time) (ledger.Run, bool, error) {
	return ledger.Run{}, false, nil
}
func (k *kernel) ArmTimer(context.Context, ledger.InstanceKey, time.Time) {}

var now = time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)

func newRoom(t *testing.T) (*jobs.Room, *kernel, *memstore.Store) {
	t.Helper()
	k, st := &kernel{}, memstore.New(memstore.WithClock(func() time.Time { return now }))
	r := jobs.New(jobs.Params{Kernel: k, Store: st, Pools: map[string]string{"p": "q"}, Now: func() time.Time { return now }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return r, k, st
}

func parse(t *testing.T, r *jobs.Room, def string) jobspec.Job {
	t.Helper()
	j, err := jobspec.Parse([]byte(def), r.ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// A job written through the room is seen at once by the wake of its
// upstream job's dependents, however recently their edges were read, and
// the kernel's on_event index is told of every write.
func TestJobWritesForgetTheDependencyEdges(t *testing.T) {
	r, k, st := newRoom(t)
	ctx := context.Background()
	if _, err := r.CreateJob(ctx, parse(t, r, `{"name":"up","pool":"p"}`)); err != nil {
		t.Fatal(err)
	}
	up := ledger.Run{ID: "up-1", Job: "up", LogicalTime: now}
	if ids, err := r.Dependents(ctx, up); err != nil || len(ids) != 0 {
		t.Fatalf("dependents of a job none depends on: %v %v", ids, err)
	}
	if _, err := r.CreateJob(ctx, parse(t, r, `{"name":"down","pool":"p","depends_on_jobs":[{"job":"up"}]}`)); err != nil {
		t.Fatal(err)
	}
	nr := ledger.NewRun{ID: "down-1", Job: "down", LogicalTime: now, Spec: []byte(`{}`), OfLiveJob: true, Trigger: statemodel.TriggerManual,
		Tasks: []ledger.NewTask{{ID: "main", Pool: "p", Policy: statemodel.DefaultPolicy()}}}
	if _, err := st.CreateRun(ctx, nr, now); err != nil {
		t.Fatal(err)
	}
	if ids, err := r.Dependents(ctx, up); err != nil || !slices.Equal(ids, []string{"down-1"}) {
		t.Fatalf("dependents after down was defined: %v %v, want [down-1]", ids, err)
	}
	if k.forgotten != 2 {
		t.Errorf("the on_event index was forgotten %d times, want 2 (one per job written)", k.forgotten)
	}
}

// A run whose spec cannot be read waits on its job dependencies, failing
// closed, until the default dependency timeout from its creation ends it.
func TestUnreadableSpecWaitsUntilTheDefaultTimeout(t *testing.T) {
	r, _, _ := newRoom(t)
	for _, c := range []struct {
		created  time.Time
		timedOut bool
	}{
		{now.Add(-time.Minute), false},
		{now.Add(-jobspec.DefaultDependencyTimeout), true},
	} {
		v, err := r.CrossJobVerdict(context.Background(), ledger.Run{ID: "r", Job: "down", CreatedAt: c.created, Spec: []byte(`{`)})
		if err != nil || v.Verdict != statemodel.DepsWait || v.TimedOut != c.timedOut {
			t.Errorf("created %s: %+v %v, want a wait, timed out %v", c.created, v, err, c.timedOut)
		}
	}
}
