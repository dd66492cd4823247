package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// maxAdvanceRounds bounds AdvanceRun's rounds that end in a conflict (a
// version conflict on the run, a verdict another evaluator applied first).
// Rounds in which a task moved are bounded by the run's tasks: each one
// takes at least one task out of CREATED.
const maxAdvanceRounds = 8

// AdvanceRun moves a run on: every CREATED task whose dependencies are
// decided gets its verdict (SCHEDULED tasks are dispatched at once), and the
// run's execution and publication states are derived from its tasks and
// stored with a compare-and-set, so two finishers racing cannot regress it.
// It is called when a task finishes (not on the next tick), by the run's
// backstop timer, and by a CREATED task's re-evaluation timer. A skip or an
// upstream failure travels the whole graph in one call, however deep.
func (s *Service) AdvanceRun(ctx context.Context, runID string) error {
	budget := maxAdvanceRounds
	for round := 0; round < budget; round++ {
		view, err := s.store.ReadRun(ctx, runID)
		if err != nil {
			return fmt.Errorf("advance run %s: %w", runID, err)
		}
		if round == 0 {
			budget += len(view.Tasks)
		}
		moved, err := s.evaluate(ctx, view)
		if err != nil {
			return fmt.Errorf("advance run %s: %w", runID, err)
		}
		if moved {
			continue // derive from what the verdicts left
		}
		done, err := s.storeDerived(ctx, view)
		if err != nil {
			return fmt.Errorf("advance run %s: %w", runID, err)
		}
		if done {
			return nil
		}
	}
	return fmt.Errorf("advance run %s: %w after %d rounds", runID, store.ErrUnsettled, budget)
}

// storeDerived stores the run state derived from view's tasks. It reports
// false on a version conflict (re-read and derive again). When nothing
// changed it re-arms a due backstop timer instead, so a live run is re-read
// once per backstop period, not on every pass.
func (s *Service) storeDerived(ctx context.Context, view store.RunView) (bool, error) {
	nodes := view.Nodes()
	d := statemodel.DeriveRunState(nodes)
	pub := statemodel.DerivePublication(nodes)
	r := view.Run
	if r.ExecutionState == d.State && r.PublicationState == pub && (!d.State.Terminal() || r.TimerAt.IsZero()) {
		if d.State.Terminal() || r.TimerAt.After(s.now()) {
			return true, nil
		}
		_, err := s.store.RearmRunBackstop(ctx, r)
		if errors.Is(err, store.ErrVersionConflict) {
			return true, nil // another writer stored the run, and armed its timer
		}
		return err == nil, err
	}
	runID := r.ID
	if d.Deadlocked {
		s.log.WarnContext(ctx, "run deadlocked", "run_id", runID)
	}
	wasTerminal := r.ExecutionState.Terminal()
	wasPublished := r.PublicationState == statemodel.PublicationPublished
	updated, err := s.store.UpdateRunState(ctx, r, store.RunUpdate{ExecutionState: d.State, PublicationState: pub})
	if errors.Is(err, store.ErrVersionConflict) {
		return false, nil
	}
	if err != nil {
		return false, err
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
	return true, nil
}

// evaluate applies the dependency verdict of every CREATED task that has
// one, and reports whether anything moved. A task it moves to a terminal
// state (SKIPPED, UPSTREAM_FAILED) decides the tasks below it, so it
// evaluates again on the states it wrote until nothing moves: the outcome
// ripples down the whole graph in one call, at most one pass per task.
func (s *Service) evaluate(ctx context.Context, view store.RunView) (bool, error) {
	moved := false
	nodes := view.Nodes()
	byID := make(map[string]int, len(view.Tasks))
	for i, t := range view.Tasks {
		byID[t.Instance.Key.Task] = i
	}
	cross := crossJobCache{}
	refused := map[string]bool{} // moved by someone else: the next read tells
	for {
		progressed := false
		for _, r := range statemodel.Evaluate(nodes) {
			if refused[r.ID] {
				continue
			}
			i := byID[r.ID]
			inst := view.Tasks[i].Instance
			verdict, timedOut := r.Verdict, false
			if verdict == statemodel.DepsMet && len(inst.DependsOn) == 0 {
				c, err := cross.verdict(ctx, s, view.Run)
				if err != nil {
					return moved, err
				}
				verdict, timedOut = c.Verdict, c.TimedOut
			}
			var typ statemodel.EventType
			reason := ""
			switch {
			case verdict == statemodel.DepsMet:
				typ = statemodel.EvDepsMet
			case verdict == statemodel.DepsSkip:
				typ = statemodel.EvDepsSkipped
			case verdict == statemodel.DepsUpstreamFailed:
				typ = statemodel.EvDepsUpstreamFailed
			case timedOut:
				typ, reason = statemodel.EvDepsTimeout, "dependency_timeout"
			default:
				continue
			}
			// One dependency verdict per stay in CREATED: evaluators that read
			// the same snapshot send the same id (the second is a duplicate),
			// and a task cleared back to CREATED later gets a fresh one.
			ev := statemodel.Event{ID: fmt.Sprintf("deps:%d", inst.Snapshot.Seq), Type: typ, Actor: statemodel.ActorScheduler, Reason: reason}
			res, err := s.store.Transition(ctx, inst.Key, ev, s.now(), s.policy())
			if err != nil {
				if transient(err) {
					return moved, err
				}
				refused[r.ID] = true // another evaluator moved it first
				continue
			}
			if res.Outcome != statemodel.Applied {
				refused[r.ID] = true
				continue
			}
			moved, progressed = true, true
			nodes[i].State = res.Snapshot.State
			if res.Snapshot.State == statemodel.StateScheduled {
				inst.Snapshot = res.Snapshot
				if err := s.dispatch(ctx, inst, view.Run); err != nil {
					s.log.WarnContext(ctx, "dispatch", "run_id", inst.Key.Run, "task", inst.Key.Task, "error", err.Error())
				}
			}
		}
		if !progressed {
			return moved, nil
		}
	}
}

// crossJobCache asks crossJobVerdict once per evaluation, however many
// root tasks the run has and however many passes the evaluation makes.
type crossJobCache struct {
	done bool
	v    crossJob
}

func (c *crossJobCache) verdict(ctx context.Context, s *Service, run store.Run) (crossJob, error) {
	if c.done {
		return c.v, nil
	}
	v, err := s.crossJobVerdict(ctx, run)
	if err != nil {
		return v, err
	}
	c.done, c.v = true, v
	return v, nil
}
