// Package signals is the signal tasks' room of the scheduler: a signal
// task's attempt starts nothing and waits until an outside caller (the
// operator, or the holder of the attempt's token) settles it, or its run
// timeout passes. What a signal does to its instance is decided by
// statemodel and written by the ledger; what follows is the kernel's
// (Kernel).
package signals

import (
	"context"
	"errors"
	"fmt"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// StartEvent starts signal attempt n, in the write that records its
// dispatch.
func StartEvent(n int) statemodel.Event {
	return statemodel.Event{ID: fmt.Sprintf("signal-start:%d", n), Type: statemodel.EvSignalRequested,
		Actor: statemodel.ActorScheduler, Attempt: n}
}

// TimeoutEvent is the reconciler's event for a waiting signal attempt
// whose run timeout passed.
func TimeoutEvent(snap statemodel.Snapshot) statemodel.Event {
	return statemodel.Event{ID: fmt.Sprintf("signal-timeout:%d", snap.Attempt), Type: statemodel.EvSignalTimeout,
		Reason: "no signal within the run timeout"}
}

// Announce announces a started signal attempt: the
// task.signal_requested notice carries the attempt's token, the one
// credential (besides the API key) its signal accepts.
func (r *Room) Announce(ctx context.Context, inst ledger.Instance, n int, token string) {
	r.k.Notice(ctx, protocol.Notice{Type: protocol.NoticeTaskSignalRequested, Job: inst.Job, Run: inst.Key.Run,
		Task: inst.Key.Task, Attempt: n, State: string(statemodel.StateRunning), Token: token,
		Reason: fmt.Sprintf("waiting for a signal until %s", protocol.FormatTime(inst.Snapshot.Deadline))})
}

// Auth is who sends a signal: the operator (the API key), or the
// holder of one attempt's token.
type Auth struct {
	// Token is the bearer attempt token; "" when the operator signals.
	Token string
}

// SignalTask settles a waiting signal task's attempt: succeeded, or
// failed (the retry policy decides what follows). The transition's actor
// is the operator and its evidence holds who decided (by).
//
// An unknown task is ledger.ErrNotFound to the operator, and protocol.ErrInvalidAttemptToken to a token. The
// operator's signal concerns the current attempt. A token's concerns
// the attempt it was derived for: a token that matches no held signal
// attempt is protocol.ErrInvalidAttemptToken; an older attempt's is
// recorded as a late event on it and answered protocol.ErrStaleAttempt.
// The same event id again answers nil with nothing written (the first
// outcome stands). A task that is not a signal task waiting for its
// signal is statemodel.ErrIllegalTransition.
func (r *Room) SignalTask(ctx context.Context, key ledger.InstanceKey, req protocol.SignalRequest, auth Auth) error {
	if err := req.Validate(); err != nil {
		return err
	}
	inst, err := r.store.GetInstance(ctx, key)
	if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidKey) {
		if auth.Token != "" {
			return protocol.ErrInvalidAttemptToken
		}
		return fmt.Errorf("signal %s: %w", key, ledger.ErrNotFound)
	}
	if err != nil {
		return err
	}
	n := inst.Snapshot.Attempt
	if auth.Token != "" {
		if n, err = r.signalAttemptOf(ctx, inst, auth.Token); err != nil {
			return err
		}
	}
	ev := signalEvent(req, n, auth, r.k.NewID)
	res, err := r.store.TransitionFrom(ctx, inst, ev, r.k.Now(), r.k.Policy())
	if err != nil {
		if r.k.Transient(err) {
			return err
		}
		return fmt.Errorf("%w: task %s is %s, not a signal task waiting for its signal: %v",
			statemodel.ErrIllegalTransition, key, inst.Snapshot.State, err)
	}
	switch res.Outcome {
	case statemodel.Stale:
		return protocol.ErrStaleAttempt
	case statemodel.Applied:
		r.k.Follow(ctx, res)
	}
	return nil
}

// signalAttemptOf is the signal attempt whose token token is: one the
// instance holds, else an older one from its attempt item (a retry's
// former attempt, whose late signal is recorded and answered stale).
func (r *Room) signalAttemptOf(ctx context.Context, inst ledger.Instance, token string) (int, error) {
	held := map[int]bool{}
	for _, a := range inst.Snapshot.Attempts {
		held[a.N] = true
		if a.Signal() && protocol.TokenMatches(token, a.TokenHash) {
			return a.N, nil
		}
	}
	for n := inst.Snapshot.Attempt - 1; n >= 1; n-- {
		if held[n] {
			continue
		}
		a, err := r.store.GetAttempt(ctx, inst.Key, n)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			continue
		case err != nil:
			return 0, err
		}
		if a.Signal() && protocol.TokenMatches(token, a.TokenHash) {
			return n, nil
		}
	}
	return 0, protocol.ErrInvalidAttemptToken
}

// signalEvent is the event of a signal for attempt n. Its id is the
// client's event id (one per task, whichever attempt it names, so a
// repeated signal is a duplicate even after a retry), else a fresh one.
func signalEvent(req protocol.SignalRequest, n int, auth Auth, newID func() string) statemodel.Event {
	typ := statemodel.EvSignalSucceeded
	if req.Outcome == protocol.SignalFailed {
		typ = statemodel.EvSignalFailed
	}
	id := req.EventID
	if id == "" {
		id = newID()
	}
	via := "api_key"
	if auth.Token != "" {
		via = "attempt_token"
	}
	return statemodel.Event{
		ID: "signal:" + id, Type: typ, Actor: statemodel.ActorOperator, Attempt: n,
		Reason: req.Reason, Operator: req.By, OutputRef: req.OutputRef, Output: protocol.CompactOutput(req.Output),
		Evidence: map[string]string{"by": req.By, "authorized_by": via, "outcome": req.Outcome},
	}
}
