package scheduler_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// leaseFixture is the fixture with the worker-lease evidence as the only
// provider and a max clock skew of skew.
func leaseFixture(t *testing.T, skew time.Duration) *fixture {
	f := newFixture(t)
	f.svc = mustNew(f.st, f.q, scheduler.Config{
		Pools: map[string]string{"default": f.pool}, Now: f.clock.Now, MaxClockSkew: skew,
		Evidence: []scheduler.EvidenceProvider{scheduler.WorkerLeaseEvidence{Store: f.st, Now: f.clock.Now}},
	})
	return f
}

// bootAt is a boot id as the worker SDK makes it, started at t.
func bootAt(t time.Time) string {
	return ulid.MustNew(ulid.Timestamp(t), ulid.DefaultEntropy()).String()
}

// deliver hands messages to the events function as the events queue would.
func (f *fixture) deliver(t *testing.T, bodies ...any) {
	t.Helper()
	var msgs []scheduler.QueueMessage
	for i, b := range bodies {
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, scheduler.QueueMessage{ID: string(rune('a' + i)), Body: string(raw)})
	}
	if again := f.svc.HandleMessages(context.Background(), msgs); len(again) != 0 {
		t.Fatalf("events: %v handed back for redelivery", again)
	}
}

// recheck does what the delay queue's recheck message does.
func (f *fixture) recheck(t *testing.T, run string) {
	t.Helper()
	if err := f.svc.FireTimer(context.Background(), ledger.InstanceKey{Run: run, Task: "main"}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) reconcile(t *testing.T) {
	t.Helper()
	if _, err := f.svc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A worker that fell silent (no heartbeat, no process lease) is retried
// only once its attempt's lease and its process lease have both ended, by
// the scheduler's clock, plus the max clock skew; and the retry's retry_at
// is no earlier.
func TestSilentWorkerRetriedOnlyAfterLeaseEndPlusSkew(t *testing.T) {
	const skew = 5 * time.Second
	f := leaseFixture(t, skew)
	t0 := f.clock.Now()
	boot := bootAt(t0.Add(-time.Minute))
	run, env := f.running(t, "w1@"+boot) // the attempt's lease ends at t0+10s
	// Its last process lease: sent now, valid 3 s, proving the attempt.
	f.deliver(t, proven(protocol.Lease{Worker: "w1", BootID: boot, SentAt: t0, ExpiresAt: t0.Add(3 * time.Second), Seq: 1}, env))
	leaseEnd := f.instance(t, run).Snapshot.Lease.ExpiresAt

	f.lose(t) // t0+11s: LOST; the process lease ended 8 s ago, the attempt's 1 s ago
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateLost {
		t.Fatalf("state %s at the attempt's lease end + 1 s, want LOST until its lease end + skew", st)
	}
	f.clock.Advance(leaseEnd.Add(skew).Sub(f.clock.Now()) - time.Millisecond)
	f.recheck(t, run)
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateLost {
		t.Fatalf("state %s 1 ms before the lease end + skew, want LOST", st)
	}
	f.clock.Advance(time.Millisecond)
	f.recheck(t, run)
	snap := f.instance(t, run).Snapshot
	a1, _ := snap.AttemptN(1)
	if snap.State != statemodel.StateUpForRetry || a1.Outcome != statemodel.OutcomeLost || a1.ErrorCategory != statemodel.CategoryLost {
		t.Fatalf("at the lease end + skew: %s %+v, want UP_FOR_RETRY with attempt 1 lost", snap.State, a1)
	}
	if snap.RetryAt.Before(leaseEnd.Add(skew)) {
		t.Fatalf("retry_at %s before the lease end + skew %s", snap.RetryAt, leaseEnd.Add(skew))
	}
}

// A worker's process lease ends by the scheduler's clock: the time it
// received the lease plus the lifetime the worker gave it. A worker whose
// clock is an hour behind is not taken for dead.
func TestProcessLeaseEndsByTheSchedulersClock(t *testing.T) {
	f := leaseFixture(t, time.Second)
	t0 := f.clock.Now()
	boot := bootAt(t0.Add(-time.Hour))
	run, env := f.running(t, "w1@"+boot)
	behind := t0.Add(-time.Hour)
	// Sent by a clock an hour behind, valid 60 s, listing the attempt.
	f.deliver(t, proven(protocol.Lease{Worker: "w1", BootID: boot, SentAt: behind, ExpiresAt: behind.Add(time.Minute), Seq: 1}, env))
	f.lose(t) // t0+11s
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateLost {
		t.Fatalf("state %s while the process lease (received at t0, 60 s) runs, want LOST", st)
	}
	lease, err := f.st.GetWorkerLease(context.Background(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	if !lease.EndsAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("process lease ends at %s, want its receipt + 60 s = %s", lease.EndsAt, t0.Add(time.Minute))
	}
	f.clock.Advance(t0.Add(time.Minute + time.Second).Sub(f.clock.Now())) // its end + skew
	f.recheck(t, run)
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateUpForRetry {
		t.Fatalf("state %s once the process lease ended + skew, want UP_FOR_RETRY", st)
	}
}

// The evidence window may end before the attempt's lease plus the skew:
// the retry still waits for the latter.
func TestShortEvidenceWindowWaitsForTheSkew(t *testing.T) {
	const skew = 30 * time.Second
	f := leaseFixture(t, skew)
	run, _ := f.runningJob(t, `{"name":"j","timeouts":{"heartbeat":"10s"},"evidence_window":"1s","retry":{"max_attempts":3,"initial_interval":"1s","jitter":"none"}}`, "ghost@boot1")
	leaseEnd := f.instance(t, run).Snapshot.Lease.ExpiresAt
	f.lose(t)
	f.clock.Advance(5 * time.Second) // the window ended 4 s ago
	f.reconcile(t)
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateLost {
		t.Fatalf("state %s after the window, before the lease end + skew: want LOST", st)
	}
	f.clock.Advance(leaseEnd.Add(skew).Sub(f.clock.Now()))
	f.reconcile(t)
	snap := f.instance(t, run).Snapshot
	if snap.State != statemodel.StateUpForRetry || snap.RetryAt.Before(leaseEnd.Add(skew)) {
		t.Fatalf("state %s retry_at %s, want UP_FOR_RETRY no earlier than %s", snap.State, snap.RetryAt, leaseEnd.Add(skew))
	}
}

// A worker that restarted (a newer boot of its name, whose lease proves an
// attempt that boot claimed) proves the attempt's process gone: the retry
// need not wait for the skew. Its old attempt's success, still in the
// events queue, is accepted as long as no newer attempt was dispatched.
func TestRestartedWorkersOldSuccessIsAccepted(t *testing.T) {
	f := leaseFixture(t, time.Hour) // the skew is not what lets it go
	t0 := f.clock.Now()
	oldBoot, newBoot := bootAt(t0.Add(-time.Minute)), bootAt(t0.Add(5*time.Second))
	run, env := f.running(t, "w1@"+oldBoot)
	newer := f.claimAnother(t, "w1@"+newBoot)
	f.deliver(t, proven(protocol.Lease{Worker: "w1", BootID: newBoot, SentAt: t0.Add(5 * time.Second), ExpiresAt: t0.Add(35 * time.Second), Seq: 1}, newer))
	f.lose(t)
	snap := f.instance(t, run).Snapshot
	a1, _ := snap.AttemptN(1)
	if snap.State != statemodel.StateUpForRetry || a1.Outcome != statemodel.OutcomeLost || a1.ErrorCategory != statemodel.CategoryLost {
		t.Fatalf("restarted worker: %s %+v, want UP_FOR_RETRY at once, attempt 1 lost", snap.State, a1)
	}
	h, err := ledger.FullHistory(context.Background(), f.st, ledger.InstanceKey{Run: run, Task: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if last := h[len(h)-1]; last.Event != statemodel.EvEvidenceFailed || last.Evidence["finding"] != "worker restarted" {
		t.Fatalf("resolved by %s with %v, want the worker-restarted evidence", last.Event, last.Evidence)
	}
	// The old boot's success arrives now, after the verdict.
	f.deliver(t, protocol.Completion{Run: env.Run, Task: env.Task, Attempt: 1, EventID: "done-1", Outcome: protocol.OutcomeSucceeded,
		EventTime: t0.Add(2 * time.Second), Token: env.Token})
	snap = f.instance(t, run).Snapshot
	a1, _ = snap.AttemptN(1)
	if snap.State != statemodel.StateSucceeded || a1.Outcome != statemodel.OutcomeSucceeded || snap.Attempt != 1 {
		t.Fatalf("after the old boot's success: %s attempt %d %+v, want SUCCEEDED by attempt 1", snap.State, snap.Attempt, a1)
	}
}

// Leases of an older boot of the same name (its leases arrive late, or the
// attempt's boot has not been heard of yet) prove nothing.
func TestOlderBootIsNoEvidence(t *testing.T) {
	f := leaseFixture(t, time.Hour)
	t0 := f.clock.Now()
	oldBoot, attemptBoot := bootAt(t0.Add(-time.Hour)), bootAt(t0.Add(-time.Minute))
	run, _ := f.running(t, "w1@"+attemptBoot)
	f.deliver(t, protocol.Lease{Worker: "w1", BootID: oldBoot, SentAt: t0, ExpiresAt: t0.Add(time.Hour), Seq: 7})
	f.lose(t)
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateLost {
		t.Fatalf("state %s on an older boot's lease, want LOST", st)
	}
}

// proven is l listing the attempts of envs, each with the proof made with
// its token, as the worker SDK sends it.
func proven(l protocol.Lease, envs ...protocol.Envelope) protocol.Lease {
	var tokens []string
	for _, e := range envs {
		l.Running = append(l.Running, protocol.LeasedAttempt{AttemptRef: e.Ref()})
		tokens = append(tokens, e.Token)
	}
	l.Prove(tokens)
	return l
}

// claimAnother triggers job j once more and claims its attempt as
// workerID.
func (f *fixture) claimAnother(t *testing.T, workerID string) protocol.Envelope {
	t.Helper()
	ctx := context.Background()
	if _, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "j"}); err != nil {
		t.Fatal(err)
	}
	msgs, err := f.q.Receive(ctx, f.pool, queue.ReceiveOptions{MaxMessages: 1, Wait: 5 * time.Second})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("no envelope: %v %d", err, len(msgs))
	}
	env, err := protocol.ParseEnvelope(msgs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Workers().Claim(ctx, env.Ref(), env.Token, workerID, "claim-another"); err != nil {
		t.Fatal(err)
	}
	return env
}

// leaseVerdict is what the worker-lease evidence says of run's current
// attempt now.
func (f *fixture) leaseVerdict(t *testing.T, run string) scheduler.Verdict {
	t.Helper()
	inst := f.instance(t, run)
	cur, _ := inst.Snapshot.Current()
	found, err := scheduler.WorkerLeaseEvidence{Store: f.st, Now: f.clock.Now}.Check(context.Background(), inst, cur)
	if err != nil {
		t.Fatal(err)
	}
	return found.Verdict
}

// A lease whose boot starts 100 years ahead is dropped: it would pass for
// the newest boot of its name, make the worker's LOST attempts gone and
// lock its real leases out. Nothing changes, and the real worker's leases
// still count.
func TestForgedFutureBootLeaseIgnored(t *testing.T) {
	const skew = 5 * time.Second
	f := leaseFixture(t, skew)
	t0 := f.clock.Now()
	boot := bootAt(t0.Add(-time.Minute))
	run, env := f.running(t, "w1@"+boot)
	f.deliver(t, proven(protocol.Lease{Worker: "w1", BootID: boot, SentAt: t0, ExpiresAt: t0.Add(time.Hour), Seq: 1}, env))

	for _, start := range []time.Time{t0.AddDate(100, 0, 0), t0.Add(skew + time.Second)} {
		forged := bootAt(start)
		f.deliver(t, protocol.Lease{Worker: "w1", BootID: forged, SentAt: t0, ExpiresAt: t0.AddDate(100, 0, 0), Seq: 1})
		lease, err := f.st.GetWorkerLease(context.Background(), "w1")
		if err != nil {
			t.Fatal(err)
		}
		if lease.BootID != boot || lease.Seq != 1 {
			t.Fatalf("a boot starting at %s (now %s, skew %s) was stored: %+v", start, t0, skew, lease)
		}
	}
	// The real worker's next lease is taken, and says the attempt runs.
	f.deliver(t, proven(protocol.Lease{Worker: "w1", BootID: boot, SentAt: t0, ExpiresAt: t0.Add(time.Hour), Seq: 2}, env))
	if lease, err := f.st.GetWorkerLease(context.Background(), "w1"); err != nil || lease.BootID != boot || lease.Seq != 2 {
		t.Fatalf("the real lease after the forged ones: %+v, %v; want boot %s seq 2", lease, err, boot)
	}
	f.lose(t)
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateLost {
		t.Fatalf("state %s after the forged leases, want LOST (its worker's lease says it runs)", st)
	}
	if v := f.leaseVerdict(t, run); v != scheduler.VerdictRunning {
		t.Fatalf("verdict %s, want running", v)
	}
}

// A lease counts as evidence for an attempt only with a valid proof made
// with the attempt's token, from the boot that claimed it: without a
// proof, with another token's, or from another boot of the name (even
// with the token), the attempt is not "running", and a newer boot that
// proves no attempt of its own is not stored: it neither makes the
// attempt gone nor hides the real boot's lease.
func TestUnprovenLeaseIsNoEvidence(t *testing.T) {
	f := leaseFixture(t, time.Hour)
	t0 := f.clock.Now()
	boot, later := bootAt(t0.Add(-time.Minute)), bootAt(t0)
	run, env := f.running(t, "w1@"+boot)
	ref := env.Ref()
	wrong := proven(protocol.Lease{Worker: "w1", BootID: boot, SentAt: t0, ExpiresAt: t0.Add(time.Hour), Seq: 2},
		protocol.Envelope{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, Token: "0123456789abcdef0123456789abcdef"})
	for i, l := range []protocol.Lease{
		{Worker: "w1", BootID: boot, SentAt: t0, ExpiresAt: t0.Add(time.Hour), Seq: 1, Running: []protocol.LeasedAttempt{{AttemptRef: ref}}},
		wrong,
		{Worker: "w1", BootID: boot, SentAt: t0, ExpiresAt: t0.Add(time.Hour), Seq: 3, Running: []protocol.LeasedAttempt{{AttemptRef: ref, Proof: wrong.Running[0].Proof[1:] + "0"}}},
	} {
		f.deliver(t, l)
		if v := f.leaseVerdict(t, run); v != scheduler.VerdictUnknown {
			t.Fatalf("lease %d (no valid proof): verdict %s, want unknown", i, v)
		}
	}
	// The control: the same boot with the proof is evidence.
	f.deliver(t, proven(protocol.Lease{Worker: "w1", BootID: boot, SentAt: t0, ExpiresAt: t0.Add(time.Hour), Seq: 4}, env))
	if v := f.leaseVerdict(t, run); v != scheduler.VerdictRunning {
		t.Fatalf("a proven lease: verdict %s, want running", v)
	}
	// A newer boot of the name, listing the attempt with its token's
	// proof: that boot did not claim it, and proves no attempt of its own.
	f.deliver(t, proven(protocol.Lease{Worker: "w1", BootID: later, SentAt: t0, ExpiresAt: t0.Add(time.Hour), Seq: 1}, env))
	if lease, err := f.st.GetWorkerLease(context.Background(), "w1"); err != nil || lease.BootID != boot {
		t.Fatalf("a newer boot proving nothing of its own was stored: %+v, %v", lease, err)
	}
	if v := f.leaseVerdict(t, run); v != scheduler.VerdictRunning {
		t.Fatalf("after a newer boot proving nothing of its own: verdict %s, want running (the real boot's lease stands)", v)
	}
	f.lose(t)
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateLost {
		t.Fatalf("state %s, want LOST: an unproven newer boot is no restart", st)
	}
}

// A lease of the real boot id with a huge seq is not stored: without a
// proof it could be anyone's, and even proven (its sender holds the
// attempt's token) its seq may not run more than ledger.MaxLeaseSeqJump
// past the boot's last proven lease. Either way the real worker's next
// lease is still taken.
func TestForgedLeaseCannotLockOutTheRealBoot(t *testing.T) {
	f := leaseFixture(t, time.Hour)
	t0 := f.clock.Now()
	boot := bootAt(t0.Add(-time.Minute))
	_, env := f.running(t, "w1@"+boot)
	real := func(seq int64) protocol.Lease {
		return proven(protocol.Lease{Worker: "w1", BootID: boot, SentAt: t0, ExpiresAt: t0.Add(time.Hour), Seq: seq}, env)
	}
	f.deliver(t, real(1))
	for _, forged := range []struct {
		name  string
		lease protocol.Lease
	}{
		{"no proof, seq 2^62", protocol.Lease{Worker: "w1", BootID: boot, SentAt: t0, ExpiresAt: t0.Add(time.Hour), Seq: 1 << 62}},
		{"proven, seq 2^62", real(1 << 62)},
		{"proven, one past the bound", real(1 + ledger.MaxLeaseSeqJump + 1)},
	} {
		f.deliver(t, forged.lease)
		if lease, err := f.st.GetWorkerLease(context.Background(), "w1"); err != nil || lease.Seq != 1 {
			t.Fatalf("after a lease with %s: stored %+v, %v; want the real seq 1", forged.name, lease, err)
		}
	}
	f.deliver(t, real(2))
	if lease, err := f.st.GetWorkerLease(context.Background(), "w1"); err != nil || lease.BootID != boot || lease.Seq != 2 {
		t.Fatalf("the real worker's next lease: stored %+v, %v; want boot %s seq 2", lease, err, boot)
	}
}
