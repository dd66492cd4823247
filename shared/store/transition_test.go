package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/statemodel"
)

// TestDuplicateWriteFindsStandingInstance: a decision made from a snapshot
// read before another delivery of the same event won is refused by the
// write's condition, and the next round, decided from the instance as the
// write found it, answers duplicate with the winner's outcome.
func TestDuplicateWriteFindsStandingInstance(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.MustCreate(t, ledgertest.NewRun("dupwrite", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.ToQueued(t, key)
	ts.Step(t, key, ledgertest.Started(1, "w"), now)
	before, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	succeeded := ledgertest.Ev(statemodel.EvSucceeded, 1)
	d := statemodel.Apply(before.Snapshot, succeeded, now.Add(time.Second), ledgertest.Policy())
	if d.Outcome != statemodel.Applied {
		t.Fatalf("decision %s, want applied", d.Outcome)
	}
	if _, err := ts.WriteInstance(ctx, before, []statemodel.Decision{d}); err != nil {
		t.Fatalf("the winner's write: %v", err)
	}
	if _, err := ts.WriteInstance(ctx, before, []statemodel.Decision{d}); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("the same decision again: err = %v, want ErrConflict", err)
	}
	res, err := ts.Harness.Store.TransitionFrom(ctx, before, succeeded, now.Add(time.Second), ledgertest.Policy())
	if err != nil || res.Outcome != statemodel.Duplicate || res.Rounds != 2 {
		t.Fatalf("the event again from the old snapshot: %s in %d rounds, err %v; want duplicate in 2", res.Outcome, res.Rounds, err)
	}
	if res.Snapshot.State != statemodel.StateSucceeded || res.Snapshot.Version != d.Snapshot.Version {
		t.Fatalf("duplicate found %+v, want the instance as the winner left it (SUCCEEDED, version %d)", res.Snapshot, d.Snapshot.Version)
	}
}

// TestLeaseExpiryLosesToHeartbeat: the reconciler decided lease.expired
// from a snapshot; a heartbeat then refreshed the lease without moving the
// version. The write must fail on the lease condition, and Transition must
// classify the event as not due.
func TestLeaseExpiryLosesToHeartbeat(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	p := ledgertest.Policy()
	v := ts.MustCreate(t, ledgertest.NewRun("lease", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.ToQueued(t, key)
	ts.Step(t, key, ledgertest.Started(1, "w"), now)
	seen, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	late := ts.Clock.Advance(p.Timeouts.Heartbeat + time.Second)
	expired := ledgertest.Ev(statemodel.EvLeaseExpired, 1)
	d := statemodel.Apply(seen.Snapshot, expired, late, p)
	if d.Outcome != statemodel.Applied {
		t.Fatalf("the model should expire the lease: %s %v", d.Outcome, d.Err)
	}
	hb, err := ts.Heartbeat(ctx, key, 1, late, p.Timeouts.Heartbeat)
	if err != nil || hb.CancelRequested || !hb.LeaseExpiresAt.Equal(late.Add(p.Timeouts.Heartbeat)) {
		t.Fatalf("heartbeat: %+v, %v", hb, err)
	}
	if _, err := ts.WriteInstance(ctx, seen, []statemodel.Decision{d}); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("stale lease.expired decision written: err %v, want ErrConflict", err)
	}
	res, err := ts.Harness.Store.Transition(ctx, key, expired, late, p)
	if res.Outcome != statemodel.Rejected || !errors.Is(err, statemodel.ErrNotDue) {
		t.Fatalf("lease.expired after a heartbeat: %s, %v; want rejected, not due", res.Outcome, err)
	}
	inst, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Snapshot.State != statemodel.StateRunning || inst.Snapshot.Version != seen.Snapshot.Version {
		t.Fatalf("instance %s v%d, want RUNNING v%d", inst.Snapshot.State, inst.Snapshot.Version, seen.Snapshot.Version)
	}
}
