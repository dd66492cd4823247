package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// ErrNotFound: the run or task does not exist.
var ErrNotFound = errors.New("not found")

// operate applies one operator event to one task and follows its effects.
// A refused event is ErrIllegalTransition naming the state it met.
func (s *Service) operate(ctx context.Context, key store.InstanceKey, ev statemodel.Event) (store.Result, error) {
	ev.Actor = statemodel.ActorOperator
	if ev.ID == "" {
		ev.ID = "op:" + s.NewID()
	}
	res, err := s.store.Transition(ctx, key, ev, s.now(), s.policy())
	if errors.Is(err, store.ErrNotFound) {
		return res, fmt.Errorf("%s %s: %w", ev.Type, key, ErrNotFound)
	}
	if err != nil {
		if transient(err) {
			return res, err
		}
		return res, fmt.Errorf("%w: %v", ErrIllegalTransition, err)
	}
	s.follow(ctx, res)
	if res.Outcome == statemodel.Applied && !res.Snapshot.State.Terminal() {
		// Pause, resume, retry and cancel-in-progress change the run's
		// derived state too.
		if err := s.AdvanceRun(ctx, key.Run); err != nil {
			s.log.WarnContext(ctx, "advance run", "run_id", key.Run, "error", err.Error())
		}
	}
	return res, nil
}

// CancelTask requests a task's cancel: not yet running, it is CANCELLED at
// once (a later claim is refused); running or lost, it is CANCELLING until
// the worker acknowledges or the cancel timeout ends.
func (s *Service) CancelTask(ctx context.Context, key store.InstanceKey, reason string) error {
	_, err := s.operate(ctx, key, statemodel.Event{Type: statemodel.EvCancelRequested, Reason: reason})
	return err
}

// CancelRun cancels every unfinished task of a run, CREATED ones included,
// so that nothing downstream becomes UPSTREAM_FAILED and the run ends
// CANCELLED.
func (s *Service) CancelRun(ctx context.Context, runID, reason string) error {
	return s.eachTask(ctx, runID, func(t store.TaskView) (statemodel.Event, bool) {
		st := t.Instance.Snapshot.State
		return statemodel.Event{Type: statemodel.EvCancelRequested, Reason: reason},
			!st.Terminal() && st != statemodel.StateCancelling
	})
}

// PauseRun holds every waiting task (CREATED, SCHEDULED, UP_FOR_RETRY).
func (s *Service) PauseRun(ctx context.Context, runID, reason string) error {
	return s.eachTask(ctx, runID, func(t store.TaskView) (statemodel.Event, bool) {
		_, ok := statemodel.Lookup(t.Instance.Snapshot.State, statemodel.EvPause)
		return statemodel.Event{Type: statemodel.EvPause, Reason: reason}, ok
	})
}

// ResumeRun returns every PAUSED task to where it was.
func (s *Service) ResumeRun(ctx context.Context, runID, reason string) error {
	return s.eachTask(ctx, runID, func(t store.TaskView) (statemodel.Event, bool) {
		return statemodel.Event{Type: statemodel.EvResume, Reason: reason}, t.Instance.Snapshot.State == statemodel.StatePaused
	})
}

// eachTask applies the chosen operator event to every task it picks; the
// run must exist and at least one task must be picked.
func (s *Service) eachTask(ctx context.Context, runID string, pick func(store.TaskView) (statemodel.Event, bool)) error {
	view, err := s.store.ReadRun(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return err
	}
	picked := 0
	var errs []error
	for _, t := range view.Tasks {
		ev, ok := pick(t)
		if !ok {
			continue
		}
		picked++
		if _, err := s.operate(ctx, t.Instance.Key, ev); err != nil && !errors.Is(err, ErrIllegalTransition) {
			errs = append(errs, err)
		}
	}
	if picked == 0 {
		return fmt.Errorf("%w: no task of run %s can take this action", ErrIllegalTransition, runID)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return s.AdvanceRun(ctx, runID)
}

// RetryTask gives a FAILED or CANCELLED task a new attempt with a fresh
// retry budget (the same parameters; changed parameters make a new run).
func (s *Service) RetryTask(ctx context.Context, key store.InstanceKey, operator, reason string) error {
	_, err := s.operate(ctx, key, statemodel.Event{Type: statemodel.EvManualRetry, Operator: operator, Reason: reason})
	return err
}

// MarkTask is the operator override, the one exit from a terminal state:
// it records operator, reason and scope and shows in history as an
// override.
func (s *Service) MarkTask(ctx context.Context, key store.InstanceKey, succeeded bool, operator, reason string) error {
	typ := statemodel.EvOverrideFailed
	if succeeded {
		typ = statemodel.EvOverrideSucceeded
	}
	_, err := s.operate(ctx, key, statemodel.Event{Type: typ, Operator: operator, Reason: reason})
	if err == nil {
		err = s.AdvanceRun(ctx, key.Run)
	}
	return err
}
