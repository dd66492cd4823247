package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// operate applies one operator event to one task and follows its effects,
// and stores the run's state after it, even unchanged (touch, see
// derivation). A refused
// event is statemodel.ErrIllegalTransition naming the state it met.
func (s *Service) operate(ctx context.Context, key ledger.InstanceKey, ev statemodel.Event) (ledger.Result, error) {
	res, err := s.applyOperator(ctx, key, ev)
	if err == nil && res.Outcome == statemodel.Applied && !res.Snapshot.State.Terminal() {
		// Pause, resume, retry and cancel-in-progress change the run's
		// derived state too.
		if err := s.advanceRun(ctx, key.Run, true); err != nil {
			s.log.WarnContext(ctx, "advance run", "run_id", key.Run, "error", err.Error())
		}
	}
	return res, err
}

// applyOperator applies one operator event to one task and follows its
// effects, leaving the run to the caller.
func (s *Service) applyOperator(ctx context.Context, key ledger.InstanceKey, ev statemodel.Event) (ledger.Result, error) {
	res, err := s.writeOperator(ctx, key, ev)
	if err == nil {
		s.applied(ctx, res)
		if res.Outcome == statemodel.Applied {
			s.perform(ctx, holdDispatches(ctx, s.flow, key.Run, effectsOf(res))...)
		}
	}
	return res, err
}

// writeOperator writes one operator event to one task, leaving its effects
// to the caller.
func (s *Service) writeOperator(ctx context.Context, key ledger.InstanceKey, ev statemodel.Event) (ledger.Result, error) {
	ev.Actor = statemodel.ActorOperator
	if ev.ID == "" {
		ev.ID = "op:" + s.NewID()
	}
	res, err := s.store.Transition(ctx, key, ev, s.now(), s.policy())
	if errors.Is(err, ledger.ErrNotFound) {
		return res, fmt.Errorf("%s %s: %w", ev.Type, key, ledger.ErrNotFound)
	}
	if err != nil {
		if transient(err) {
			return res, err
		}
		return res, fmt.Errorf("%w: %v", statemodel.ErrIllegalTransition, err)
	}
	return res, nil
}

// CancelTask requests a task's cancel: not yet running, it is CANCELLED at
// once (a later claim is refused); running or lost, it is CANCELLING until
// the worker acknowledges or the cancel timeout ends.
func (s *Service) CancelTask(ctx context.Context, key ledger.InstanceKey, reason string) error {
	_, err := s.operate(ctx, key, statemodel.Event{Type: statemodel.EvCancelRequested, Reason: reason})
	return err
}

// CancelRun cancels every unfinished task of a run, CREATED ones included,
// so that nothing downstream becomes UPSTREAM_FAILED and the run ends
// CANCELLED.
func (s *Service) CancelRun(ctx context.Context, runID, reason string) error {
	return s.eachTask(ctx, runID, nil, func(t ledger.TaskView) (statemodel.Event, bool) {
		st := t.Instance.Snapshot.State
		return statemodel.Event{Type: statemodel.EvCancelRequested, Reason: reason},
			!st.Terminal() && st != statemodel.StateCancelling
	})
}

// PauseRun holds every waiting task (CREATED, SCHEDULED, UP_FOR_RETRY). A
// run waiting in a limiter keeps its place there and is passed over until
// resumed: its waiting item is marked paused before its tasks, so no
// hand-off admits it in between to hold the room while it runs nothing.
func (s *Service) PauseRun(ctx context.Context, runID, reason string) error {
	hold := func(v ledger.RunView) error { return s.flow.PauseInLimiters(ctx, v, true) }
	return s.eachTask(ctx, runID, hold, func(t ledger.TaskView) (statemodel.Event, bool) {
		_, ok := statemodel.Lookup(t.Instance.Snapshot.State, statemodel.EvPause)
		return statemodel.Event{Type: statemodel.EvPause, Reason: reason}, ok
	})
}

// ResumeRun returns every PAUSED task to where it was. A run paused while
// waiting in a limiter takes its place in the queue again first; the
// run's advance after the tasks' resume admits it when there is room.
func (s *Service) ResumeRun(ctx context.Context, runID, reason string) error {
	release := func(v ledger.RunView) error { return s.flow.PauseInLimiters(ctx, v, false) }
	return s.eachTask(ctx, runID, release, func(t ledger.TaskView) (statemodel.Event, bool) {
		return statemodel.Event{Type: statemodel.EvResume, Reason: reason}, t.Instance.Snapshot.State == statemodel.StatePaused
	})
}

// eachTask applies the chosen operator event to every task it picks; the
// run must exist and at least one task must be picked. first, when not
// nil, runs on the run as read before any task is written.
func (s *Service) eachTask(ctx context.Context, runID string, first func(ledger.RunView) error, pick func(ledger.TaskView) (statemodel.Event, bool)) error {
	view, err := s.store.ReadRun(ctx, runID)
	if errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("run %s: %w", runID, ledger.ErrNotFound)
	}
	if err != nil {
		return err
	}
	picked := 0
	for _, t := range view.Tasks {
		if _, ok := pick(t); ok {
			picked++
		}
	}
	if picked == 0 {
		return fmt.Errorf("%w: no task of run %s can take this action", statemodel.ErrIllegalTransition, runID)
	}
	if first != nil {
		if err := first(view); err != nil {
			return err
		}
	}
	var errs []error
	for _, t := range view.Tasks {
		ev, ok := pick(t)
		if !ok {
			continue
		}
		// The run is stored once, after every task is written.
		if _, err := s.applyOperator(ctx, t.Instance.Key, ev); err != nil && !errors.Is(err, statemodel.ErrIllegalTransition) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return s.advanceRun(ctx, runID, true)
}

// Retry is an operator's retry of one FAILED or CANCELLED task.
type Retry struct {
	Operator, Reason string
	// Downstream also returns every task below the retried one
	// (transitively) that ended UPSTREAM_FAILED or SKIPPED to CREATED, to
	// be evaluated again; tasks that ran keep their outcome.
	Downstream bool
}

// RetryTask gives a FAILED or CANCELLED task a new attempt with a fresh
// retry budget (the same parameters; changed parameters make a new run),
// and with r.Downstream clears the tasks below it first. The run leaves
// its terminal state as the task is scheduled.
func (s *Service) RetryTask(ctx context.Context, key ledger.InstanceKey, r Retry) error {
	retry := statemodel.Event{Type: statemodel.EvManualRetry, Operator: r.Operator, Reason: r.Reason}
	if r.Downstream {
		if err := s.clearDownstream(ctx, key, r); err != nil {
			return err
		}
	}
	_, err := s.flow.Retry(ctx, key, retry)
	if err == nil {
		err = s.maps.Reopen(ctx, key, retry)
	}
	if err != nil && r.Downstream && !errors.Is(err, ledger.ErrNotFound) {
		// The retry lost a race after the clears: whatever the task is
		// now decides the cleared tasks again.
		if aerr := s.advanceRun(ctx, key.Run, true); aerr != nil {
			s.log.WarnContext(ctx, "advance run", "run_id", key.Run, "error", aerr.Error())
		}
	}
	return err
}

// clearDownstream returns the tasks below key that ended without running
// to CREATED, after checking that key itself can be retried (a refusal
// writes nothing). The clears come before the retry: until the retry
// lands, nothing re-evaluates them (their backstop timer is a full
// DepsRecheck away), and a crash between the two leaves the task retryable
// with its downstream cleared, so the operator's repeat completes it.
func (s *Service) clearDownstream(ctx context.Context, key ledger.InstanceKey, r Retry) error {
	view, err := s.store.ReadRun(ctx, key.Run)
	if errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("run %s: %w", key.Run, ledger.ErrNotFound)
	}
	if err != nil {
		return err
	}
	byID := make(map[string]ledger.TaskView, len(view.Tasks))
	for _, t := range view.Tasks {
		byID[t.Instance.Key.Task] = t
	}
	task, ok := byID[key.Task]
	if !ok {
		return fmt.Errorf("task %s: %w", key, ledger.ErrNotFound)
	}
	if st := task.Instance.Snapshot.State; !canTake(st, statemodel.EvManualRetry) {
		return fmt.Errorf("%w: task %s is %s; only a FAILED or CANCELLED task can be retried", statemodel.ErrIllegalTransition, key.Task, st)
	}
	for _, id := range statemodel.Downstream(view.Nodes(), key.Task) {
		t := byID[id]
		if !canTake(t.Instance.Snapshot.State, statemodel.EvOverrideCleared) {
			continue // it ran, or is running: it keeps its outcome
		}
		ev := statemodel.Event{ID: "op:" + s.NewID(), Type: statemodel.EvOverrideCleared, Actor: statemodel.ActorOperator, Operator: r.Operator, Reason: r.Reason}
		res, err := s.store.TransitionFrom(ctx, t.Instance, ev, s.now(), s.policy())
		if err != nil {
			if transient(err) {
				return err
			}
			continue // moved by someone else since the read
		}
		s.follow(ctx, res)
	}
	return nil
}

// canTake reports whether the state machine has a row for ev in st.
func canTake(st statemodel.InstanceState, ev statemodel.EventType) bool {
	_, ok := statemodel.Lookup(st, ev)
	return ok
}

// MarkTask is the operator override, the one exit from a terminal state:
// it records operator, reason and scope and shows in history as an
// override.
func (s *Service) MarkTask(ctx context.Context, key ledger.InstanceKey, succeeded bool, operator, reason string) error {
	typ := statemodel.EvOverrideFailed
	if succeeded {
		typ = statemodel.EvOverrideSucceeded
	}
	_, err := s.operate(ctx, key, statemodel.Event{Type: typ, Operator: operator, Reason: reason})
	if err == nil {
		err = s.advanceRun(ctx, key.Run, true)
	}
	return err
}
