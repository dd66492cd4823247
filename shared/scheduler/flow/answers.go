package flow

import (
	"context"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
	"github.com/runledger/runledger/statemodel/limiter"
)

// placeCounted bounds the queue an answer reads to give a waiting run's
// place: beyond it the place is left out.
const placeCounted = 1000

// Admission answers where a run stands in its limiters, for the run
// answer: nil for a job without limits. A run waiting in one of its
// limiters answers that limiter, why and its place there. A run admitted
// in every one answers its first limiter and the later admission's time.
// Its run item keeps that admission (Run.AdmittedIn, AdmittedAt,
// WaitingIn), so an ended run, and one admitted in its last limiter,
// answers without a limiter read: an ended run admitted answers when it
// was, one that ended waiting answers nil (never admitted).
func (r *Room) Admission(ctx context.Context, view ledger.RunView) (*protocol.Admission, error) {
	return r.admission(ctx, view, true)
}

// ListAdmissions is Admission for a page of runs, from the run items: a
// run not admitted in its last limiter waits where its item says (or in
// the limiter after the last that admitted it, its entry there under
// way), and its answer names no place (counting it reads up to
// placeCounted queue items). Only a reason the stage leaves open (a
// limiter holding both a limit and a rate) reads the limiter, once a page;
// a running run stored before runs kept their admission reads its
// limiters as Admission does.
func (r *Room) ListAdmissions(ctx context.Context, runs []ledger.Run) ([]*protocol.Admission, error) {
	out := make([]*protocol.Admission, len(runs))
	states := map[string]limiter.State{}
	for i, run := range runs {
		var err error
		if out[i], err = r.listAdmission(ctx, run, states); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *Room) listAdmission(ctx context.Context, run ledger.Run, states map[string]limiter.State) (*protocol.Admission, error) {
	_, stages := r.runStages(run)
	if len(stages) == 0 {
		return nil, nil
	}
	if a, ok := storedAdmission(ledger.RunView{Run: run}, stages); ok {
		return a, nil
	}
	if run.AdmittedIn == "" && run.WaitingIn == "" && run.ExecutionState != statemodel.RunQueued {
		return r.admission(ctx, ledger.RunView{Run: run}, false)
	}
	st := waitingStage(run, stages)
	why := ""
	if st.rate.On() && st.limit > 0 {
		lim, ok := states[st.name]
		if !ok {
			var err error
			if lim, err = r.store.GetLimiter(ctx, st.name); err != nil {
				return nil, err
			}
			states[st.name] = lim
		}
		why = limiter.ReasonConcurrency
		if lim.Active < lim.Limit {
			why = limiter.ReasonRateLimit
		}
	}
	return &protocol.Admission{State: protocol.AdmissionWaiting, Reason: st.reason(why), Limiter: st.name}, nil
}

// waitingStage is the stage an unfinished run not admitted in every
// limiter waits in, by its run item: the one it waits in, else the one
// after the last that admitted it (its entry under way), else the first.
func waitingStage(run ledger.Run, stages []stage) stage {
	for i, st := range stages {
		switch {
		case limiter.InGroup(run.WaitingIn, st.name):
			return st
		case run.WaitingIn == "" && limiter.InGroup(run.AdmittedIn, st.name) && i+1 < len(stages):
			return stages[i+1]
		}
	}
	return stages[0]
}

// admittedInEvery reports whether a run's item says it is admitted in
// each of its limiters (its last one admitted it, and it waits nowhere).
func admittedInEvery(run ledger.Run, stages []stage) bool {
	return run.WaitingIn == "" && !run.AdmittedAt.IsZero() && limiter.InGroup(run.AdmittedIn, stages[len(stages)-1].name)
}

func (r *Room) admission(ctx context.Context, view ledger.RunView, counted bool) (*protocol.Admission, error) {
	c, stages := r.runStages(view.Run)
	if len(stages) == 0 {
		return nil, nil
	}
	if a, ok := storedAdmission(view, stages); ok {
		return a, nil
	}
	place := runPlace(c, view.Run)
	var admittedAt time.Time
	for i, st := range stages {
		at, known := view.Entered[st.name]
		shard := st.name
		if !known {
			var err error
			if shard, at, err = r.findShard(ctx, view.Run, st, place); err != nil {
				return nil, err
			}
		}
		if at.Admitted {
			admittedAt = at.AdmittedAt
			continue
		}
		if at.Reason != "" {
			a := &protocol.Admission{State: protocol.AdmissionWaiting, Reason: st.reason(at.Reason), Limiter: st.name}
			if known || !counted {
				// The answer of the request that entered the run, and a
				// page of runs, name no place: counting it reads the
				// queue, up to placeCounted items, for every run that
				// waits. The run's own answer counts it.
				return a, nil
			}
			var err error
			a.Place, err = r.queuePlace(ctx, shard, place)
			return a, err
		}
		if i > 0 {
			// Admitted by the limiters before, its entry in this one is
			// under way.
			return &protocol.Admission{State: protocol.AdmissionWaiting, Reason: st.reason(""), Limiter: st.name}, nil
		}
		// In neither: not entered yet (nil), or it ended (or moved on)
		// since its run item was read.
		return nil, nil
	}
	return &protocol.Admission{State: protocol.AdmissionAdmitted, Limiter: stages[0].name, AdmittedAt: admittedAt}, nil
}

// storedAdmission is the admission a run item answers alone: admitted,
// when the run was admitted in its last limiter and waits nowhere since;
// for an ended run, nil too when it ended waiting. A run stored before runs
// kept their admission and ended answers admitted with no time once a task
// of it was dispatched.
func storedAdmission(view ledger.RunView, stages []stage) (*protocol.Admission, bool) {
	run := view.Run
	if admittedInEvery(run, stages) {
		return &protocol.Admission{State: protocol.AdmissionAdmitted, Limiter: stages[0].name, AdmittedAt: run.AdmittedAt}, true
	}
	if !run.ExecutionState.Terminal() {
		return nil, false
	}
	if run.AdmittedIn == "" && run.WaitingIn == "" {
		for _, t := range view.Tasks {
			if t.Instance.Snapshot.Attempt > 0 {
				return &protocol.Admission{State: protocol.AdmissionAdmitted, Limiter: stages[0].name}, true
			}
		}
	}
	return nil, true
}

// queuePlace is a waiting run's place in its limiter's queue (1: next),
// the paused passed over; 0 beyond placeCounted. In a group it is the
// place in its shard's queue: a hand-off admits within a shard.
func (r *Room) queuePlace(ctx context.Context, name string, p limiter.Place) (int, error) {
	ws, err := r.store.ListWaiting(ctx, name, placeCounted)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, w := range ws {
		if w.RunID == p.RunID {
			return n + 1, nil
		}
		if !w.Paused {
			n++
		}
	}
	return 0, nil
}
