package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// maxAdvanceRounds bounds AdvanceRun's read-evaluate-write rounds.
const maxAdvanceRounds = 8

// AdvanceRun moves a run on: every CREATED task whose dependencies are
// decided gets its verdict (SCHEDULED tasks are dispatched at once), and the
// run's execution and publication states are derived from its tasks and
// stored with a compare-and-set, so two finishers racing cannot regress it.
// It is called when a task finishes (not on the next tick), by the run's
// backstop timer, and by a CREATED task's re-evaluation timer.
func (s *Service) AdvanceRun(ctx context.Context, runID string) error {
	for round := 0; round < maxAdvanceRounds; round++ {
		view, err := s.store.ReadRun(ctx, runID)
		if err != nil {
			return fmt.Errorf("advance run %s: %w", runID, err)
		}
		moved, err := s.evaluate(ctx, view)
		if err != nil {
			return fmt.Errorf("advance run %s: %w", runID, err)
		}
		if moved {
			continue // derive from what the verdicts left
		}
		nodes := view.Nodes()
		d := statemodel.DeriveRunState(nodes)
		pub := statemodel.DerivePublication(nodes)
		r := view.Run
		if r.ExecutionState == d.State && r.PublicationState == pub && (!d.State.Terminal() || r.TimerAt.IsZero()) {
			return nil
		}
		if d.Deadlocked {
			s.log.WarnContext(ctx, "run deadlocked", "run_id", runID)
		}
		wasTerminal := r.ExecutionState.Terminal()
		wasPublished := r.PublicationState == statemodel.PublicationPublished
		updated, err := s.store.UpdateRunState(ctx, r, store.RunUpdate{ExecutionState: d.State, PublicationState: pub})
		if errors.Is(err, store.ErrVersionConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("advance run %s: %w", runID, err)
		}
		finished := updated.ExecutionState.Terminal() && !wasTerminal
		published := updated.PublicationState == statemodel.PublicationPublished && !wasPublished
		if finished {
			s.log.InfoContext(ctx, "run finished", "run_id", runID, "job", r.Job,
				"execution_state", string(updated.ExecutionState), "publication_state", string(updated.PublicationState))
		}
		if finished || published {
			// A dependent may wait for PUBLISHED, which can come before
			// the run ends.
			s.wakeDependents(ctx, updated)
		}
		return nil
	}
	return fmt.Errorf("advance run %s: %w after %d rounds", runID, store.ErrUnsettled, maxAdvanceRounds)
}

// evaluate applies the dependency verdict of every CREATED task that has
// one, and reports whether anything moved.
func (s *Service) evaluate(ctx context.Context, view store.RunView) (bool, error) {
	moved := false
	byID := make(map[string]store.Instance, len(view.Tasks))
	for _, t := range view.Tasks {
		byID[t.Instance.Key.Task] = t.Instance
	}
	for _, r := range statemodel.Evaluate(view.Nodes()) {
		verdict := r.Verdict
		inst := byID[r.ID]
		if verdict == statemodel.DepsMet && len(inst.DependsOn) == 0 {
			v, err := s.crossJobVerdict(ctx, view.Run)
			if err != nil {
				return moved, err
			}
			verdict = v
		}
		var typ statemodel.EventType
		switch verdict {
		case statemodel.DepsMet:
			typ = statemodel.EvDepsMet
		case statemodel.DepsSkip:
			typ = statemodel.EvDepsSkipped
		case statemodel.DepsUpstreamFailed:
			typ = statemodel.EvDepsUpstreamFailed
		default:
			continue
		}
		// One dependency verdict per stay in CREATED: evaluators that read
		// the same snapshot send the same id (the second is a duplicate),
		// and a task cleared back to CREATED later gets a fresh one.
		ev := statemodel.Event{ID: fmt.Sprintf("deps:%d", inst.Snapshot.Seq), Type: typ, Actor: statemodel.ActorScheduler}
		res, err := s.store.Transition(ctx, inst.Key, ev, s.now(), s.policy())
		if err != nil {
			if transient(err) {
				return moved, err
			}
			continue // another evaluator moved it first
		}
		if res.Outcome == statemodel.Applied {
			moved = true
			if res.Snapshot.State == statemodel.StateScheduled {
				inst.Snapshot = res.Snapshot
				if err := s.dispatch(ctx, inst, view.Run); err != nil {
					s.log.WarnContext(ctx, "dispatch", "run_id", inst.Key.Run, "task", inst.Key.Task, "error", err.Error())
				}
			}
		}
	}
	return moved, nil
}
