package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/scheduler/flow"
	"github.com/runledger/runledger/shared/scheduler/jobs"
	"github.com/runledger/runledger/statemodel"
)

// maxAdvanceRounds bounds advance's rounds that end in a version conflict
// on the run (another finisher stored first): each such round re-reads.
const maxAdvanceRounds = 8

// AdvanceRun moves a run on (advance) and performs what that yields. It is
// called by the run's timer (its backstop, deadline or dependency timeout:
// the ticker's scan, or a delay message), by a CREATED task's
// re-evaluation timer, and by the API's operator actions; a task's
// completion reaches advance through its effects.
//
// It is also the backstop of the run's instances' short timers (those
// the timers index does not hold): every one found due in the run as the
// advance read it is fired (fireDueTimers), so a lost delay message costs
// at most the run's backstop period.
func (s *Service) AdvanceRun(ctx context.Context, runID string) error {
	a := newAdvancing(s, runID, nil, false, false, nil)
	err := a.run(ctx)
	s.perform(ctx, a.effs...)
	if err != nil {
		return fmt.Errorf("advance run %s: %w", runID, err)
	}
	if a.seen != nil {
		s.fireDueTimers(ctx, *a.seen)
	}
	s.perform(ctx, s.maps.Backstop(ctx, runID)...)
	return nil
}

// advanceRun is AdvanceRun; touch stores the run's state even when it is
// unchanged (see derivation), for an operator's action.
func (s *Service) advanceRun(ctx context.Context, runID string, touch bool) error {
	more, err := s.advance(ctx, runID, nil, false, touch, nil)
	s.perform(ctx, more...)
	if err != nil {
		return fmt.Errorf("advance run %s: %w", runID, err)
	}
	return nil
}

// derivation says how far the view a run's state is derived from can be
// trusted. A run's state is a function of all its tasks, and each task is
// its own item: two writers that each moved a task and each derived from
// a view that misses the other's move would both find nothing to change,
// and the run would keep a state none of its tasks gives. So a derivation
// is stored, or found unchanged, only from a view read after the caller's
// own task write; a stored state moves with a compare-and-set on the
// version read, so a writer whose view is older than another's store
// derives again.
type derivation struct {
	// held: the view was read before the caller's own write (a
	// completion's read), so it may miss a task another writer moved in
	// between. A state it finds unchanged is confirmed by a fresh read
	// (after the dispatches it decided); a changed one is stored under the
	// compare-and-set as usual.
	held bool
	// touch: store the state even when it is unchanged, bumping the
	// run's version, so that a writer that derived from a view older than
	// this caller's task write (an operator's retry, mark or cancel) fails
	// its compare-and-set and derives again. Operator actions are rare;
	// completions never touch, so sibling tasks finishing together do not
	// contend.
	touch bool
}

// advance decides every CREATED task of a run whose dependencies are
// decided, derives the run's execution and publication states from its
// tasks and stores them with a compare-and-set, so two finishers racing
// cannot regress it. It starts from held when the caller holds the run
// (nil: one ReadRun) and reads again after a version conflict, a refused
// verdict or a reopen; an unchanged state found from held is confirmed by
// a fresh advance queued after its dispatches (see derivation). A skip
// or an upstream failure travels the whole graph in one call, however
// deep. It returns the effects it yields: the dispatch of every task whose
// dependencies are met (its verdict rides on the dispatch's write), the
// wake of the runs waiting on this one, and, for a backfill's run that
// ended, the advance of its backfill. current: held was read after the
// caller's last write, as advance's own read would be. h: the hand-off
// whose effects advance the run (nil: none).
func (s *Service) advance(ctx context.Context, runID string, held *ledger.RunView, current, touch bool, h *flow.HandOff) ([]effect, error) {
	a := newAdvancing(s, runID, held, current, touch, h)
	err := a.run(ctx)
	return a.effs, err
}

// newAdvancing starts one advance of s (see advance for its arguments).
func newAdvancing(s *Service, runID string, held *ledger.RunView, current, touch bool, h *flow.HandOff) *advancing {
	return &advancing{s: s, runID: runID, held: held, current: current, touch: touch, h: h,
		pending: map[string]bool{}, wasRefused: map[string]bool{}}
}

// run takes the advance's rounds.
func (a *advancing) run(ctx context.Context) error {
	return ledger.Update(ctx, ledger.Rounds{Max: maxAdvanceRounds}, a.readView, a.decideView, a.storeView)
}

// advancing is one advance as it goes from round to round.
type advancing struct {
	s              *Service
	runID          string
	held           *ledger.RunView
	current, touch bool
	h              *flow.HandOff
	// effs are the effects yielded so far. pending are the dispatches
	// decided so far, by task: a round after a version conflict reads the
	// run again and finds those tasks still CREATED; they count as
	// SCHEDULED and are not decided twice. wasRefused are the tasks whose
	// verdict's write was refused so far.
	effs                []effect
	pending, wasRefused map[string]bool
	// fromHeld: the round's view is the caller's held one.
	fromHeld bool
	// seen is the last round's view, its instances as evaluate left
	// them (the run's backstop fires their due timers).
	seen *ledger.RunView
}

// derived is a round's derivation to store: the run as read and its
// tasks as they now stand.
type derived struct {
	run   ledger.Run
	nodes []statemodel.TaskNode
	how   derivation
}

// readView answers the caller's view in the first round, else reads the run.
func (a *advancing) readView(ctx context.Context, round int) (ledger.RunView, error) {
	a.fromHeld = a.held != nil && round == 0
	if a.fromHeld {
		return *a.held, nil
	}
	return a.s.store.ReadRun(ctx, a.runID)
}

// decideView decides view's tasks (evaluate) and the derivation to store;
// a verdict refused for a task not refused before reads again.
func (a *advancing) decideView(ctx context.Context, view ledger.RunView) (derived, ledger.Step, error) {
	if err := a.s.checkDeadline(ctx, &view.Run); err != nil {
		return derived{}, 0, err
	}
	nodes, more, refused, err := a.s.evaluate(ctx, &view, a.pending, a.h)
	a.effs = append(a.effs, more...)
	if err != nil {
		return derived{}, 0, err
	}
	a.seen = &view
	moved := false
	for id := range refused {
		moved = moved || !a.wasRefused[id]
		a.wasRefused[id] = true
	}
	if moved {
		// Another writer moved a task since this view was read, so the
		// tasks as they stand are not known: read them again (once per
		// task: a verdict refused twice is left to its timer).
		return derived{}, ledger.StepAgain, nil
	}
	how := derivation{held: a.fromHeld && !a.current, touch: a.touch}
	return derived{run: view.Run, nodes: nodes, how: how}, ledger.StepWrite, nil
}

// storeView stores the derivation (storeDerived) and adds what it yields; a
// derivation to be made again (a version conflict, or a finished run
// reopened) is a conflict to Update.
func (a *advancing) storeView(ctx context.Context, d derived) error {
	outcome, wake, err := a.s.storeDerived(ctx, d.run, d.nodes, d.how, a.h)
	if err != nil {
		return err
	}
	if wake != nil {
		a.effs = append(a.effs, effect{kind: effWakeDependents, run: wake, runID: wake.ID})
		if wake.BackfillID != "" && wake.ExecutionState.Terminal() {
			// Its backfill may release its next slot.
			a.effs = append(a.effs, effect{kind: effAdvanceBackfill, run: wake, runID: wake.ID})
		}
	}
	switch outcome {
	case settled:
		return nil
	case confirm:
		a.effs = append(a.effs, effect{kind: effAdvanceRun, runID: a.runID})
		return nil
	}
	return fmt.Errorf("run %s: %w: derive again", a.runID, ledger.ErrVersionConflict)
}

// settle is what storing a derivation came to.
type settle int

const (
	// settled: the state is stored, or was found stored already.
	settled settle = iota + 1
	// again: read the run and derive again now (a version conflict, or a
	// finished run reopened).
	again
	// confirm: a held view found the state unchanged. It is derived again
	// from a fresh read once the effects decided so far are done (the
	// next tasks' dispatches), so the confirmation is off their path.
	confirm
)

// storeDerived stores the run state derived from nodes, and reports the
// run as stored when it finished or published (its dependents are to be
// woken). When nothing changed it re-arms a due backstop timer instead, so
// a live run is re-read once per backstop period, not on every pass. A
// run that ended hands its room on as part of h's effects.
func (s *Service) storeDerived(ctx context.Context, r ledger.Run, nodes []statemodel.TaskNode, how derivation, h *flow.HandOff) (settle, *ledger.Run, error) {
	d := statemodel.DeriveRunState(nodes)
	pub := statemodel.DerivePublication(nodes)
	update := ledger.RunUpdate{ExecutionState: d.State, PublicationState: pub}
	if r.ExecutionState == d.State && r.PublicationState == pub && (!d.State.Terminal() || r.TimerAt.IsZero()) {
		switch {
		case how.held:
			return confirm, nil, nil // unchanged by a view older than our write
		case how.touch:
			update.EndedAt = r.EndedAt // stored again as it is
		case d.State.Terminal() || r.TimerAt.After(s.now()):
			return settled, nil, nil
		default:
			_, err := s.store.RearmRunBackstop(ctx, r)
			if err != nil && !errors.Is(err, ledger.ErrVersionConflict) {
				return again, nil, err
			}
			return settled, nil, nil // re-armed, or another writer stored the run and armed its timer
		}
	}
	runID := r.ID
	if d.Deadlocked {
		s.log.WarnContext(ctx, "run deadlocked", "run_id", runID)
	}
	wasTerminal := r.ExecutionState.Terminal()
	wasPublished := r.PublicationState == statemodel.PublicationPublished
	updated, err := s.store.UpdateRunState(ctx, r, update)
	if errors.Is(err, ledger.ErrVersionConflict) {
		return again, nil, nil
	}
	if err != nil {
		return again, nil, err
	}
	if wasTerminal && !updated.ExecutionState.Terminal() {
		// Reopened (an operator's retry). A task that finished since our
		// read left no trace on the run: its finisher found the run
		// already terminal from before and wrote nothing, so the
		// compare-and-set cannot catch it. One more round, reading after
		// this write, sees it; any later finisher sees this write.
		return again, nil, nil
	}
	finished := updated.ExecutionState.Terminal() && !wasTerminal
	published := updated.PublicationState == statemodel.PublicationPublished && !wasPublished
	if finished {
		s.log.InfoContext(ctx, "run finished", "run_id", runID, "job", r.Job,
			"execution_state", string(updated.ExecutionState), "publication_state", string(updated.PublicationState))
		s.notices.runEnded(ctx, updated, nodes)
		if s.cfg.Spans != nil {
			s.cfg.Spans.RunEnded(updated)
		}
		s.flow.ReleaseRun(ctx, updated, h)
	}
	if finished || published {
		// A dependent may wait for PUBLISHED, which can come before
		// the run ends.
		return settled, &updated, nil
	}
	return settled, nil, nil
}

// evaluate decides every CREATED task of view that has a dependency
// verdict, and returns the tasks as they now stand (for the run's
// derivation) and the dispatches it yields. A task whose dependencies are
// met is not written here: its dispatch sends the envelope and writes
// deps.met and dispatch.accepted as one write; until then it counts as
// SCHEDULED. A task moved to a terminal state (SKIPPED, UPSTREAM_FAILED)
// decides the tasks below it, so it evaluates again on what it wrote until
// nothing moves: at most one pass per task. view's instances are replaced
// by the ones written. refused names the tasks whose verdict's write was
// refused: another writer moved them since the view was read. h: the
// hand-off whose effects evaluate the run (nil: none).
func (s *Service) evaluate(ctx context.Context, view *ledger.RunView, pending map[string]bool, h *flow.HandOff) ([]statemodel.TaskNode, []effect, map[string]bool, error) {
	nodes := view.Nodes()
	for i, t := range view.Tasks {
		if pending[t.Instance.Key.Task] && nodes[i].State == statemodel.StateCreated {
			nodes[i].State = statemodel.StateScheduled // its dispatch is decided already
		}
	}
	byID := make(map[string]int, len(view.Tasks))
	for i, t := range view.Tasks {
		byID[t.Instance.Key.Task] = i
	}
	var effs []effect
	cross := crossJobCache{}
	adm := s.flow.Gate(*view, h)
	// A run a hand-off just admitted: its roots are decided by that
	// hand-off's write alone, so their dispatches carry their verdict
	// (soleVerdict).
	sole := h.Admitted(view.Run.ID)
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
					return nodes, effs, nil, err
				}
				verdict, timedOut = c.Verdict, c.TimedOut
			}
			if verdict == statemodel.DepsMet {
				// Any task, not only a root: one whose upstream ended
				// without running (cancelled) may be due while the run
				// still waits in its limiter.
				ok, err := adm.Admitted(ctx, view.Run)
				if err != nil {
					return nodes, effs, nil, err
				}
				if !ok {
					continue // waiting in its limiter: stays CREATED
				}
			}
			var typ statemodel.EventType
			reason := ""
			switch {
			case verdict == statemodel.DepsMet:
				run := view.Run
				effs = append(effs, effect{kind: effDispatch, key: inst.Key, inst: inst, run: &run, depsMet: true, soleVerdict: sole && len(inst.DependsOn) == 0, runID: run.ID})
				pending[r.ID] = true
				nodes[i].State = statemodel.StateScheduled
				progressed = true
				continue
			case verdict == statemodel.DepsSkip:
				typ = statemodel.EvDepsSkipped
			case verdict == statemodel.DepsUpstreamFailed:
				typ = statemodel.EvDepsUpstreamFailed
			case timedOut:
				typ, reason = statemodel.EvDepsTimeout, "dependency_timeout"
			default:
				continue
			}
			ev := statemodel.Event{ID: ledger.DepsEventID(inst.Snapshot.Seq), Type: typ, Actor: statemodel.ActorScheduler, Reason: reason}
			res, err := s.store.TransitionFrom(ctx, inst, ev, s.now(), s.policy())
			if err != nil {
				if transient(err) {
					return nodes, effs, nil, err
				}
				refused[r.ID] = true // another evaluator moved it first
				continue
			}
			if res.Outcome != statemodel.Applied {
				refused[r.ID] = true
				continue
			}
			s.applied(ctx, res)
			progressed = true
			view.Tasks[i].Instance = res.Instance
			nodes[i].State = res.Snapshot.State
		}
		if !progressed {
			return nodes, effs, refused, nil
		}
	}
}

// checkDeadline records and notifies a run found unfinished at or past
// its deadline (the run's timer falls due then, so a pass comes on time).
// The mark is one conditional write that only one caller wins, so the
// notice goes out once however many passes, retries and processes find the run;
// run becomes the run as stored, in the state it was shown in. The run
// itself goes on.
func (s *Service) checkDeadline(ctx context.Context, run *ledger.Run) error {
	if run.DeadlineAt.IsZero() || !run.DeadlineMissedAt.IsZero() || run.ExecutionState.Terminal() || s.now().Before(run.DeadlineAt) {
		return nil
	}
	marked, ok, err := s.store.MarkDeadlineMissed(ctx, *run)
	if err != nil || !ok {
		return err
	}
	if marked.ExecutionState == statemodel.RunQueued {
		// Stored QUEUED, shown as run was read (ledger.ShownRun): the
		// mark moves no task.
		marked.ExecutionState, marked.Status = run.ExecutionState, run.Status
	}
	*run = marked
	s.notices.deadlineMissed(ctx, marked, marked.DeadlineAt.Sub(marked.CreatedAt))
	return nil
}

// crossJobCache asks CrossJobVerdict once per evaluation, however many
// root tasks the run has and however many passes the evaluation makes.
type crossJobCache struct {
	done bool
	v    jobs.CrossJob
}

func (c *crossJobCache) verdict(ctx context.Context, s *Service, run ledger.Run) (jobs.CrossJob, error) {
	if c.done {
		return c.v, nil
	}
	v, err := s.jobs.CrossJobVerdict(ctx, run)
	if err != nil {
		return v, err
	}
	c.done, c.v = true, v
	return v, nil
}
