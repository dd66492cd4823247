package scheduler

import (
	"context"
	"slices"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// An operator's retry of a task of a limited run that ended reopens a run
// that gave its room back: it enters its limiters again first, at its own
// place (its priority and created_at), as a new run would. Admitted, the
// retry goes as any. Waiting, the retried task is made SCHEDULED without
// its dispatch (held, holdDispatches), so the run answers QUEUED and
// waiting, and the hand-off that admits the run dispatches it
// (dispatchHeld); the task's timer does too once the run is admitted
// (FireTimer), and until then its pass repairs the limiter as a waiting
// run's CREATED task's does. An operator's resume of a held task holds it
// again the same way.

// operateRetry is operate for an operator's retry.
func (s *Service) operateRetry(ctx context.Context, key ledger.InstanceKey, ev statemodel.Event) (ledger.Result, error) {
	run, err := s.store.GetRun(ctx, key.Run)
	if err != nil || !run.ExecutionState.Terminal() {
		return s.operate(ctx, key, ev) // in its limiters still (or not there: operate says so)
	}
	if _, stages := runStages(&s.compiled, run); len(stages) == 0 {
		return s.operate(ctx, key, ev)
	}
	admitted, err := s.enterStages(ctx, run, entering{})
	if err != nil {
		return ledger.Result{}, err
	}
	res, err := s.operate(ctx, key, ev)
	if err != nil {
		// Refused: a run still ended leaves the limiters it entered.
		if now, gerr := s.store.GetRun(ctx, key.Run); gerr == nil && now.ExecutionState.Terminal() {
			s.releaseRun(ctx, now, nil)
		}
		return res, err
	}
	if !admitted {
		// A hand-off that admitted the run between its entry and the
		// retry found nothing to dispatch: look once more.
		s.dispatchHeld(ctx, key.Run)
	}
	return res, nil
}

// holdDispatches drops from an operator action's effects the dispatches of
// a limited run that is not admitted in every limiter it enters (looking
// repairs them, as a waiting run's pass does): those tasks stay SCHEDULED,
// held until the run's admission dispatches them. A failed look holds
// them too: their timer (FireTimer) dispatches them once the run is
// admitted. Effects without a dispatch cost no read.
func (s *Service) holdDispatches(ctx context.Context, runID string, effs []effect) []effect {
	if !slices.ContainsFunc(effs, func(e effect) bool { return e.kind == effDispatch }) {
		return effs
	}
	run, err := s.store.GetRun(ctx, runID)
	held := err != nil
	if err == nil {
		held, err = s.heldByLimiter(ctx, run)
	}
	if err != nil {
		s.log.WarnContext(ctx, "dispatch left to the task's timer", "run_id", runID, "error", err.Error())
		held = true
	}
	if !held {
		return effs
	}
	return slices.DeleteFunc(effs, func(e effect) bool { return e.kind == effDispatch })
}

// dispatchHeld dispatches a run's SCHEDULED tasks once the run is admitted
// in every limiter it enters: the tasks a retry held while it waited. A
// run a hand-off admits has none otherwise (a waiting run's tasks stay
// CREATED), so this is one read of the run. A failure is left to the
// tasks' timers.
func (s *Service) dispatchHeld(ctx context.Context, runID string) {
	view, err := s.store.ReadRun(ctx, runID)
	if err != nil {
		s.log.WarnContext(ctx, "held tasks not read", "run_id", runID, "error", err.Error())
		return
	}
	effs := heldDispatches(view)
	if len(effs) == 0 {
		return
	}
	if ok, err := s.admitRun(ctx, view.Run); err != nil || !ok {
		return
	}
	s.perform(ctx, effs...)
}

// heldDispatches are the dispatches of view's SCHEDULED tasks: held by a
// retry or resume while the run waited.
func heldDispatches(view ledger.RunView) []effect {
	run := view.Run
	var effs []effect
	for _, t := range view.Tasks {
		if t.Instance.Snapshot.State == statemodel.StateScheduled {
			effs = append(effs, effect{kind: effDispatch, key: t.Instance.Key, inst: t.Instance, run: &run, runID: run.ID})
		}
	}
	return effs
}

// heldByLimiter reports whether a run's SCHEDULED task is held because the
// run waits in a limiter (an operator's retry of an ended run); looking
// repairs the limiter, and may admit the run.
func (s *Service) heldByLimiter(ctx context.Context, run ledger.Run) (bool, error) {
	if _, stages := runStages(&s.compiled, run); len(stages) == 0 {
		return false, nil
	}
	ok, err := s.admitRun(ctx, run)
	return err == nil && !ok, err
}
