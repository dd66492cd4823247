package flow

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
	"github.com/runledger/runledger/statemodel/limiter"
)

// A run of a job with a concurrency limit is created with every task
// CREATED and enters its limiter (ledger.Turns.EnterLimiter) the first time
// advance would release a root task: admitted, its roots are released as
// any run's; waiting, they stay CREATED and the run QUEUED. A run with two
// limiters (stagesOf) enters the second when the first admits it, the
// same way. The run that ends leaves its limiters and hands their room on
// (ledger.Turns.AdmitNext), and each run admitted then is advanced (and its
// tasks a retry held dispatched: retry.go). A waiting run's CREATED
// tasks keep their re-evaluation timer: a pass that finds the run still waiting
// repairs its limiter (a run ended whose release was lost in a crash) and
// tries the queue again.

// stage is one limiter a run enters and the limits that limiter holds.
type stage struct {
	name  string
	limit int          // 0: no concurrency limit
	rate  limiter.Rate // the zero Rate: no rate limit
}

// grouped reports whether st's limiter is a group of shard limiters
// (docs/store.md, "A group with a large limit"): a concurrency limit above
// what one limiter item holds. A rate window is never sharded, so a
// limiter holding both limits stays one item.
func (st stage) grouped() bool {
	return st.limit > limiter.ShardLimit && !st.rate.On()
}

// queueOf is the limiter whose queue run would wait in: st's own, or in a
// group the run's home shard, where its entry waits when no shard admits
// it (ledger.Turns.EnterGroup). The bound of limiter.MaxWaiting holds in
// each shard's queue.
func (st stage) queueOf(run string) string {
	if !st.grouped() {
		return st.name
	}
	return limiter.ShardName(st.name, limiter.Home(run, limiter.Shards(st.limit)))
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
func (r *Room) runStages(run ledger.Run) (*jobspec.Compiled, []stage) {
	c, err := r.k.Compiled(run.Spec)
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

// StartPriority is the priority a new run is stored with: the one its
// trigger asked for (0: none), else the job's (a backfill's run: one step
// lower, at most 5).
func StartPriority(j jobspec.Job, asked int, trigger statemodel.Trigger) int {
	switch {
	case asked != 0:
		return asked
	case trigger == statemodel.TriggerBackfill:
		return j.BackfillPriority()
	}
	return j.Priority
}

// Priority is a run's priority, with its job version compiled (nil: its
// spec does not load): the one it was stored with, else (a run stored
// before runs kept it) its job's, a backfill's run one step lower.
func Priority(c *jobspec.Compiled, run ledger.Run) int {
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
	return limiter.Place{Priority: Priority(c, run), CreatedAt: run.CreatedAt, RunID: run.ID}
}

// Gate answers, once per evaluation of a run, whether the run may release
// its tasks.
type Gate struct {
	r           *Room
	decided, ok bool
	fresh       bool     // see entering
	handedOn    *HandOff // see entering
}

// Gate is the admission of an evaluation of view, whose effects are part
// of h (nil: none).
func (r *Room) Gate(view ledger.RunView, h *HandOff) *Gate {
	return &Gate{r: r, fresh: neverDispatched(view), handedOn: h}
}

// Admitted enters run in its limiters unless it is there already, the
// first time it is asked, and reports whether every one admitted it.
func (g *Gate) Admitted(ctx context.Context, run ledger.Run) (bool, error) {
	if g.decided {
		return g.ok, nil
	}
	ok, err := g.r.enterStages(ctx, run, entering{live: true, fresh: g.fresh, handedOn: g.handedOn})
	if err != nil {
		return false, err
	}
	g.decided, g.ok = true, ok
	return ok, nil
}

// admitRun enters run in its limiters unless it is there already, and
// reports whether it is admitted in every one.
func (r *Room) admitRun(ctx context.Context, run ledger.Run) (bool, error) {
	return r.enterStages(ctx, run, entering{live: true})
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
	handedOn    *HandOff
}

// AdmitNewRun enters a new run of a limited job (one that waits on no
// other job's runs) in its limiters, from the view its creating write
// returned: no read, and answer (nil: nobody waits for one) learns where
// the entries put it. h: the hand-off whose effects start the run (nil:
// none). Admitted, its root tasks are dispatched as a single-task run's
// are, their verdict riding in the dispatch's write: this entry's write
// admitted the run, once; only a CREATED task's timer pass could decide
// them besides, and it writes its verdict before it sends. Waiting, its
// tasks stay CREATED until a hand-off admits it.
func (r *Room) AdmitNewRun(ctx context.Context, view ledger.RunView, answer *ledger.RunView, h *HandOff) ([]Work, error) {
	how := entering{live: true, fresh: true, seen: map[string]ledger.Entered{}, handedOn: h}
	ok, err := r.enterStages(ctx, view.Run, how)
	if answer != nil {
		answer.Entered = how.seen
	}
	if err != nil || !ok {
		return nil, err
	}
	run := view.Run
	var work []Work
	for i, t := range view.Tasks {
		inst := t.Instance
		if inst.Snapshot.State != statemodel.StateCreated || len(inst.DependsOn) > 0 {
			continue
		}
		work = append(work, Work{Kind: Dispatch, Inst: inst, Run: &run, DepsMet: true, SoleVerdict: true, Task: i, Answer: answer})
	}
	return work, nil
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
func (r *Room) enterStages(ctx context.Context, run ledger.Run, how entering) (bool, error) {
	c, stages := r.runStages(run)
	place := runPlace(c, run)
	for _, st := range stages {
		ok, err := r.admitStage(ctx, run, st, place, how)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// admitStage enters run in one of its limiters unless it is there
// already, and reports whether that limiter admitted it.
func (r *Room) admitStage(ctx context.Context, run ledger.Run, st stage, place limiter.Place, how entering) (bool, error) {
	if how.handedOn.admittedIn(st.name, run.ID) {
		return true, nil // admitted by the hand-off that advances it
	}
	var at ledger.Entered
	shard := st.name
	if !how.fresh {
		var err error
		if shard, at, err = r.findShard(ctx, run, st, place); err != nil {
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
		return false, r.repairShard(ctx, st, shard, how.handedOn)
	}
	e, err := r.enter(ctx, st, ledger.Entry{Limiter: st.name, Limit: st.limit, Rate: st.rate, Place: place, Live: how.live, MarkRun: true}, how.handedOn)
	switch {
	case errors.Is(err, ledger.ErrLimitQueueFull):
		// Created past CheckAdmissible's look by a racing trigger: it
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
		how.seen[st.name] = e.Entered
	}
	if e.Found && !e.Admitted {
		// Waiting already (a fresh entry tried without a look): as found
		// waiting above.
		return false, r.repairShard(ctx, st, e.Shard, how.handedOn)
	}
	if e.Found {
		return true, nil
	}
	if st.reason(e.Reason) == limiter.ReasonRateLimit {
		r.armRateTimer(ctx, st.name, st.rate)
	}
	return e.Admitted, nil
}

// enter is e's entry in st's limiter: one limiter item as always, or for
// a group (st.grouped, or a limit lowered since the group was made:
// ledger.ErrGrouped) the entry that tries its shards; the runs a group's
// borrow admitted elsewhere are handed on (their advance releases them).
func (r *Room) enter(ctx context.Context, st stage, e ledger.Entry, outer *HandOff) (ledger.GroupEntered, error) {
	if !st.grouped() {
		en, err := r.turns.EnterLimiter(ctx, r.store, e, r.now())
		if !errors.Is(err, ledger.ErrGrouped) {
			return ledger.GroupEntered{Entered: en, Shard: st.name}, err
		}
	}
	ge, err := r.turns.EnterGroup(ctx, r.store, e, r.now())
	for shard, got := range ge.Borrowed {
		if herr := r.handedOn(ctx, outer, shard, limiter.Rate{}, got, nil); herr != nil {
			r.log.WarnContext(ctx, "limiter hand-off failed", "limiter", shard, "error", herr.Error())
		}
	}
	return ge, err
}

// findShard is where run stands in st's limiter: the limiter (a group's
// shard) and the run's entry there, the zero Entered when it is in
// neither queue nor room. A run stays in the shard it entered (a
// hand-off admits within its shard; a borrow moves share, not runs), and
// its item records that shard (Run.WaitingIn, AdmittedIn) unless a later
// limiter's mark replaced it: only then are the shards looked at in turn,
// from the run's home.
func (r *Room) findShard(ctx context.Context, run ledger.Run, st stage, place limiter.Place) (string, ledger.Entered, error) {
	if held := heldShard(run, st); held != "" {
		at, err := ledger.FindInLimiter(ctx, r.store, held, place)
		return held, at, err
	}
	if !st.grouped() {
		at, err := ledger.FindInLimiter(ctx, r.store, st.name, place)
		return st.name, at, err
	}
	first, err := r.store.GetLimiter(ctx, st.name)
	if err != nil {
		return "", ledger.Entered{}, err
	}
	n := first.GroupShards()
	for _, sh := range limiter.Order(limiter.Home(run.ID, n), n) {
		name := limiter.ShardName(st.name, sh)
		at, err := ledger.FindInLimiter(ctx, r.store, name, place)
		if err != nil || at.Admitted || at.Reason != "" {
			return name, at, err
		}
	}
	return st.name, ledger.Entered{}, nil
}

// repairShard is repairLimiter in the limiter (a group's shard) a run was
// found waiting in; a group's repair then moves share to shards that are
// short (Rebalance), which repairs a borrow lost in a crash.
func (r *Room) repairShard(ctx context.Context, st stage, shard string, outer *HandOff) error {
	if err := r.repairLimiter(ctx, shard, st.rate, outer); err != nil {
		return err
	}
	if shard == st.name && !st.grouped() {
		return nil
	}
	return r.rebalance(ctx, st.name, outer)
}

// rebalance moves a group's idle share to its shards that are short
// (ledger.Turns.Rebalance) and hands on the runs that admits.
func (r *Room) rebalance(ctx context.Context, group string, outer *HandOff) error {
	got, err := r.turns.Rebalance(ctx, r.store, group, r.now())
	for shard, adm := range got {
		if herr := r.handedOn(ctx, outer, shard, limiter.Rate{}, adm, nil); herr != nil && err == nil {
			err = herr
		}
	}
	return err
}

// repairLimiter releases the room of admitted runs that ended (a release
// lost between a run's end and its handler's next write) and hands the
// room on. outer: the hand-off whose effects repair it (nil: none).
func (r *Room) repairLimiter(ctx context.Context, name string, rate limiter.Rate, outer *HandOff) error {
	adm, err := r.store.ListAdmitted(ctx, name)
	if err != nil {
		return err
	}
	for _, a := range adm {
		found, err := r.store.GetRun(ctx, a.RunID)
		if errors.Is(err, ledger.ErrNotFound) || (err == nil && found.ExecutionState.Terminal()) {
			if _, err := r.turns.LeaveLimiter(ctx, r.store, name, a.RunID); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return r.handOn(ctx, name, rate, outer)
}

// handOn admits the limiter's next runs while it has room, and advances
// each, which releases its root tasks. When runs still wait for the rate
// window, a timer is armed at the window's edge. outer: the hand-off
// whose effects hand on (nil: none).
func (r *Room) handOn(ctx context.Context, name string, rate limiter.Rate, outer *HandOff) error {
	got, err := r.turns.AdmitNext(ctx, r.store, name, rate, r.now())
	return r.handedOn(ctx, outer, name, rate, got, err)
}

// handedOn advances the runs a hand-off admitted (err: the hand-off's) and
// arms the rate timer. The advances, and the dispatches of tasks a retry
// held, carry what it admitted (HandOff), with outer's.
func (r *Room) handedOn(ctx context.Context, outer *HandOff, name string, rate limiter.Rate, got []ledger.Admitted, err error) error {
	h := outer.then(name, got)
	var work []Work
	for _, a := range got {
		// One read after the admission: its held tasks' dispatches, and
		// the advance that releases its roots decides on it.
		view, err := r.store.ReadRun(ctx, a.RunID)
		if err != nil {
			work = append(work, Work{Kind: Advance, RunID: a.RunID, HandOff: h})
			continue
		}
		if held := heldDispatches(view); len(held) > 0 {
			// Admitted here; a run with a second limiter enters it first.
			if ok, err := r.enterStages(ctx, view.Run, entering{live: true, handedOn: h}); err == nil && ok {
				for i := range held {
					held[i].HandOff = h
				}
				work = append(work, held...)
			}
		}
		work = append(work, Work{Kind: Advance, RunID: a.RunID, View: &view, HandOff: h})
	}
	r.k.Perform(ctx, work...)
	if err == nil && rate.On() {
		r.armRateTimer(ctx, name, rate)
	}
	return err
}

// armRateTimer arms, when the limiter's queue waits for its rate window,
// the first waiting run's timer at the window's edge: its pass admits the
// queue's head then (no write frees rate room, and nothing polls). A lost
// timer message is repaired by the run's backstop.
func (r *Room) armRateTimer(ctx context.Context, name string, rate limiter.Rate) {
	st, err := r.store.GetLimiter(ctx, name)
	if err != nil || st.Waiting == 0 {
		return
	}
	now := r.now()
	if ok, why := st.Room(rate, now); ok || why != limiter.ReasonRateLimit {
		return
	}
	ws, err := r.store.ListWaiting(ctx, name, 1)
	if err != nil || len(ws) == 0 {
		return
	}
	r.k.ArmTimer(ctx, ledger.InstanceKey{Run: ws[0].RunID}, st.RateRoomAt(rate, now))
}

// ReleaseRun gives an ended run's room back in each of its limiters, the
// last entered first (or takes it out of a queue, when it ended waiting:
// cancelled), and hands the room on. outer: the hand-off whose effects
// ended the run (nil: none).
func (r *Room) ReleaseRun(ctx context.Context, run ledger.Run, outer *HandOff) {
	c, stages := r.runStages(run)
	place := runPlace(c, run)
	for i := len(stages) - 1; i >= 0; i-- {
		r.releaseStage(ctx, run, place, stages[i], outer)
	}
}

// releaseStage is ReleaseRun in one limiter: in a group, in the shard the
// run stands in (its item says which: no look), and a leave that turns
// that shard's room idle lends it to shards that are short (rebalance).
func (r *Room) releaseStage(ctx context.Context, run ledger.Run, place limiter.Place, st stage, outer *HandOff) {
	name, grouped := st.name, st.grouped()
	if held := heldShard(run, st); held != "" {
		name, grouped = held, grouped || held != st.name
	} else if grouped {
		shard, at, err := r.findShard(ctx, run, st, place)
		if err != nil {
			r.log.WarnContext(ctx, "limiter release: run not found", "run_id", run.ID, "limiter", st.name, "error", err.Error())
			return
		}
		if !at.Admitted && at.Reason == "" {
			return // in no shard: released already
		}
		name = shard
	}
	lends, err := r.releaseIn(ctx, run.ID, place, name, st.rate, outer)
	if err == nil && grouped && lends {
		err = r.rebalance(ctx, st.name, outer)
	}
	if err != nil {
		// The next waiting run's re-evaluation repairs it.
		r.log.WarnContext(ctx, "limiter hand-off failed", "run_id", run.ID, "limiter", name, "error", err.Error())
	}
}

// heldShard is the limiter of st (st itself, or one of its group's
// shards) the run's item says it waits or was last admitted in; "" when
// the item names another limiter (a later stage's mark replaced it).
func heldShard(run ledger.Run, st stage) string {
	for _, held := range []string{run.WaitingIn, run.AdmittedIn} {
		if held != "" && limiter.InGroup(held, st.name) {
			return held
		}
	}
	return ""
}

// releaseIn takes runID out of limiter name, admitted or waiting, and
// hands the room on; lends: the leave left the limiter idle room it had
// not before (ledger.Left.Lends).
func (r *Room) releaseIn(ctx context.Context, runID string, place limiter.Place, name string, rate limiter.Rate, outer *HandOff) (lends bool, err error) {
	// The run is admitted, waiting or neither; a hand-off may admit it
	// between a look at one and the other, so look until one write lands
	// or it is in neither.
	handed := false
	for range 3 {
		var l ledger.Left
		var withdrawn bool
		// Leaving and handing on in one turn: the hand-off decides on the
		// state the leave wrote. Leaves written together hand on once,
		// by the turn's holder, whose own run may not have left.
		l, err = r.turns.LeaveAndHandOn(ctx, r.store, name, runID, rate, r.now())
		if err != nil || l.Left {
			err, handed, lends = r.handedOn(ctx, outer, name, rate, l.Admitted, err), true, l.Lends
			break
		}
		if len(l.Admitted) > 0 {
			r.handedOn(ctx, outer, name, rate, l.Admitted, nil)
		}
		if withdrawn, err = r.turns.WithdrawWaiting(ctx, r.store, name, place); err != nil || withdrawn {
			break
		}
	}
	if err == nil && !handed {
		err = r.handOn(ctx, name, rate, outer)
	}
	return lends, err
}
