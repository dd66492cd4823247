package workers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/statemodel"
)

// CategoryInvocationFailed is the error category of an attempt whose
// Lambda invocation failed for good (Lambda's on-failure record).
const CategoryInvocationFailed = "invocation_failed"

// invocationFailed applies Lambda's on-failure record of a lambda
// executor's invocation: confirmed evidence that the attempt's process is
// gone without a success. The record must carry the attempt's token and
// name the invocation the attempt was started as; anything else is refused
// as a forgery or a mix-up.
//
// The evidence decides a LOST attempt at once (retry or fail by policy,
// category invocation_failed; CANCELLED when a cancel was asked). An attempt
// still RUNNING or CANCELLING has stopped heartbeating: the record waits for
// its lease to end, or its cancel deadline (sent again to the events queue,
// delayed until then), and is applied once that has made it LOST. An attempt never
// claimed (QUEUED) is left to its queue timeout, and an attempt that has
// ended or been superseded needs nothing: the record is dropped.
func (w *Room) invocationFailed(ctx context.Context, f protocol.InvocationFailure, body string) error {
	ref := f.Ref()
	key := ledger.InstanceKey{Run: ref.Run, Task: ref.Task}
	inst, err := w.store.GetInstance(ctx, key)
	if errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("%w: invocation %s: %v", ErrBadMessage, f.RequestID, err)
	}
	if err != nil {
		return fmt.Errorf("invocation %s failed: %w", f.RequestID, err)
	}
	a, ok := inst.Snapshot.AttemptN(ref.Attempt)
	switch {
	case !ok:
		return fmt.Errorf("%w: invocation %s names attempt %s, which does not exist", ErrBadMessage, f.RequestID, ref)
	case !protocol.TokenMatches(f.Envelope.Token, a.TokenHash):
		return fmt.Errorf("%w: invocation %s: the token does not match attempt %s", ErrBadMessage, f.RequestID, ref)
	case a.Executor != jobspec.ExecutorLambda || a.ExecutorID != f.RequestID:
		return fmt.Errorf("%w: invocation %s: attempt %s was started as %s %q", ErrBadMessage, f.RequestID, ref, a.Executor, a.ExecutorID)
	}
	log := w.log.With("run_id", key.Run, "task", key.Task, "attempt", ref.Attempt, "request_id", f.RequestID)
	snap := inst.Snapshot
	if snap.Attempt != ref.Attempt || !a.EndedAt.IsZero() {
		log.InfoContext(ctx, "failed invocation of a finished attempt", "state", string(snap.State))
		return nil
	}
	switch snap.State {
	case statemodel.StateLost:
	case statemodel.StateRunning, statemodel.StateCancelling:
		// RUNNING becomes LOST at its lease's end, CANCELLING at its
		// cancel deadline.
		until := snap.Lease.ExpiresAt
		if snap.State == statemodel.StateCancelling {
			until = snap.Deadline
		}
		if w.k.Now().Before(until) {
			return w.holdInvocationFailure(ctx, key, body, until)
		}
		if err := w.k.ReconcileInstance(ctx, key); err != nil {
			return err
		}
		if inst, err = w.store.GetInstance(ctx, key); err != nil {
			return err
		}
		if inst.Snapshot.State != statemodel.StateLost || inst.Snapshot.Attempt != ref.Attempt {
			return nil
		}
	default:
		log.InfoContext(ctx, "failed invocation left to the attempt's timer", "state", string(snap.State))
		return nil
	}
	detail := map[string]string{
		"provider": jobspec.ExecutorLambda, "request_id": f.RequestID, "condition": f.Condition,
		"function_error": f.FunctionError, "invoke_count": strconv.Itoa(f.ApproximateInvokeCount),
	}
	if f.ErrorType != "" {
		detail["error_type"] = f.ErrorType
	}
	ev := statemodel.Event{
		ID: fmt.Sprintf("evidence:%d:invocation:%s", ref.Attempt, f.RequestID), Type: statemodel.EvEvidenceFailed,
		Actor: statemodel.ActorReconciler, Attempt: ref.Attempt, ErrorCategory: CategoryInvocationFailed, Evidence: detail,
		Reason: protocol.ClipReason(fmt.Sprintf("evidence from lambda: the invocation failed (%s): %s", f.Condition, f.ErrorMessage)),
	}
	res, err := w.store.TransitionFrom(ctx, inst, ev, w.k.Now(), w.k.Policy())
	if err != nil {
		if w.k.Transient(err) {
			return fmt.Errorf("invocation %s failed: %w", f.RequestID, err)
		}
		return nil // a late report or another record got there first
	}
	w.k.Follow(ctx, res)
	return nil
}

// holdInvocationFailure sends the record again, to arrive once until has
// passed (at most SQS's longest delay ahead; a later arrival holds it
// again).
func (w *Room) holdInvocationFailure(ctx context.Context, key ledger.InstanceKey, body string, until time.Time) error {
	if w.eventsQueueURL == "" {
		return fmt.Errorf("invocation failure of %s: the attempt's lease has not ended (no events queue to hold it in)", key)
	}
	delay := min(max(until.Sub(w.k.Now()), 0)+time.Second, queue.MaxDelay).Round(time.Second)
	if _, err := w.queue.SendDelayed(ctx, w.eventsQueueURL, body, nil, delay); err != nil {
		return fmt.Errorf("invocation failure of %s: hold until its lease ends: %w", key, err)
	}
	return nil
}
