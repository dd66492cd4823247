package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
	"github.com/runledger/runledger/statemodel/limiter"
)

// checkGroupLimits refuses j when a job of a group it names gives that
// group another limit (jobspec.CheckGroupLimit), before anything is
// written.
func (s *Service) checkGroupLimits(ctx context.Context, j jobspec.Job) error {
	if !namesGroup(j) {
		return nil
	}
	token := ""
	for {
		jobs, next, err := s.store.ListJobs(ctx, 100, token)
		if err != nil {
			return err
		}
		for _, lj := range jobs {
			other, err := s.compiled.of(lj.Spec)
			if err != nil {
				continue // not this package's to judge; LoadJob reports it
			}
			if err := jobspec.CheckGroupLimit(j, other.Job); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		token = next
	}
}

func namesGroup(j jobspec.Job) bool {
	if j.Concurrency != nil && j.Concurrency.Group != "" {
		return true
	}
	for _, t := range j.TaskDefs {
		if t.Concurrency != nil && t.Concurrency.Group != "" {
			return true
		}
	}
	return false
}

// A run of a job with a concurrency limit is created with every task
// CREATED and enters its limiter (ledger.Turns.EnterLimiter) the first time
// advance would release a root task: admitted, its roots are released as
// any run's; waiting, they stay CREATED and the run QUEUED. A run with two
// limiters (stagesOf) enters the second when the first admits it, the
// same way. The run that ends leaves its limiters and hands their room on
// (ledger.Turns.AdmitNext), and each run admitted then is advanced (and its
// tasks a retry held dispatched: flow_retry.go). A waiting run's CREATED tasks keep
// their re-evaluation timer: a pass that finds the run still waiting
// repairs its limiter (a run ended whose release was lost in a crash) and
// tries the queue again.

// stage is one limiter a run enters and the limits that limiter holds.
type stage struct {
	name  string
	limit int          // 0: no concurrency limit
	rate  limiter.Rate // the zero Rate: no rate limit
}

// reason is why a run waits in st, given the limiter's own answer
// (ledger.FindInLimiter reads it from the counters): a limiter without a
// rate holds runs only for concurrency, one without a limit only for rate.
func (st stage) reason(why string) string {
	switch {
	case !st.rate.On():
		return limiter.ReasonConcurrency
	case st.limit == 0:
		return limiter.ReasonRateLimit
	}
	return why
}

// runStages are the limiters a run enters, in order (none: a job without
// limits), and its job version compiled (nil: its spec does not load).
func runStages(jobs *compiledJobs, run ledger.Run) (*jobspec.Compiled, []stage) {
	c, err := jobs.of(run.Spec)
	if err != nil || !c.Job.Limited() {
		return c, nil
	}
	return c, stagesOf(c, run)
}

// stagesOf are the limiters a run of c enters (c is limited), in order.
// A job with one of concurrency and rate_limit enters that one's limiter.
// With both, when they name the same limiter (the same group or job and
// key) that one limiter holds both limits; when they name two, the run
// enters its concurrency limiter first and, once admitted there, its rate
// limiter: a run waiting for concurrency holds nothing, rate room is taken
// only by runs that have concurrency room, and a run admitted for
// concurrency that waits for its rate window keeps its concurrency room.
func stagesOf(c *jobspec.Compiled, run ledger.Run) []stage {
	j := c.Job
	var rated stage
	if j.RateLimit != nil {
		rated = stage{name: j.RateLimiterName(renderedKey(c.RateKey, run)), rate: j.RateLimit.Rate()}
	}
	if j.Concurrency == nil {
		return []stage{rated}
	}
	conc := stage{name: j.ConcurrencyLimiterName(renderedKey(c.ConcurrencyKey, run)), limit: j.Concurrency.Limit}
	switch {
	case j.RateLimit == nil:
		return []stage{conc}
	case rated.name == conc.name:
		conc.rate = rated.rate
		return []stage{conc}
	}
	return []stage{conc, rated}
}

// renderedKey is a limiter key of a run, rendered by one of its compiled
// job's keys; a run the scheduler started whose key fails to render falls
// back to "".
func renderedKey(render func(data any) (string, error), run ledger.Run) string {
	key, err := render(keyData(run))
	if err != nil {
		return ""
	}
	return key
}

// keyData is what a limiter key renders over: the names worker exec
// offers.
func keyData(run ledger.Run) map[string]any {
	var params any = map[string]any{}
	if len(run.Params) > 0 {
		_ = json.Unmarshal(run.Params, &params)
	}
	return map[string]any{
		"Job": run.Job, "Run": run.ID, "Params": params, "Trigger": string(run.Trigger),
		"LogicalTime": protocol.FormatTime(run.LogicalTime), "LogicalDate": run.LogicalTime.UTC().Format(time.DateOnly),
	}
}

// startPriority is the priority a new run is stored with: the request's,
// else the job's (a backfill's run: one step lower, at most 5).
func startPriority(j jobspec.Job, req TriggerRequest) int {
	switch {
	case req.Priority != 0:
		return req.Priority
	case req.Trigger == statemodel.TriggerBackfill:
		return j.BackfillPriority()
	}
	return j.Priority
}

// RunPriority is a run's priority: the one it was stored with, else (a run
// stored before runs kept it) its job's, a backfill's run one step lower.
// The API's views call it without a Service: such a run's spec is
// compiled for the call, and the scheduler's own passes use runPriority
// with the compiled job they hold.
func RunPriority(run ledger.Run) int {
	if run.Priority != 0 {
		return run.Priority
	}
	c, _ := compileSpec(run.Spec)
	return runPriority(c, run)
}

// runPriority is RunPriority with run's job version compiled (nil: its
// spec does not load).
func runPriority(c *jobspec.Compiled, run ledger.Run) int {
	switch {
	case run.Priority != 0:
		return run.Priority
	case c == nil || c.Job.Priority == 0:
		return limiter.PriorityDefault
	case run.BackfillID != "":
		return c.Job.BackfillPriority()
	}
	return c.Job.Priority
}

// runPlace is a run's place in its limiter's queue.
func runPlace(c *jobspec.Compiled, run ledger.Run) limiter.Place {
	return limiter.Place{Priority: runPriority(c, run), CreatedAt: run.CreatedAt, RunID: run.ID}
}

// admission answers, once per evaluation, whether a run may release its
// root tasks.
type admission struct {
	decided, ok bool
	fresh       bool     // see entering
	handedOn    *handOff // see entering
}

func (a *admission) admitted(ctx context.Context, s *Service, run ledger.Run) (bool, error) {
	if a.decided {
		return a.ok, nil
	}
	ok, err := s.enterStages(ctx, run, entering{live: true, fresh: a.fresh, handedOn: a.handedOn})
	if err != nil {
		return false, err
	}
	a.decided, a.ok = true, ok
	return ok, nil
}

// admitRun enters run in its limiters unless it is there already, and
// reports whether it is admitted in every one.
func (s *Service) admitRun(ctx context.Context, run ledger.Run) (bool, error) {
	return s.enterStages(ctx, run, entering{live: true})
}

// entering says how enterStages enters a run. live: the entry lands only
// while the run is unfinished (ledger.Entry.Live), so a run that ended
// before its entry never holds room (an operator's retry enters an ended
// run before it reopens it, so it passes false). fresh: no task of the
// run was ever dispatched (a run just created, or one that waits), so its
// entry is tried without looking for it first: the entry's own conditions
// find a run that is in the limiter already. seen, when not nil, gets
// where each entry put the run, by limiter. handedOn: the hand-off whose
// effects enter the run (nil: none); a limiter it admitted the run in is
// not entered again.
type entering struct {
	live, fresh bool
	seen        map[string]ledger.Entered
	handedOn    *handOff
}

// admitNewRun enters a new run of a limited job (one that waits on no
// other job's runs) in its limiters, from the view its creating write
// returned: no read, and the answer (e.answer) learns where the entries
// put it. Admitted, its root tasks are dispatched as a single-task run's
// are, their verdict riding in the dispatch's write: this entry's write
// admitted the run, once; only a CREATED task's timer pass could decide
// them besides, and it writes its verdict before it sends. Waiting, its
// tasks stay CREATED until a hand-off admits it.
func (s *Service) admitNewRun(ctx context.Context, e effect) ([]effect, error) {
	how := entering{live: true, fresh: true, seen: map[string]ledger.Entered{}, handedOn: e.handedOn}
	ok, err := s.enterStages(ctx, e.view.Run, how)
	if e.answer != nil {
		e.answer.Entered = how.seen
	}
	if err != nil || !ok {
		return nil, err
	}
	run := e.view.Run
	var effs []effect
	for i, t := range e.view.Tasks {
		inst := t.Instance
		if inst.Snapshot.State != statemodel.StateCreated || len(inst.DependsOn) > 0 {
			continue
		}
		effs = append(effs, effect{kind: effDispatch, key: inst.Key, inst: inst, run: &run, runID: run.ID,
			depsMet: true, soleVerdict: true, task: i, answer: e.answer})
	}
	return effs, nil
}

// neverDispatched reports whether no task of view was ever dispatched.
func neverDispatched(view ledger.RunView) bool {
	for _, t := range view.Tasks {
		if t.Instance.Snapshot.Attempt > 0 {
			return false
		}
	}
	return true
}

// enterStages enters run in each of its limiters in order, the next one
// only once the one before admitted it, and reports whether every one
// admitted it.
func (s *Service) enterStages(ctx context.Context, run ledger.Run, how entering) (bool, error) {
	c, stages := runStages(&s.compiled, run)
	place := runPlace(c, run)
	for _, st := range stages {
		ok, err := s.admitStage(ctx, run, st, place, how)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// admitStage enters run in one of its limiters unless it is there
// already, and reports whether that limiter admitted it.
func (s *Service) admitStage(ctx context.Context, run ledger.Run, st stage, place limiter.Place, how entering) (bool, error) {
	if how.handedOn.admittedIn(st.name, run.ID) {
		return true, nil // admitted by the hand-off that advances it
	}
	var at ledger.Entered
	if !how.fresh {
		var err error
		if at, err = ledger.FindInLimiter(ctx, s.store, st.name, place); err != nil {
			return false, err
		}
	}
	if at.Admitted {
		return true, nil
	}
	if at.Reason != "" {
		// Still waiting: repair a hand-off lost in a crash (or take the
		// room a rate window freed). A run the repair admits was advanced
		// by its hand-off (handOn), which released its tasks: this caller
		// treats it as waiting, so they are not dispatched twice.
		return false, s.repairLimiter(ctx, st.name, st.rate, how.handedOn)
	}
	e, err := s.turns.EnterLimiter(ctx, s.store, ledger.Entry{Limiter: st.name, Limit: st.limit, Rate: st.rate, Place: place, Live: how.live, MarkRun: true}, s.now())
	switch {
	case errors.Is(err, ledger.ErrLimitQueueFull):
		// Created past checkAdmissible's look by a racing trigger: it
		// tries again at its timer's next pass.
		return false, nil
	case errors.Is(err, ledger.ErrRunEnded):
		// Ended (a cancel) since this caller's view: it holds no room.
		// One that ends after its entry landed is released by its ender,
		// who finds it entered.
		return false, nil
	case err != nil:
		return false, err
	}
	if how.seen != nil {
		how.seen[st.name] = e
	}
	if e.Found && !e.Admitted {
		// Waiting already (a fresh entry tried without a look): as found
		// waiting above.
		return false, s.repairLimiter(ctx, st.name, st.rate, how.handedOn)
	}
	if e.Found {
		return true, nil
	}
	if st.reason(e.Reason) == limiter.ReasonRateLimit {
		s.armRateTimer(ctx, st.name, st.rate)
	}
	return e.Admitted, nil
}

// repairLimiter releases the room of admitted runs that ended (a release
// lost between a run's end and its handler's next write) and hands the
// room on. outer: the hand-off whose effects repair it (nil: none).
func (s *Service) repairLimiter(ctx context.Context, name string, rate limiter.Rate, outer *handOff) error {
	adm, err := s.store.ListAdmitted(ctx, name)
	if err != nil {
		return err
	}
	for _, a := range adm {
		r, err := s.store.GetRun(ctx, a.RunID)
		if errors.Is(err, ledger.ErrNotFound) || (err == nil && r.ExecutionState.Terminal()) {
			if _, err := s.turns.LeaveLimiter(ctx, s.store, name, a.RunID); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return s.handOn(ctx, name, rate, outer)
}

// handOn admits the limiter's next runs while it has room, and advances
// each, which releases its root tasks. When runs still wait for the rate
// window, a timer is armed at the window's edge. outer: the hand-off
// whose effects hand on (nil: none).
func (s *Service) handOn(ctx context.Context, name string, rate limiter.Rate, outer *handOff) error {
	got, err := s.turns.AdmitNext(ctx, s.store, name, rate, s.now())
	return s.handedOn(ctx, outer, name, rate, got, err)
}

// handedOn advances the runs a hand-off admitted (err: the hand-off's) and
// arms the rate timer. The advances, and the dispatches of tasks a retry
// held, carry what it admitted (handOff), with outer's.
func (s *Service) handedOn(ctx context.Context, outer *handOff, name string, rate limiter.Rate, got []ledger.Admitted, err error) error {
	h := outer.then(name, got)
	var effs []effect
	for _, a := range got {
		// One read after the admission: its held tasks' dispatches, and
		// the advance that releases its roots decides on it.
		view, err := s.store.ReadRun(ctx, a.RunID)
		if err != nil {
			effs = append(effs, effect{kind: effAdvanceRun, runID: a.RunID, handedOn: h})
			continue
		}
		if held := heldDispatches(view); len(held) > 0 {
			// Admitted here; a run with a second limiter enters it first.
			if ok, err := s.enterStages(ctx, view.Run, entering{live: true, handedOn: h}); err == nil && ok {
				for i := range held {
					held[i].handedOn = h
				}
				effs = append(effs, held...)
			}
		}
		effs = append(effs, effect{kind: effAdvanceRun, runID: a.RunID, view: &view, current: true, handedOn: h})
	}
	s.perform(ctx, effs...)
	if err == nil && rate.On() {
		s.armRateTimer(ctx, name, rate)
	}
	return err
}

// armRateTimer arms, when the limiter's queue waits for its rate window,
// the first waiting run's timer at the window's edge: its pass admits the
// queue's head then (no write frees rate room, and nothing polls). A lost
// timer message is repaired by the run's backstop.
func (s *Service) armRateTimer(ctx context.Context, name string, rate limiter.Rate) {
	st, err := s.store.GetLimiter(ctx, name)
	if err != nil || st.Waiting == 0 {
		return
	}
	now := s.now()
	if ok, why := st.Room(rate, now); ok || why != limiter.ReasonRateLimit {
		return
	}
	ws, err := s.store.ListWaiting(ctx, name, 1)
	if err != nil || len(ws) == 0 {
		return
	}
	s.armTimer(ctx, ledger.InstanceKey{Run: ws[0].RunID}, st.RateRoomAt(rate, now))
}

// releaseRun gives an ended run's room back in each of its limiters, the
// last entered first (or takes it out of a queue, when it ended waiting:
// cancelled), and hands the room on. outer: the hand-off whose effects
// ended the run (nil: none).
func (s *Service) releaseRun(ctx context.Context, run ledger.Run, outer *handOff) {
	c, stages := runStages(&s.compiled, run)
	place := runPlace(c, run)
	for i := len(stages) - 1; i >= 0; i-- {
		s.releaseStage(ctx, run.ID, place, stages[i], outer)
	}
}

// releaseStage is releaseRun in one limiter.
func (s *Service) releaseStage(ctx context.Context, runID string, place limiter.Place, st stage, outer *handOff) {
	// The run is admitted, waiting or neither; a hand-off may admit it
	// between a look at one and the other, so look until one write lands
	// or it is in neither.
	var err error
	handed := false
	for range 3 {
		var left, withdrawn bool
		var got []ledger.Admitted
		// Leaving and handing on in one turn: the hand-off decides on the
		// state the leave wrote. Leaves written together hand on once,
		// by the turn's holder, whose own run may not have left.
		left, got, err = s.turns.LeaveAndAdmitNext(ctx, s.store, st.name, runID, st.rate, s.now())
		if err != nil || left {
			err, handed = s.handedOn(ctx, outer, st.name, st.rate, got, err), true
			break
		}
		if len(got) > 0 {
			s.handedOn(ctx, outer, st.name, st.rate, got, nil)
		}
		if withdrawn, err = s.turns.WithdrawWaiting(ctx, s.store, st.name, place); err != nil || withdrawn {
			break
		}
	}
	if err == nil && !handed {
		err = s.handOn(ctx, st.name, st.rate, outer)
	}
	if err != nil {
		// The next waiting run's re-evaluation repairs it.
		s.log.WarnContext(ctx, "limiter hand-off failed", "run_id", runID, "limiter", st.name, "error", err.Error())
	}
}

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
func (s *Service) Admission(ctx context.Context, view ledger.RunView) (*protocol.Admission, error) {
	return s.admission(ctx, view, true)
}

// ListAdmissions is Admission for a page of runs, from the run items: a
// run not admitted in its last limiter waits where its item says (or in
// the limiter after the last that admitted it, its entry there under
// way), and its answer names no place (counting it reads up to
// placeCounted queue items). Only a reason the stage leaves open (a
// limiter holding both a limit and a rate) reads the limiter, once a page;
// a running run stored before runs kept their admission reads its
// limiters as Admission does.
func (s *Service) ListAdmissions(ctx context.Context, runs []ledger.Run) ([]*protocol.Admission, error) {
	out := make([]*protocol.Admission, len(runs))
	states := map[string]limiter.State{}
	for i, run := range runs {
		var err error
		if out[i], err = s.listAdmission(ctx, run, states); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Service) listAdmission(ctx context.Context, run ledger.Run, states map[string]limiter.State) (*protocol.Admission, error) {
	_, stages := runStages(&s.compiled, run)
	if len(stages) == 0 {
		return nil, nil
	}
	if a, ok := storedAdmission(ledger.RunView{Run: run}, stages); ok {
		return a, nil
	}
	if run.AdmittedIn == "" && run.WaitingIn == "" && run.ExecutionState != statemodel.RunQueued {
		return s.admission(ctx, ledger.RunView{Run: run}, false)
	}
	st := waitingStage(run, stages)
	why := ""
	if st.rate.On() && st.limit > 0 {
		lim, ok := states[st.name]
		if !ok {
			var err error
			if lim, err = s.store.GetLimiter(ctx, st.name); err != nil {
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
		case run.WaitingIn == st.name:
			return st
		case run.WaitingIn == "" && run.AdmittedIn == st.name && i+1 < len(stages):
			return stages[i+1]
		}
	}
	return stages[0]
}

// admittedInEvery reports whether a run's item says it is admitted in
// each of its limiters (its last one admitted it, and it waits nowhere).
func admittedInEvery(run ledger.Run, stages []stage) bool {
	return run.WaitingIn == "" && !run.AdmittedAt.IsZero() && run.AdmittedIn == stages[len(stages)-1].name
}

func (s *Service) admission(ctx context.Context, view ledger.RunView, counted bool) (*protocol.Admission, error) {
	c, stages := runStages(&s.compiled, view.Run)
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
		if !known {
			var err error
			if at, err = ledger.FindInLimiter(ctx, s.store, st.name, place); err != nil {
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
			a.Place, err = s.queuePlace(ctx, st.name, place)
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
// the paused passed over; 0 beyond placeCounted.
func (s *Service) queuePlace(ctx context.Context, name string, p limiter.Place) (int, error) {
	ws, err := s.store.ListWaiting(ctx, name, placeCounted)
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

// checkAdmissible refuses a new run of a limited job before anything is
// written: a manual run whose key fails to render (422 naming
// concurrency.key), and any run whose limiter already has
// limiter.MaxWaiting runs waiting (ledger.ErrLimitQueueFull: a trigger's
// 429, a schedule slot's missed slot). Triggers racing past this look are
// held by the entry's own conditional write (EnterLimiter refuses beyond
// the bound); such a run waits for its timer's next pass.
func (s *Service) checkAdmissible(ctx context.Context, j jobspec.Job, nr ledger.NewRun) error {
	if !j.Limited() {
		return nil
	}
	probe := ledger.Run{ID: nr.ID, Job: nr.Job, LogicalTime: nr.LogicalTime, Params: nr.Params, Trigger: nr.Trigger, Spec: nr.Spec}
	c := jobspec.Compile(j)
	if nr.Trigger == statemodel.TriggerManual {
		if err := checkKeys(c, probe); err != nil {
			return err
		}
	}
	for _, lim := range stagesOf(c, probe) {
		full, err := s.turns.QueueFull(ctx, s.store, lim.name)
		if err != nil {
			return err
		}
		if full {
			return fmt.Errorf("start run of %s: limiter %s: %w", j.Name, lim.name, ledger.ErrLimitQueueFull)
		}
	}
	return nil
}

// checkKeys refuses a manual run whose concurrency or rate_limit key fails
// to render: a 422 naming the key's field.
func checkKeys(c *jobspec.Compiled, probe ledger.Run) error {
	keys := map[string]func(data any) (string, error){}
	if c.Job.Concurrency != nil {
		keys["concurrency.key"] = c.ConcurrencyKey
	}
	if c.Job.RateLimit != nil {
		keys["rate_limit.key"] = c.RateKey
	}
	for _, field := range []string{"concurrency.key", "rate_limit.key"} {
		render, ok := keys[field]
		if !ok {
			continue
		}
		if _, err := render(keyData(probe)); err != nil {
			return &jobspec.Error{Code: protocol.CodeInvalidField, Field: field,
				Message: fmt.Sprintf("%s does not render for this run: %v.", field, err)}
		}
	}
	return nil
}

// applyLimit stores an updated job's concurrency limit in the limiters its
// unfinished runs stand in (its key-less limiter: no read) and hands on the
// room a raised limit makes, in the update's request: waiting runs are
// admitted at once. Lowering a limit stops nothing already active. A
// limiter it fails to reach is set by the next run that enters it.
func (s *Service) applyLimit(ctx context.Context, j jobspec.Job) {
	if j.Concurrency == nil {
		return
	}
	// Each limiter by name, with the rate it holds too (one limiter
	// holding both limits).
	names := map[string]limiter.Rate{}
	c := jobspec.Compile(j)
	if j.Concurrency.Key == "" {
		st := stagesOf(c, ledger.Run{Job: j.Name})[0]
		names[st.name] = st.rate
	} else {
		runs, err := s.store.ListUnfinishedRuns(ctx, j.Name)
		if err != nil {
			s.log.WarnContext(ctx, "limit change: runs not read", "job", j.Name, "error", err.Error())
			return
		}
		for _, u := range runs {
			r, err := s.store.GetRun(ctx, u.ID) // its params render its key
			if err != nil {
				continue // ended and gone since
			}
			st := stagesOf(c, r)[0]
			names[st.name] = st.rate
		}
	}
	for name, rate := range names {
		if _, err := s.turns.SetLimiterLimit(ctx, s.store, name, j.Concurrency.Limit); err != nil {
			s.log.WarnContext(ctx, "limit change not stored", "job", j.Name, "limiter", name, "error", err.Error())
			continue
		}
		if err := s.handOn(ctx, name, rate, nil); err != nil {
			s.log.WarnContext(ctx, "limit change: hand-off failed", "job", j.Name, "limiter", name, "error", err.Error())
		}
	}
}

// handOff is what a hand-off admitted, for the effects it performs: the
// runs it admitted in one limiter, and outer, the hand-off whose effects
// made this one (nil: none). Their evaluation knows them admitted there
// without an entry or a look (an admitted run stays so until it ends, and
// its end releases it). It travels on the hand-off's effects and on those
// they yield (effect.handedOn), and in the calls that enter and release
// runs; a nil *handOff admitted nothing.
type handOff struct {
	limiter string
	runs    map[string]bool
	outer   *handOff
}

// then is what a hand-off in limiter name that admitted got, made by h's
// effects, carries: h itself when it admitted nobody.
func (h *handOff) then(name string, got []ledger.Admitted) *handOff {
	if len(got) == 0 {
		return h
	}
	n := &handOff{limiter: name, runs: map[string]bool{}, outer: h}
	for _, a := range got {
		n.runs[a.RunID] = true
	}
	return n
}

// admitted reports whether h, or a hand-off around it, admitted runID, in
// any limiter.
func (h *handOff) admitted(runID string) bool {
	for ; h != nil; h = h.outer {
		if h.runs[runID] {
			return true
		}
	}
	return false
}

// admittedIn reports whether h, or a hand-off around it, admitted runID in
// limiter name.
func (h *handOff) admittedIn(name, runID string) bool {
	for ; h != nil; h = h.outer {
		if h.limiter == name && h.runs[runID] {
			return true
		}
	}
	return false
}
