package flow

import (
	"context"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// An operator's retry of a task of a limited run that ended reopens a run
// that gave its room back: it enters its limiters again first, at its own
// place (its priority and created_at), as a new run would. Admitted, the
// retry goes as any. Waiting, the retried task is made SCHEDULED without
// its dispatch (held, HoldsDispatches), so the run answers QUEUED and
// waiting, and the hand-off that admits the run dispatches it
// (dispatchHeld); the task's timer does too once the run is admitted
// (FireTimer), and until then its pass repairs the limiter as a waiting
// run's CREATED task's does. An operator's resume of a held task holds it
// again the same way.

// Retry is the kernel's Operate for an operator's retry of a task: a
// limited run that ended enters its limiters again before it reopens.
func (r *Room) Retry(ctx context.Context, key ledger.InstanceKey, ev statemodel.Event) (ledger.Result, error) {
	run, err := r.store.GetRun(ctx, key.Run)
	if err != nil || !run.ExecutionState.Terminal() {
		return r.k.Operate(ctx, key, ev) // in its limiters still (or not there: operate says so)
	}
	if _, stages := r.runStages(run); len(stages) == 0 {
		return r.k.Operate(ctx, key, ev)
	}
	admitted, err := r.enterStages(ctx, run, entering{})
	if err != nil {
		return ledger.Result{}, err
	}
	res, err := r.k.Operate(ctx, key, ev)
	if err != nil {
		// Refused: a run still ended leaves the limiters it entered.
		if now, gerr := r.store.GetRun(ctx, key.Run); gerr == nil && now.ExecutionState.Terminal() {
			r.ReleaseRun(ctx, now, nil)
		}
		return res, err
	}
	if !admitted {
		// A hand-off that admitted the run between its entry and the
		// retry found nothing to dispatch: look once more.
		r.dispatchHeld(ctx, key.Run)
	}
	return res, nil
}

// HoldsDispatches reports whether an operator action's dispatches of a
// run's tasks are held: the run is limited and not admitted in every
// limiter it enters (looking repairs them, as a waiting run's pass does),
// so those tasks stay SCHEDULED until the run's admission dispatches them.
// A failed look holds them too: their timer (FireTimer) dispatches them
// once the run is admitted. The kernel asks only about effects that hold
// a dispatch, so the others cost no read.
func (r *Room) HoldsDispatches(ctx context.Context, runID string) bool {
	run, err := r.store.GetRun(ctx, runID)
	held := err != nil
	if err == nil {
		held, err = r.HeldByLimiter(ctx, run)
	}
	if err != nil {
		r.log.WarnContext(ctx, "dispatch left to the task's timer", "run_id", runID, "error", err.Error())
		held = true
	}
	return held
}

// dispatchHeld dispatches a run's SCHEDULED tasks once the run is admitted
// in every limiter it enters: the tasks a retry held while it waited. A
// run a hand-off admits has none otherwise (a waiting run's tasks stay
// CREATED), so this is one read of the run. A failure is left to the
// tasks' timers.
func (r *Room) dispatchHeld(ctx context.Context, runID string) {
	view, err := r.store.ReadRun(ctx, runID)
	if err != nil {
		r.log.WarnContext(ctx, "held tasks not read", "run_id", runID, "error", err.Error())
		return
	}
	work := heldDispatches(view)
	if len(work) == 0 {
		return
	}
	if ok, err := r.admitRun(ctx, view.Run); err != nil || !ok {
		return
	}
	r.k.Perform(ctx, work...)
}

// heldDispatches are the dispatches of view's SCHEDULED tasks: held by a
// retry or resume while the run waited.
func heldDispatches(view ledger.RunView) []Work {
	run := view.Run
	var work []Work
	for _, t := range view.Tasks {
		if t.Instance.Snapshot.State == statemodel.StateScheduled {
			work = append(work, Work{Kind: Dispatch, Inst: t.Instance, Run: &run})
		}
	}
	return work
}

// HeldByLimiter reports whether a run's SCHEDULED task is held because the
// run waits in a limiter (an operator's retry of an ended run); looking
// repairs the limiter, and may admit the run.
func (r *Room) HeldByLimiter(ctx context.Context, run ledger.Run) (bool, error) {
	if _, stages := r.runStages(run); len(stages) == 0 {
		return false, nil
	}
	ok, err := r.admitRun(ctx, run)
	return err == nil && !ok, err
}
