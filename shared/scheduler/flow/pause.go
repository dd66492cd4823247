package flow

import (
	"context"
	"slices"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
	"github.com/runledger/runledger/statemodel/limiter"
)

// PauseInLimiters marks an unfinished run that waits in one of its
// limiters paused there (passed over by every hand-off, keeping its
// place) or resumed. A run admitted in its last limiter waits nowhere.
// An operator's pause calls it before the run's tasks are paused, and a
// resume before they are resumed.
func (r *Room) PauseInLimiters(ctx context.Context, view ledger.RunView, paused bool) error {
	run := view.Run
	c, stages := r.runStages(run)
	if len(stages) == 0 || run.ExecutionState.Terminal() || admittedInEvery(run, stages) {
		return nil
	}
	if !slices.ContainsFunc(view.Tasks, func(t ledger.TaskView) bool {
		st := t.Instance.Snapshot.State
		return st == statemodel.StateCreated || st == statemodel.StatePaused
	}) {
		return nil // nothing of it waits for an admission
	}
	place := runPlace(c, run)
	for _, st := range stages {
		name := st.name
		if st.grouped() || (run.WaitingIn != st.name && limiter.InGroup(run.WaitingIn, st.name)) {
			// In a group, the shard it waits in (a limiter of one item
			// is paused in without a look, as always).
			shard, at, err := r.findShard(ctx, run, st, place)
			if err != nil {
				return err
			}
			if at.Reason == "" {
				continue
			}
			name = shard
		}
		if _, err := r.turns.PauseWaiting(ctx, r.store, name, place, paused); err != nil {
			return err
		}
	}
	return nil
}
