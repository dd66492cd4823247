package scheduler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/signals"
	"github.com/runledger/runledger/statemodel"
)

// Verdict is what an evidence provider concluded about a LOST attempt.
type Verdict string

const (
	// VerdictUnknown: this provider cannot tell; ask the next, or wait.
	VerdictUnknown Verdict = "unknown"
	// VerdictSucceeded: confirmed success (an output-commit marker, an
	// executor that saw the process exit 0).
	VerdictSucceeded Verdict = "succeeded"
	// VerdictFailed: confirmed failure: the attempt's executor saw its
	// process end without a success. The process is gone, so the retry
	// policy decides at once; the attempt ends failed with the evidence's
	// ErrorCategory.
	VerdictFailed Verdict = "failed"
	// VerdictGone: the attempt's process is proven gone (its worker
	// restarted under a new boot id), but how the attempt ended is not
	// known. The retry policy decides at once; the attempt ends lost, so
	// its own success, still in a queue, wins until a newer attempt is
	// dispatched.
	VerdictGone Verdict = "gone"
	// VerdictSilent: nothing has been heard of the attempt's process since
	// its process lease ended (LeaseEndedAt, by the scheduler's clock).
	// Not proof: the process may be cut off and still running. It resolves
	// the attempt (lost) only once both that lease and the attempt's own
	// lease have ended plus the max clock skew.
	VerdictSilent Verdict = "silent"
	// VerdictNeverStarted: the work never began; resubmit without spending
	// retry budget.
	VerdictNeverStarted Verdict = "never_started"
	// VerdictRunning: still running (the executor or the worker's process
	// lease says so); keep waiting, the heartbeat may yet come back.
	VerdictRunning Verdict = "running"
)

// Evidence is one provider's finding.
type Evidence struct {
	Verdict Verdict
	// Detail is recorded on the transition as its evidence.
	Detail map[string]string
	// ErrorCategory (VerdictFailed) is the category the failure is
	// recorded with; default "error".
	ErrorCategory string
	// ExitCode (VerdictFailed) is the process's exit status when the
	// executor saw it; the attempt records it.
	ExitCode *int
	// RecheckAfter (VerdictRunning) asks again this long after, within
	// the evidence window, so that work which ends while LOST resolves the
	// attempt when it ends (an ECS task's exit), not at the window's end;
	// zero asks again only then.
	RecheckAfter time.Duration
	// LeaseEndedAt (VerdictSilent) is when the process's lease ended by
	// the scheduler's clock.
	LeaseEndedAt time.Time
}

// EvidenceProvider inspects one source of truth about a LOST attempt.
type EvidenceProvider interface {
	Name() string
	Check(ctx context.Context, inst ledger.Instance, attempt statemodel.AttemptRecord) (Evidence, error)
}

// reconcileInstance handles an instance whose reconciler timer may be due:
// lease expiry, queue timeout, cancel timeout, or LOST resolution.
// leaseMessage: called by a lease's delay message, armed at the claim for
// the lease's end then: a lease found extended by heartbeats gets the
// message of its new end, so one message follows a lease however often
// its worker beats.
func (s *Service) reconcileInstance(ctx context.Context, key ledger.InstanceKey, leaseMessage bool) error {
	inst, err := s.store.GetInstance(ctx, key)
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", key, err)
	}
	snap := inst.Snapshot
	now := s.now()
	var ev statemodel.Event
	switch snap.State {
	case statemodel.StateRunning:
		if snap.SignalAttempt() {
			if now.Before(snap.Deadline) {
				return nil
			}
			ev = signals.TimeoutEvent(snap)
			break
		}
		if now.Before(snap.Lease.ExpiresAt) {
			if !leaseMessage {
				return nil
			}
			if due, err := s.waitDue(ctx, snap.Lease.ExpiresAt); !due {
				// Extended: the message passes on to the lease's new
				// end, unless the index holds that (a far lease).
				delays{s}.armShort(ctx, inst)
				return err
			}
			now = s.now()
		}
		ev = statemodel.Event{ID: fmt.Sprintf("lease:%d:%d", snap.Attempt, snap.Lease.ExpiresAt.UnixNano()), Type: statemodel.EvLeaseExpired}
	case statemodel.StateQueued:
		if now.Before(snap.Deadline) {
			return nil
		}
		ev = statemodel.Event{ID: fmt.Sprintf("queue-timeout:%d", snap.Attempt), Type: statemodel.EvQueueTimeout}
	case statemodel.StateCancelling:
		if now.Before(snap.Deadline) {
			return nil
		}
		ev = statemodel.Event{ID: fmt.Sprintf("cancel-timeout:%d:%d", snap.Attempt, snap.Deadline.UnixNano()), Type: statemodel.EvCancelTimeout}
	case statemodel.StateLost:
		return s.resolveLost(ctx, inst)
	default:
		return nil
	}
	ev.Actor = statemodel.ActorReconciler
	ev.Attempt = snap.Attempt
	res, err := s.store.TransitionFrom(ctx, inst, ev, now, s.policy())
	if err != nil {
		if transient(err) {
			return fmt.Errorf("reconcile %s: %w", key, err)
		}
		return nil // a heartbeat or another reconciler got there first
	}
	s.follow(ctx, res)
	if res.Outcome == statemodel.Applied && res.Snapshot.State == statemodel.StateLost {
		inst = res.Instance
		if ev.Type == statemodel.EvCancelTimeout {
			// The work did not stop on its own: ask its executor to.
			if cur, ok := inst.Snapshot.Current(); ok {
				s.executors.stop(ctx, inst, cur)
			}
		}
		return s.resolveLost(ctx, inst) // a restarted worker need not wait out the window
	}
	return nil
}

// resolveLost asks the evidence providers about a LOST instance's current
// attempt (its executor's, for an attempt an Executor started; else the
// configured ones). The first decisive verdict resolves it; with none, the evidence
// window's end lets the retry policy decide with error category lost.
//
// Fencing by time: unless a verdict proves the attempt's process gone (or
// decides it), the attempt is resolved only after its lease's end plus the
// max clock skew. Its worker stops the handler before the lease ends (by
// its own clock, which is within the skew of ours), so the retry this may
// lead to never runs beside it. Every retry of a silent attempt comes out of
// this function, so its retry_at is never earlier than that.
func (s *Service) resolveLost(ctx context.Context, inst ledger.Instance) error {
	snap := inst.Snapshot
	cur, ok := snap.Current()
	if !ok {
		return nil
	}
	now := s.now()
	fenceEnd := snap.Lease.ExpiresAt.Add(s.cfg.MaxClockSkew)
	var recheck time.Time // when a verdict held back by the fence may count
	var ev statemodel.Event
	for _, p := range s.executors.evidenceFor(inst, cur) {
		found, err := p.Check(ctx, inst, cur)
		if err != nil {
			s.log.WarnContext(ctx, "evidence provider", "provider", p.Name(), "run_id", inst.Key.Run, "task", inst.Key.Task, "error", err.Error())
			continue
		}
		typ, category := statemodel.EventType(""), statemodel.CategoryLost
		switch found.Verdict {
		case VerdictSucceeded:
			typ = statemodel.EvEvidenceOK
		case VerdictFailed:
			typ, category = statemodel.EvEvidenceFailed, found.ErrorCategory
			if category == "" {
				category = "error"
			}
		case VerdictGone:
			typ = statemodel.EvEvidenceFailed
		case VerdictSilent:
			if counts := latest(fenceEnd, found.LeaseEndedAt.Add(s.cfg.MaxClockSkew)); now.Before(counts) {
				recheck = earliest(recheck, counts)
				continue
			}
			typ = statemodel.EvEvidenceFailed
		case VerdictNeverStarted:
			typ = statemodel.EvNeverStarted
		case VerdictRunning:
			if now.Before(snap.Deadline) {
				// Alive: wait for its heartbeat, its end, or the window.
				if found.RecheckAfter > 0 {
					s.recheckLost(ctx, inst.Key, earliest(snap.Deadline, now.Add(found.RecheckAfter)))
				}
				return nil
			}
			continue // the window is over: "still running" no longer holds it
		default:
			continue
		}
		detail := map[string]string{"provider": p.Name()}
		for k, v := range found.Detail {
			detail[k] = v
		}
		ev = statemodel.Event{ID: fmt.Sprintf("evidence:%d:%s:%d", cur.N, found.Verdict, snap.Deadline.UnixNano()), Type: typ, Evidence: detail,
			ErrorCategory: category, Reason: "evidence from " + p.Name()}
		if found.Verdict == VerdictFailed {
			ev.ExitCode = found.ExitCode
		}
		break
	}
	if ev.Type == "" {
		if now.Before(snap.Deadline) {
			s.recheckLost(ctx, inst.Key, recheck)
			return nil
		}
		if now.Before(fenceEnd) {
			// The window ended before the attempt's lease plus the skew:
			// its worker may still be finishing by its own clock.
			s.recheckLost(ctx, inst.Key, fenceEnd)
			return nil
		}
		ev = statemodel.Event{ID: fmt.Sprintf("window:%d:%d", cur.N, snap.Deadline.UnixNano()), Type: statemodel.EvWindowExpired,
			Reason: "evidence window ended with no evidence"}
	}
	ev.Actor = statemodel.ActorReconciler
	ev.Attempt = cur.N
	res, err := s.store.TransitionFrom(ctx, inst, ev, now, s.policy())
	if err != nil {
		if transient(err) {
			return fmt.Errorf("resolve lost %s: %w", inst.Key, err)
		}
		return nil
	}
	s.follow(ctx, res)
	return nil
}

// recheckLost arms a precise timer to look at a LOST instance again at
// at (zero: nothing to wait for), rounded up to whole seconds so that it
// never fires before at. The evidence timer in the index is the backstop.
func (s *Service) recheckLost(ctx context.Context, key ledger.InstanceKey, at time.Time) {
	if at.IsZero() {
		return
	}
	now := s.now()
	wait := at.Sub(now)
	if rest := wait % time.Second; rest > 0 {
		wait += time.Second - rest
	}
	delays{s}.arm(ctx, key, now.Add(wait))
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// WorkerLeaseEvidence reads the worker's per-process lease (the newest
// boot's, see store.PutWorkerLease):
//   - a newer boot of the attempt's worker whose lease proves an attempt it
//     claimed: the process that ran the attempt is gone (VerdictGone),
//     retried by policy at once; how the attempt ended is unknown, so its
//     own success may still win;
//   - a live lease of the attempt's boot that lists the attempt: it still
//     runs (VerdictRunning);
//
// A stored lease lists only the attempts it proved (workers.Room.HandleMessage):
// a lease anyone could have sent proves neither a restart nor a running
// attempt.
//   - a lease of the attempt's boot that has ended by the scheduler's clock
//     (when it was received plus its lifetime): VerdictSilent, which counts
//     only after the max clock skew (resolveLost).
//
// Boot ids are the worker SDK's ULIDs, whose time part is the boot's start
// (protocol.BootStart): a boot id of another form cannot be ordered, and then
// only the lease's end can tell.
type WorkerLeaseEvidence struct {
	Store WorkerLeases
	Now   func() time.Time
}

func (WorkerLeaseEvidence) Name() string { return "worker_lease" }

// SplitWorkerID splits "<name>@<boot id>".
func SplitWorkerID(id string) (name, boot string) {
	name, boot, _ = strings.Cut(id, "@")
	return name, boot
}

func (w WorkerLeaseEvidence) Check(ctx context.Context, inst ledger.Instance, a statemodel.AttemptRecord) (Evidence, error) {
	name, boot := SplitWorkerID(a.WorkerID)
	if name == "" || boot == "" {
		return Evidence{Verdict: VerdictUnknown}, nil
	}
	lease, err := w.Store.GetWorkerLease(ctx, name)
	if err != nil {
		return Evidence{Verdict: VerdictUnknown}, err
	}
	detail := map[string]string{"worker": name, "attempt_boot_id": boot, "lease_boot_id": lease.BootID,
		"lease_ends_at": protocol.FormatTime(lease.EndsAt)}
	switch {
	case lease.BootID == "":
		return Evidence{Verdict: VerdictUnknown}, nil
	case lease.BootID != boot:
		started, ok := protocol.BootStart(boot)
		if !ok || !lease.BootStartedAt.After(started) {
			// An older boot, or one we cannot order: the attempt's own
			// boot's leases have not arrived yet.
			return Evidence{Verdict: VerdictUnknown}, nil
		}
		if len(lease.Running) == 0 {
			// A newer boot that proves no attempt of its own may be anyone
			// who can send to the events queue: no proof of a restart.
			return Evidence{Verdict: VerdictUnknown}, nil
		}
		detail["finding"] = "worker restarted"
		return Evidence{Verdict: VerdictGone, Detail: detail}, nil
	case !w.Now().Before(lease.EndsAt):
		detail["finding"] = "worker process lease ended"
		return Evidence{Verdict: VerdictSilent, Detail: detail, LeaseEndedAt: lease.EndsAt}, nil
	}
	for _, r := range lease.Running {
		if r.Run == inst.Key.Run && r.Task == inst.Key.Task && r.Attempt == a.N {
			return Evidence{Verdict: VerdictRunning, Detail: detail}, nil
		}
	}
	return Evidence{Verdict: VerdictUnknown}, nil
}
