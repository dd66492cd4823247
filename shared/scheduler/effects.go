package scheduler

import (
	"context"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/scheduler/flow"
	"github.com/runledger/runledger/statemodel"
)

// Decisions return their effects as data; one small runner (perform)
// carries them out, breadth first and within a budget, so nothing calls
// itself back: a completion yields "advance the run", advancing yields
// "dispatch these tasks" and "wake the runs that wait on this one", and
// each of those is one more item on the runner's list. The API handlers,
// the events function, the ticker and the reconciler all use it.

// effectKind names what an effect asks for.
type effectKind int

const (
	// effDispatch sends the next attempt of a task and records it. With
	// depsMet the task is CREATED and its dependency verdict is written in
	// the same write as the dispatch.
	effDispatch effectKind = iota + 1
	// effAdvanceRun evaluates a run's CREATED tasks and derives its state.
	effAdvanceRun
	// effWakeDependents advances the runs of other jobs that wait on a run
	// that finished or published.
	effWakeDependents
	// effAdvanceBackfill settles a backfill's run that finished (run) and
	// releases the backfill's next slots.
	effAdvanceBackfill
	// effArmDependencyTimeout reads a new run whose root tasks wait on
	// other jobs' runs, after its advance and the dispatches that yielded,
	// and arms its dependency timeout if a root task still waits.
	effArmDependencyTimeout
	// effMapStep moves a map task on (key) after one of its children
	// ended or it started: release, or its end (the maps room).
	effMapStep
	// effMapCancel stops a map task's releases and cancels its children
	// (key: the map task, whose cancel was requested).
	effMapCancel
	// effAdmitNewRun enters a new run of a limited job in its limiters
	// from the view its creating write returned, and dispatches its root
	// tasks once admitted (flow.Room.AdmitNewRun).
	effAdmitNewRun
)

// effect is one thing to do after a write, with what the writer held, so
// the runner need not read it again.
type effect struct {
	kind effectKind
	key  ledger.InstanceKey
	// inst is the instance as written (dispatch).
	inst ledger.Instance
	// run is the run as held (dispatch: its params and logical time; wake:
	// the run that finished). Nil: read it when needed.
	run *ledger.Run
	// view is a whole run the caller holds (advance). Nil: read it.
	view *ledger.RunView
	// current: view was read after the caller's last write, so advance
	// decides on it as on its own read (not held: see derivation).
	current bool
	// depsMet: the dispatch also records the task's dependency verdict.
	depsMet bool
	// soleVerdict: this dispatcher's own conditional write (a limiter's
	// admission) decided the task's dependencies, so its verdict rides in
	// the dispatch's write whatever the task waits on (see verdictFirst).
	soleVerdict bool
	runID       string
	// armDeps: the advance of a new run (startRun) whose root tasks wait
	// on other jobs' runs; its dependency timeout is armed after the
	// effects the advance yields.
	armDeps bool
	// answer is the view of a new run its creator answers with, which the
	// run's first effects complete: a dispatch puts the instance as
	// written in answer.Tasks[task], the arming of the dependency timeout
	// the run as it read it. Nil: nobody waits for an answer.
	answer *ledger.RunView
	task   int
	// handedOn is the hand-off this effect is part of (flow.HandOff): the
	// effects it performs, and those they yield, carry what it admitted.
	// Nil: none.
	handedOn *flow.HandOff
}

// maxEffects bounds one runner's work. What is left when it runs out is
// left to the timers every effect has behind it (the instance's timer, the
// run's backstop), never lost.
const maxEffects = 512

// perform carries out effects and the effects they yield, in order.
// Errors are logged: every effect has a timer backstop, so a failure here
// delays work but never loses it.
func (s *Service) perform(ctx context.Context, effs ...effect) {
	queue := effs
	for done := 0; len(queue) > 0; done++ {
		if done == maxEffects || ctx.Err() != nil {
			s.log.WarnContext(ctx, "effects left to their timers", "left", len(queue))
			return
		}
		e := queue[0]
		if e.kind == effDispatch {
			// The dispatches side by side (a fan-out) send their envelopes
			// in batches.
			k := 1
			for k < len(queue) && queue[k].kind == effDispatch {
				k++
			}
			batch := queue[:k]
			queue = queue[k:]
			done += k - 1
			for i, out := range s.dispatchAll(ctx, batch) {
				answerDispatch(batch[i], out.inst)
				if out.err != nil {
					s.log.WarnContext(ctx, "effect", "kind", effDispatch.String(), "run_id", batch[i].runID, "task", batch[i].key.Task, "error", out.err.Error())
				}
				queue = append(queue, yielded(batch[i], out.more)...)
			}
			continue
		}
		queue = queue[1:]
		more, err := s.performOne(ctx, e)
		if err != nil {
			s.log.WarnContext(ctx, "effect", "kind", e.kind.String(), "run_id", e.runID, "task", e.key.Task, "error", err.Error())
		}
		queue = append(queue, yielded(e, more)...)
	}
}

// yielded is the effects e yielded, each part of the hand-off e is part
// of, unless it is part of one of its own.
func yielded(e effect, more []effect) []effect {
	if e.handedOn == nil {
		return more
	}
	for i := range more {
		if more[i].handedOn == nil {
			more[i].handedOn = e.handedOn
		}
	}
	return more
}

func (s *Service) performOne(ctx context.Context, e effect) ([]effect, error) {
	switch e.kind {
	case effDispatch:
		_, more, err := s.dispatchEffect(ctx, e)
		return more, err
	case effAdvanceRun:
		more, err := s.advance(ctx, e.runID, e.view, e.current, false, e.handedOn)
		if e.armDeps {
			more = append(more, effect{kind: effArmDependencyTimeout, runID: e.runID, answer: e.answer})
		}
		return more, err
	case effArmDependencyTimeout:
		v, err := s.store.ReadRun(ctx, e.runID)
		if err != nil {
			return nil, err
		}
		s.jobs.ArmDependencyTimeout(ctx, v)
		if e.answer != nil {
			*e.answer = v
		}
	case effWakeDependents:
		ids, err := s.jobs.Dependents(ctx, *e.run)
		return advanceEach(ids), err
	case effAdvanceBackfill:
		return s.triggers.BackfillRunEnded(ctx, e.run)
	case effMapStep:
		return s.maps.Step(ctx, e.key)
	case effMapCancel:
		return s.maps.Cancel(ctx, e.key)
	case effAdmitNewRun:
		work, err := s.flow.AdmitNewRun(ctx, *e.view, e.answer, e.handedOn)
		return effectsOfWork(work), err
	}
	return nil, nil
}

// advanceEach is the advance of each run of runIDs: what a finished run's
// wake of its dependents yields.
func advanceEach(runIDs []string) []effect {
	var out []effect
	for _, id := range runIDs {
		out = append(out, effect{kind: effAdvanceRun, runID: id})
	}
	return out
}

// withAnswer has a new run's effects complete answer as they are
// performed (see effect.answer).
func withAnswer(effs []effect, answer *ledger.RunView) []effect {
	for i := range effs {
		effs[i].answer = answer
	}
	return effs
}

// answerDispatch puts the instance a new run's dispatch wrote into the
// answer it completes.
func answerDispatch(e effect, written ledger.Instance) {
	if e.answer == nil || e.task >= len(e.answer.Tasks) {
		return
	}
	t := &e.answer.Tasks[e.task]
	t.Instance = written
	t.Attempts = ledger.MergeAttempts(t.Attempts, written.Snapshot.Attempts)
}

func (k effectKind) String() string {
	switch k {
	case effDispatch:
		return "dispatch"
	case effAdvanceRun:
		return "advance_run"
	case effWakeDependents:
		return "wake_dependents"
	case effAdvanceBackfill:
		return "advance_backfill"
	case effArmDependencyTimeout:
		return "arm_dependency_timeout"
	case effMapStep:
		return "map_step"
	case effMapCancel:
		return "map_cancel"
	case effAdmitNewRun:
		return "admit_new_run"
	}
	return "unknown"
}

// effectsOf lists the effects of a transition result: what statemodel
// asked for. A task's start is not one: its run is shown RUNNING from its
// tasks when read (ledger.ShownRun), with no write. It reads and writes
// nothing.
func effectsOf(res ledger.Result) []effect {
	if res.Outcome != statemodel.Applied && !res.Stopped {
		return nil
	}
	key := res.Instance.Key
	var out []effect
	for _, e := range res.Effects {
		switch e.Kind {
		case statemodel.EffectDispatch:
			out = append(out, effect{kind: effDispatch, key: key, inst: res.Instance, runID: key.Run})
		case statemodel.EffectNotifyDownstream:
			if parent, ok := parentKey(key); ok {
				// A map child: its map moves on, not its run.
				out = append(out, effect{kind: effMapStep, key: parent, runID: key.Run})
				continue
			}
			out = append(out, effect{kind: effAdvanceRun, runID: key.Run})
		}
	}
	if tr := res.Transition; tr != nil && tr.To == statemodel.StateCancelling && len(res.Instance.Map) > 0 {
		out = append(out, effect{kind: effMapCancel, key: key, runID: key.Run})
	}
	return out
}

// follow handles a write's applied transitions and performs their effects.
func (s *Service) follow(ctx context.Context, res ledger.Result) {
	s.applied(ctx, res)
	if res.Outcome != statemodel.Applied {
		return
	}
	s.perform(ctx, effectsOf(res)...)
}

// withHeld returns the effects with the run view the caller holds attached
// to the advance of that run, so it starts from it instead of a read.
func withHeld(effs []effect, view ledger.RunView) []effect {
	for i := range effs {
		if effs[i].kind == effAdvanceRun && effs[i].runID == view.Run.ID && effs[i].view == nil {
			v := view
			effs[i].view = &v
		}
	}
	return effs
}
