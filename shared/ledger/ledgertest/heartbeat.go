package ledgertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

var heartbeatCases = []Case{
	{"Heartbeat", heartbeat},
	{"HeartbeatOfAnOlderAttempt", heartbeatOfAnOlderAttempt},
}

// heartbeat: a heartbeat renews the lease (no history, no version), moves
// RUNNING's timer with it, answers a cancel request without moving the
// cancel timer, leaves a LOST instance to a real transition, and refuses
// attempts that do not exist or are not running.
func heartbeat(t *testing.T, h *Harness) {
	ctx := context.Background()
	p := Policy()
	v := h.MustCreate(t, NewRun("beats", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.ToQueued(t, key)
	h.Step(t, key, Started(1, "w"), now)
	before := h.MustInstance(t, key)
	records := len(h.FullHistory(t, key))

	now = h.Clock.Advance(20 * time.Second)
	hb, err := h.Store.Heartbeat(ctx, key, 1, now, p.Timeouts.Heartbeat)
	wantExp := now.Add(p.Timeouts.Heartbeat)
	if err != nil || hb.State != statemodel.StateRunning || hb.CancelRequested || !hb.LeaseExpiresAt.Equal(wantExp) {
		t.Fatalf("heartbeat while running: %+v, %v", hb, err)
	}
	inst := h.MustInstance(t, key)
	// The lease is near (a minute): it rides the claim's delay message,
	// so the heartbeat leaves the instance out of the timers index.
	if inst.Snapshot.Version != before.Snapshot.Version || !inst.Snapshot.Lease.ExpiresAt.Equal(wantExp) ||
		!inst.Snapshot.Lease.LastHeartbeatAt.Equal(now) || !inst.TimerAt.IsZero() || inst.TimerKind != statemodel.TimerNone {
		t.Fatalf("after heartbeat: v%d lease %+v timer %s %s; want v%d, lease at %s, no indexed timer",
			inst.Snapshot.Version, inst.Snapshot.Lease, inst.TimerAt, inst.TimerKind, before.Snapshot.Version, wantExp)
	}
	// A lease further off than the horizon is the index's.
	far := 2 * ledger.TimerHorizon
	if _, err := h.Store.Heartbeat(ctx, key, 1, now, far); err != nil {
		t.Fatalf("far heartbeat: %v", err)
	}
	if inst := h.MustInstance(t, key); !inst.TimerAt.Equal(now.Add(far)) || inst.TimerKind != statemodel.TimerLease {
		t.Fatalf("after a far heartbeat: timer %s %s, want lease at %s", inst.TimerAt, inst.TimerKind, now.Add(far))
	}
	if _, err := h.Store.Heartbeat(ctx, key, 1, now, p.Timeouts.Heartbeat); err != nil {
		t.Fatalf("near heartbeat: %v", err)
	}
	if inst := h.MustInstance(t, key); !inst.TimerAt.IsZero() {
		t.Fatalf("a near heartbeat after a far one left the timer at %s", inst.TimerAt)
	}
	if n := len(h.FullHistory(t, key)); n != records {
		t.Fatalf("heartbeat wrote history: %d records, want %d", n, records)
	}
	if _, err := h.Store.Heartbeat(ctx, key, 2, now, p.Timeouts.Heartbeat); !errors.Is(err, statemodel.ErrUnknownAttempt) {
		t.Fatalf("heartbeat of attempt 2: %v, want unknown attempt", err)
	}

	cancel := Ev(statemodel.EvCancelRequested, 0)
	cancel.Operator, cancel.Reason = "ops", "stop"
	h.Step(t, key, cancel, now)
	hb, err = h.Store.Heartbeat(ctx, key, 1, now.Add(time.Second), p.Timeouts.Heartbeat)
	if err != nil || hb.State != statemodel.StateCancelling || !hb.CancelRequested {
		t.Fatalf("heartbeat while cancelling: %+v, %v", hb, err)
	}
	inst = h.MustInstance(t, key)
	if at, kind := inst.Snapshot.Timer(); kind != statemodel.TimerCancel || !at.Equal(now.Add(p.Timeouts.Cancel)) ||
		!inst.TimerAt.IsZero() || inst.TimerKind != statemodel.TimerNone {
		t.Fatalf("a heartbeat in CANCELLING moved the cancel timer: %s %s, indexed %s %s", at, kind, inst.TimerAt, inst.TimerKind)
	}

	now = h.Clock.Advance(p.Timeouts.Cancel + time.Second)
	h.Step(t, key, Ev(statemodel.EvCancelTimeout, 1), now)
	if _, err := h.Store.Heartbeat(ctx, key, 1, now, p.Timeouts.Heartbeat); !errors.Is(err, ledger.ErrLostNeedsTransition) {
		t.Fatalf("heartbeat while lost: %v, want ErrLostNeedsTransition", err)
	}
	res := h.Step(t, key, Ev(statemodel.EvHeartbeat, 1), now)
	if res.Snapshot.State != statemodel.StateCancelling {
		t.Fatalf("heartbeat in LOST with a cancel requested: %s, want CANCELLING", res.Snapshot.State)
	}
	h.Step(t, key, Ev(statemodel.EvCancelled, 1), now)
	if _, err := h.Store.Heartbeat(ctx, key, 1, now, p.Timeouts.Heartbeat); !errors.Is(err, statemodel.ErrIllegalTransition) {
		t.Fatalf("heartbeat after cancel: %v, want illegal transition", err)
	}
	if _, err := h.Store.Heartbeat(ctx, ledger.InstanceKey{Run: "nope", Task: "main"}, 1, now, time.Minute); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("heartbeat of a missing instance: %v, want not found", err)
	}
	for name, call := range map[string]func() error{
		"no lease":  func() error { _, err := h.Store.Heartbeat(ctx, key, 1, now, 0); return err },
		"attempt 0": func() error { _, err := h.Store.Heartbeat(ctx, key, 0, now, time.Minute); return err },
		"an invalid key": func() error {
			_, err := h.Store.Heartbeat(ctx, ledger.InstanceKey{Run: key.Run, Task: "a#b"}, 1, now, 1)
			return err
		},
	} {
		want := ledger.ErrInvalidInput
		if name == "an invalid key" {
			want = ledger.ErrInvalidKey
		}
		if err := call(); !errors.Is(err, want) {
			t.Errorf("heartbeat with %s: %v, want %v", name, err, want)
		}
	}
}

// heartbeatOfAnOlderAttempt: after a retry the old attempt's heartbeat is
// stale, and a finished instance keeps no timer.
func heartbeatOfAnOlderAttempt(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("retry", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.ToQueued(t, key)
	h.Step(t, key, Started(1, "w1"), now)
	fail := Ev(statemodel.EvFailed, 1)
	fail.ErrorCategory = "boom"
	if res := h.Step(t, key, fail, now); res.Snapshot.State != statemodel.StateUpForRetry {
		t.Fatalf("failure: %s, want UP_FOR_RETRY", res.Snapshot.State)
	}
	now = h.Clock.Advance(time.Hour)
	h.Step(t, key, Ev(statemodel.EvRetryDue, 0), now)
	h.Step(t, key, Dispatch(2), now)
	h.Step(t, key, Started(2, "w2"), now)
	if _, err := h.Store.Heartbeat(ctx, key, 1, now, time.Minute); !errors.Is(err, ledger.ErrStaleAttempt) {
		t.Fatalf("heartbeat of attempt 1: %v, want stale attempt", err)
	}
	if res := h.Step(t, key, Succeeded(2), now); res.Snapshot.State != statemodel.StateSucceeded {
		t.Fatalf("success: %s", res.Snapshot.State)
	}
	if inst := h.MustInstance(t, key); !inst.TimerAt.IsZero() || inst.TimerKind != "" {
		t.Fatalf("terminal instance keeps a timer: %s %s", inst.TimerAt, inst.TimerKind)
	}
}
