package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store/memstore"
	"github.com/runledger/runledger/statemodel"
)

// withDelayQueue gives f's service a delay queue, and a store with the
// default timer horizon (a timer within it rides a delay message), and
// returns the queue's URL. f must not have written anything yet.
func withDelayQueue(f *fixture) string {
	mq := f.q.(*memQueue)
	delay := mq.create(fmt.Sprintf("sched%d-delay", seq.Add(1)))
	f.st = memstore.New(memstore.WithClock(f.clock.Now))
	f.svc = mustNew(f.st, f.sent, scheduler.Config{Pools: map[string]string{"default": f.pool}, Now: f.clock.Now,
		DelayQueueURL: delay, Evidence: []scheduler.EvidenceProvider{f.ev}})
	return delay
}

// timerMessages are the delay queue's timer messages of purpose.
func timerMessages(t *testing.T, f *fixture, delay, purpose string) []protocol.Timer {
	t.Helper()
	var out []protocol.Timer
	for _, body := range f.q.(*memQueue).bodies(delay) {
		var tm protocol.Timer
		if err := json.Unmarshal([]byte(body), &tm); err != nil {
			t.Fatal(err)
		}
		if tm.Purpose == purpose {
			out = append(out, tm)
		}
	}
	return out
}

// TestLostLeaseMessageIsFiredByTheRunBackstop: a claimed attempt's lease
// (10 s) is near, so it is in no timers index; with its delay message
// lost (no delay queue), the reconciler's pass over the index does not see
// it expire, and the pass that fires the run's timer does.
func TestLostLeaseMessageIsFiredByTheRunBackstop(t *testing.T) {
	f := newFixture(t)
	// The default horizon, and no delay queue: every near timer's message
	// is lost.
	f.st = memstore.New(memstore.WithClock(f.clock.Now))
	f.svc = mustNew(f.st, f.sent, scheduler.Config{Pools: map[string]string{"default": f.pool}, Now: f.clock.Now,
		Evidence: []scheduler.EvidenceProvider{f.ev}})
	run, _ := f.running(t, "w@boot")
	if inst := f.instance(t, run); !inst.TimerAt.IsZero() {
		t.Fatalf("a 10 s lease is indexed at %s", inst.TimerAt)
	}
	f.clock.Advance(11 * time.Second)
	if _, err := f.svc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateRunning {
		t.Fatalf("the index's pass moved the instance to %s: it should not see a near lease", st)
	}
	if err := f.svc.AdvanceRun(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateLost {
		t.Fatalf("after the run's backstop: %s, want LOST", st)
	}
}

// TestHeartbeatsArmNoMessageAndTheLeaseMessagePassesOn: the claim arms
// one lease message at the lease's end; heartbeats arm none; the message,
// handled at the old end, finds the lease extended, leaves the attempt
// RUNNING and arms one message at the new end.
func TestHeartbeatsArmNoMessageAndTheLeaseMessagePassesOn(t *testing.T) {
	f := newFixture(t)
	delay := withDelayQueue(f)
	ctx := context.Background()
	run, envl := f.running(t, "w@boot") // heartbeat timeout 10 s
	claimed := f.instance(t, run).Snapshot.Lease.ExpiresAt
	leases := timerMessages(t, f, delay, string(statemodel.TimerLease))
	if len(leases) != 1 || !leases[0].At.Equal(claimed) {
		t.Fatalf("lease messages after the claim %+v, want one at %s", leases, claimed)
	}
	ref := protocol.AttemptRef{Run: envl.Run, Task: envl.Task, Attempt: envl.Attempt}
	for i := range 3 {
		f.clock.Advance(3 * time.Second)
		if _, err := f.svc.Workers().Heartbeat(ctx, ref, envl.Token, fmt.Sprintf("beat-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(timerMessages(t, f, delay, string(statemodel.TimerLease))); n != 1 {
		t.Fatalf("%d lease messages after 3 heartbeats, want still 1", n)
	}
	inst := f.instance(t, run)
	extended := inst.Snapshot.Lease.ExpiresAt
	if !inst.TimerAt.IsZero() || !extended.After(claimed) {
		t.Fatalf("after heartbeats: indexed %s, lease %s; want no index entry and a lease past %s", inst.TimerAt, extended, claimed)
	}

	f.clock.Advance(claimed.Sub(f.clock.Now()))
	body, _ := json.Marshal(leases[0])
	if again := f.svc.HandleMessages(ctx, []scheduler.QueueMessage{{ID: "lease-1", Body: string(body)}}); len(again) != 0 {
		t.Fatalf("lease message to deliver again: %v", again)
	}
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateRunning {
		t.Fatalf("the old lease's message moved an extended lease to %s", st)
	}
	leases = timerMessages(t, f, delay, string(statemodel.TimerLease))
	if len(leases) != 2 || !leases[1].At.Equal(extended) {
		t.Fatalf("lease messages after the old end %+v, want a second at %s", leases, extended)
	}
}
