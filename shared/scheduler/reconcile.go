package scheduler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/store"
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
	// VerdictFailed: confirmed failure: the process is gone without a
	// success (the worker restarted or its lease ended).
	VerdictFailed Verdict = "failed"
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
}

// EvidenceProvider inspects one source of truth about a LOST attempt.
type EvidenceProvider interface {
	Name() string
	Check(ctx context.Context, inst store.Instance, attempt statemodel.AttemptRecord) (Evidence, error)
}

// reconcileInstance handles an instance whose reconciler timer may be due:
// lease expiry, queue timeout, cancel timeout, or LOST resolution.
func (s *Service) reconcileInstance(ctx context.Context, key store.InstanceKey) error {
	inst, err := s.store.GetInstance(ctx, key)
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", key, err)
	}
	snap := inst.Snapshot
	now := s.now()
	var ev statemodel.Event
	switch snap.State {
	case statemodel.StateRunning:
		if now.Before(snap.Lease.ExpiresAt) {
			return nil
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
	res, err := s.store.Transition(ctx, key, ev, now, s.policy())
	if err != nil {
		if transient(err) {
			return fmt.Errorf("reconcile %s: %w", key, err)
		}
		return nil // a heartbeat or another reconciler got there first
	}
	s.follow(ctx, key, res)
	if res.Outcome == statemodel.Applied && res.Snapshot.State == statemodel.StateLost {
		inst.Snapshot = res.Snapshot
		return s.resolveLost(ctx, inst) // a restarted worker need not wait out the window
	}
	return nil
}

// resolveLost asks the evidence providers about a LOST instance's current
// attempt. The first decisive verdict resolves it; with none, the evidence
// window's end lets the retry policy decide with error category lost.
func (s *Service) resolveLost(ctx context.Context, inst store.Instance) error {
	snap := inst.Snapshot
	cur, ok := snap.Current()
	if !ok {
		return nil
	}
	now := s.now()
	var ev statemodel.Event
	for _, p := range s.cfg.Evidence {
		found, err := p.Check(ctx, inst, cur)
		if err != nil {
			s.log.WarnContext(ctx, "evidence provider", "provider", p.Name(), "run_id", inst.Key.Run, "task", inst.Key.Task, "error", err.Error())
			continue
		}
		var typ statemodel.EventType
		switch found.Verdict {
		case VerdictSucceeded:
			typ = statemodel.EvEvidenceOK
		case VerdictFailed:
			typ = statemodel.EvEvidenceFailed
		case VerdictNeverStarted:
			typ = statemodel.EvNeverStarted
		case VerdictRunning:
			if now.Before(snap.Deadline) {
				return nil // alive: wait for its heartbeat, or the window
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
			ErrorCategory: statemodel.CategoryLost, Reason: "evidence from " + p.Name()}
		break
	}
	if ev.Type == "" {
		if now.Before(snap.Deadline) {
			return nil
		}
		ev = statemodel.Event{ID: fmt.Sprintf("window:%d:%d", cur.N, snap.Deadline.UnixNano()), Type: statemodel.EvWindowExpired,
			Reason: "evidence window ended with no evidence"}
	}
	ev.Actor = statemodel.ActorReconciler
	ev.Attempt = cur.N
	res, err := s.store.Transition(ctx, inst.Key, ev, now, s.policy())
	if err != nil {
		if transient(err) {
			return fmt.Errorf("resolve lost %s: %w", inst.Key, err)
		}
		return nil
	}
	s.follow(ctx, inst.Key, res)
	return nil
}

// WorkerLeaseEvidence reads the worker's per-process lease: a worker whose
// process restarted (another boot id) or whose lease ended is gone, and so
// is its attempt: confirmed failure, retried by policy without waiting out
// the evidence window. A live lease that lists the attempt means it still
// runs.
type WorkerLeaseEvidence struct {
	Store *store.Store
	Now   func() time.Time
}

func (WorkerLeaseEvidence) Name() string { return "worker_lease" }

// SplitWorkerID splits "<name>@<boot id>".
func SplitWorkerID(id string) (name, boot string) {
	name, boot, _ = strings.Cut(id, "@")
	return name, boot
}

func (w WorkerLeaseEvidence) Check(ctx context.Context, inst store.Instance, a statemodel.AttemptRecord) (Evidence, error) {
	name, boot := SplitWorkerID(a.WorkerID)
	if name == "" || boot == "" {
		return Evidence{Verdict: VerdictUnknown}, nil
	}
	lease, err := w.Store.GetWorkerLease(ctx, name)
	if err != nil {
		return Evidence{Verdict: VerdictUnknown}, err
	}
	detail := map[string]string{"worker": name, "attempt_boot_id": boot, "lease_boot_id": lease.BootID,
		"lease_expires_at": FormatTime(lease.ExpiresAt)}
	switch {
	case lease.BootID == "":
		return Evidence{Verdict: VerdictUnknown}, nil
	case lease.BootID != boot:
		detail["finding"] = "worker restarted"
		return Evidence{Verdict: VerdictFailed, Detail: detail}, nil
	case !lease.ExpiresAt.After(w.Now()):
		detail["finding"] = "worker process lease ended"
		return Evidence{Verdict: VerdictFailed, Detail: detail}, nil
	}
	for _, r := range lease.Running {
		if r.Run == inst.Key.Run && r.Task == inst.Key.Task && r.Attempt == a.N {
			return Evidence{Verdict: VerdictRunning, Detail: detail}, nil
		}
	}
	return Evidence{Verdict: VerdictUnknown}, nil
}
