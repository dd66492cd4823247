package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// newRunEffects are what moves a new run of j on. When its root tasks
// wait on other jobs' runs, advance decides them and yields their
// dispatches, and after those the run's dependency timeout is armed if a
// root task still waits. A run of a limited job enters its limiters and,
// admitted, dispatches its roots (flow.Room.AdmitNewRun). Otherwise each task
// created SCHEDULED is dispatched from the view the creating write
// returned; a dispatch that fails leaves its task SCHEDULED, and the
// task's timer tries again.
func newRunEffects(view ledger.RunView, j jobspec.Job) []effect {
	run := view.Run
	switch {
	case len(j.DependsOnJobs) > 0:
		return []effect{{kind: effAdvanceRun, runID: run.ID, armDeps: true}}
	case j.Limited():
		return []effect{{kind: effAdmitNewRun, runID: run.ID, view: &view}}
	}
	var effs []effect
	for i, t := range view.Tasks {
		if t.Instance.Snapshot.State != statemodel.StateScheduled {
			continue
		}
		effs = append(effs, effect{kind: effDispatch, key: t.Instance.Key, inst: t.Instance, run: &run, runID: run.ID, task: i})
	}
	return effs
}

// executorJSON is how an instance keeps its task's executor: nil for the
// pool's queue, so queue tasks' items carry nothing more.
func executorJSON(e jobspec.Executor) []byte {
	if e.IsQueue() {
		return nil
	}
	b, _ := wire.Marshal(e) // plain strings: cannot fail
	return b
}

// cancelUnfinished cancels the job's unfinished runs of slots before at,
// backfill runs excepted. A
// run of the slot at itself is left alone: a ticker racing this one may
// have created it already. It reads the live index, so its cost follows
// the job's unfinished runs, not the runs it finished before.
func (s *Service) cancelUnfinished(ctx context.Context, job string, at time.Time) error {
	runs, err := s.store.ListUnfinishedRuns(ctx, job)
	if err != nil {
		return err
	}
	for _, r := range runs {
		// The overlap policy does not govern backfill runs: max_active does.
		if r.LogicalTime.Before(at) && r.Trigger != statemodel.TriggerBackfill {
			if err := s.CancelRun(ctx, r.ID, "overlap: cancel_previous"); err != nil && !errors.Is(err, statemodel.ErrIllegalTransition) {
				return err
			}
		}
	}
	return nil
}

// maxDependencyScan bounds how many of an upstream job's newest runs are
// searched for the run with the same logical time.
const maxDependencyScan = 500
