package workers

import (
	"context"
	"errors"
	"fmt"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// HandleMessage applies a worker's message from the events queue, m as
// protocol.DecodeEvent read it from body: a process lease, an executor's
// failed invocation, or a completion (a timer is the kernel's). A message
// that can never be applied (a completion the protocol refuses, a lease
// from the future) is ErrBadMessage, dropped rather than redelivered.
func (w *Room) HandleMessage(ctx context.Context, m protocol.Event, body string) error {
	switch {
	case m.Lease != nil:
		lease, err := w.workerLease(ctx, *m.Lease)
		if err != nil || len(lease.Running) == 0 {
			return err
		}
		return w.store.PutWorkerLease(ctx, lease)
	case m.InvocationFailure != nil:
		return w.invocationFailed(ctx, *m.InvocationFailure, body)
	}
	_, err := w.Complete(ctx, *m.Completion, m.Completion.Token)
	if errors.Is(err, ErrInvalidCompletion) {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if errors.Is(err, protocol.ErrStaleAttempt) || errors.Is(err, protocol.ErrAlreadyClaimed) || errors.Is(err, statemodel.ErrIllegalTransition) || errors.Is(err, protocol.ErrInvalidAttemptToken) {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	return err
}

// workerLease is the stored form of a lease message, or ErrBadMessage
// for a lease whose boot starts later than the scheduler's now plus the
// max clock skew: no real process started in the future, and such a boot
// would pass for the newest of its name (store.PutWorkerLease orders boots
// by their start) and lock the real one's leases out.
//
// Its end by the scheduler's clock is when it arrived plus the lifetime
// the worker gave it (expires_at less sent_at, both by the worker's clock),
// so the worker's clock never decides when its lease ends here; a lease
// without sent_at lives until its expires_at.
//
// It keeps only the listed attempts the lease proves (leaseProves): anyone
// who may send to the events queue can send a lease, and only the holder
// of an attempt's token can prove it runs that attempt. A lease that
// proves none is not stored at all (HandleMessage): it could be anyone's,
// and stored it would replace the boot's last proven lease, or with a
// huge seq lock out the boot's later ones. The store also refuses a seq
// too far past the last proven one (ledger.MaxLeaseSeqJump), so even the
// holder of one token cannot.
func (w *Room) workerLease(ctx context.Context, l protocol.Lease) (ledger.WorkerLease, error) {
	received := w.k.Now()
	started, _ := protocol.BootStart(l.BootID)
	if limit := received.Add(w.maxClockSkew); started.After(limit) {
		return ledger.WorkerLease{}, fmt.Errorf("%w: lease of %s: its boot starts at %s, after now plus the max clock skew (%s)",
			ErrBadMessage, l.WorkerID(), protocol.FormatTime(started), protocol.FormatTime(limit))
	}
	lifetime := l.ExpiresAt.Sub(received)
	if !l.SentAt.IsZero() {
		lifetime = l.ExpiresAt.Sub(l.SentAt)
	}
	lease := ledger.WorkerLease{Name: l.Worker, BootID: l.BootID, BootStartedAt: started, ExpiresAt: l.ExpiresAt,
		EndsAt: received.Add(max(lifetime, 0)), UpdatedAt: received, Seq: l.Seq}
	for _, r := range l.Running {
		proven, err := w.leaseProves(ctx, l, r)
		if err != nil {
			return ledger.WorkerLease{}, fmt.Errorf("lease of %s: %w", l.WorkerID(), err)
		}
		if !proven {
			w.log.WarnContext(ctx, "lease lists an attempt it does not prove; not counted", "worker_id", l.WorkerID(),
				"run_id", r.Run, "task", r.Task, "attempt", r.Attempt)
			continue
		}
		lease.Running = append(lease.Running, ledger.AttemptKey{Run: r.Run, Task: r.Task, Attempt: r.Attempt})
	}
	return lease, nil
}

// leaseProves reports whether lease l proves that its process runs
// attempt r: the attempt, as the instance holds it, was claimed by the
// lease's worker id (name and boot), and r's proof checks against the
// attempt's stored token hash (protocol.LeaseProof). An attempt the
// instance no longer holds inline (an older one, never the one evidence is
// asked about) or an unknown one proves nothing.
func (w *Room) leaseProves(ctx context.Context, l protocol.Lease, r protocol.LeasedAttempt) (bool, error) {
	if r.Proof == "" || r.Validate() != nil {
		return false, nil
	}
	inst, err := w.store.GetInstance(ctx, instanceKey(r.AttemptRef))
	switch {
	case errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidKey):
		return false, nil
	case err != nil:
		return false, err
	}
	a, ok := inst.Snapshot.AttemptN(r.Attempt)
	return ok && a.WorkerID == l.WorkerID() && protocol.CheckLeaseProof(a.TokenHash, l, r.AttemptRef, r.Proof), nil
}
