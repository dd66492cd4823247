package triggers

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
)

// A backfill runs a job once per slot of its schedule in a past (or any)
// range, at most MaxActive runs unfinished at once, oldest slot first
// (docs/api.md, "Backfill"). The backfill item holds what is left to
// release and what is running; its runs are created as they are released:
//
//   - on POST, the first MaxActive slots;
//   - when one of its runs ends (effAdvanceBackfill, performed by the one
//     runner after the run's final state is stored), the next;
//   - by its backstop timer (Tick), should a path above have failed or a
//     process stopped between steps.
//
// Each release is the run's creating write with the backfill's update
// inside it, conditioned on the backfill's version (ledger.NewRun.Release),
// and claims the job's slot: so a crash at any point never creates a slot
// twice, never loses a slot, and never exceeds MaxActive.

// DefaultBackfillMaxActive is a backfill's max_active when the request
// names none.
const DefaultBackfillMaxActive = 1

// postReleases bounds the runs the POST releases before it answers: the
// answer must come within API Gateway's 30 s, and a release of a 48-task
// run is a 52-action transaction and 48 envelopes. The backfill's timer is
// then due at once, and the ticker releases the rest.
const postReleases = 10

// maxAdvanceRounds bounds a backfill's rounds that end in a version
// conflict (another advance, a cancel): each such round re-reads. It is
// the bound the kernel's advance of a run keeps.
const maxAdvanceRounds = 8

// BackfillRequest is a backfill to start.
type BackfillRequest struct {
	Job       string
	From, To  time.Time
	MaxActive int // 0: DefaultBackfillMaxActive
	Params    json.RawMessage
	// Priority of the backfill's runs; 0: the job's plus one, at most 5.
	Priority int
}

// CreateBackfill checks a backfill, writes it, and releases its first
// runs. It reads the job's slots in the range once, to count those that
// hold a run already (existing); a slot taken after that (another backfill
// of the same range) is found by its release's claim and counted then.
func (r *Room[E]) CreateBackfill(ctx context.Context, req BackfillRequest) (ledger.Backfill, error) {
	sj, j, err := r.k.LoadJob(ctx, req.Job)
	if err != nil {
		return ledger.Backfill{}, err
	}
	if req.MaxActive == 0 {
		req.MaxActive = DefaultBackfillMaxActive
	}
	slots, err := backfillSlots(sj, j, req)
	if err != nil {
		return ledger.Backfill{}, err
	}
	taken, err := r.store.TakenSlots(ctx, j.Name, slots)
	if err != nil {
		return ledger.Backfill{}, err
	}
	now := r.k.Now()
	b := ledger.Backfill{
		ID: r.k.NewID(), Job: j.Name, From: req.From.UTC(), To: req.To.UTC(), MaxActive: req.MaxActive, Priority: req.Priority,
		Params: req.Params, Slots: len(slots), CreatedAt: now,
		// Due at once: should this process stop before the first release,
		// the ticker releases.
		TimerAt: now,
	}
	for i, t := range slots {
		if taken[i] {
			b.Existing++
		} else {
			b.Pending = append(b.Pending, t)
		}
	}
	b, err = r.store.CreateBackfill(ctx, b)
	if err != nil {
		return ledger.Backfill{}, fmt.Errorf("create backfill of job %s: %w", j.Name, err)
	}
	r.log.InfoContext(ctx, "backfill created", "backfill_id", b.ID, "job", j.Name, "slots", b.Slots, "existing", b.Existing)
	effs, err := r.advanceBackfill(ctx, b.ID, nil, postReleases)
	r.k.Perform(ctx, effs, nil)
	if err != nil {
		// The backstop timer releases what this could not.
		r.log.WarnContext(ctx, "release backfill", "backfill_id", b.ID, "error", err.Error())
	}
	return r.store.GetBackfill(ctx, b.ID)
}

// CheckBackfillMaxActive refuses a max_active outside 1..100 (an
// explicit 0 included: only an absent one means the default).
func CheckBackfillMaxActive(n int) error {
	if n < 1 || n > ledger.MaxBackfillActive {
		return &jobspec.Error{Code: protocol.CodeInvalidField, Field: "max_active",
			Message: fmt.Sprintf("max_active must be between 1 and %d, not %d.", ledger.MaxBackfillActive, n)}
	}
	return nil
}

// backfillSlots checks a request against the job and lists its slots: the
// job's schedule's fire times in [from, to), a rate schedule on the grid
// of its next fire.
func backfillSlots(sj ledger.Job, j jobspec.Job, req BackfillRequest) ([]time.Time, error) {
	invalid := func(field, format string, args ...any) error {
		return &jobspec.Error{Code: protocol.CodeInvalidField, Field: field, Message: field + " " + fmt.Sprintf(format, args...) + "."}
	}
	if err := CheckBackfillMaxActive(req.MaxActive); err != nil {
		return nil, err
	}
	switch {
	case req.From.IsZero():
		return nil, invalid("from", "is required")
	case req.To.IsZero():
		return nil, invalid("to", "is required")
	case !req.From.Before(req.To):
		return nil, invalid("from", "must be before to (%s is not before %s)", protocol.FormatTime(req.From), protocol.FormatTime(req.To))
	case req.From.Before(statemodel.EarliestLogicalTime):
		// A backfill's range lies where logical times may: from at or
		// after the earliest, to (exclusive) at or before the latest.
		return nil, invalid("from", "must be in year 1970 or later, not %s", protocol.FormatTime(req.From))
	case req.To.After(statemodel.LatestLogicalTime):
		return nil, invalid("to", "must be at the end of year 9999 or before, not %s", protocol.FormatTime(req.To))
	case j.Schedule.Kind == "" || j.Schedule.Kind == jobspec.ScheduleManual:
		return nil, invalid("schedule", "is absent: job %s runs only when triggered, so it has no slots to backfill", j.Name)
	}
	anchor := sj.NextFireAt
	if anchor.IsZero() {
		anchor = sj.CreatedAt.Add(j.Schedule.Rate)
	}
	slots, more := j.Schedule.SlotsIn(req.From, req.To, anchor, ledger.MaxBackfillSlots)
	if more {
		return nil, invalid("to", "ends a range of more than %d slots of job %s's schedule; backfill it in parts", ledger.MaxBackfillSlots, j.Name)
	}
	return slots, nil
}

// GetBackfill reads a backfill.
func (r *Room[E]) GetBackfill(ctx context.Context, id string) (ledger.Backfill, error) {
	b, err := r.store.GetBackfill(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidKey) {
		return ledger.Backfill{}, fmt.Errorf("backfill %s: %w", id, ledger.ErrNotFound)
	}
	return b, err
}

// ListBackfills lists a job's backfills newest first.
func (r *Room[E]) ListBackfills(ctx context.Context, job string, limit int, token string) ([]ledger.Backfill, string, error) {
	if _, err := r.store.GetJob(ctx, job); err != nil {
		return nil, "", err
	}
	return r.store.ListBackfills(ctx, job, limit, token)
}

// CancelBackfill drops a backfill's unreleased slots (counted cancelled)
// and cancels its unfinished runs as a run cancel does. A backfill that
// ended is statemodel.ErrIllegalTransition; one cancelled already is cancelled again
// (its runs that have not stopped are asked again).
func (r *Room[E]) CancelBackfill(ctx context.Context, id, reason string) (ledger.Backfill, error) {
	var b ledger.Backfill
	err := ledger.Update(ctx, ledger.Rounds{Max: maxAdvanceRounds + 1},
		func(ctx context.Context, _ int) (ledger.Backfill, error) { return r.GetBackfill(ctx, id) },
		func(_ context.Context, cur ledger.Backfill) (ledger.Backfill, ledger.Step, error) {
			if !cur.Unfinished() {
				return cur, 0, fmt.Errorf("%w: backfill %s ended %s", statemodel.ErrIllegalTransition, id, cur.State)
			}
			if cur.CancelRequested {
				b = cur
				return cur, ledger.StepDone, nil
			}
			cur.CancelRequested = true
			cur.Cancelled += len(cur.Pending)
			cur.Pending = nil
			return cur, ledger.StepWrite, nil
		},
		func(ctx context.Context, cur ledger.Backfill) (err error) {
			b, err = r.store.UpdateBackfill(ctx, cur)
			return err
		})
	if err != nil {
		return ledger.Backfill{}, err
	}
	if reason == "" {
		reason = "backfill " + id + " cancelled"
	}
	// Written cancelled first: no release follows, so the active runs
	// listed now are all there are.
	for _, a := range b.Active {
		if err := r.k.CancelRun(ctx, a.Run, reason); err != nil && !errors.Is(err, statemodel.ErrIllegalTransition) && !errors.Is(err, ledger.ErrNotFound) {
			return ledger.Backfill{}, err
		}
	}
	effs, err := r.advanceBackfill(ctx, id, nil, 0)
	r.k.Perform(ctx, effs, nil)
	if err != nil {
		r.log.WarnContext(ctx, "settle cancelled backfill", "backfill_id", id, "error", err.Error())
	}
	return r.store.GetBackfill(ctx, id)
}

// AdvanceBackfill settles every run of a backfill that ended and releases
// its next slots: the backstop timer's and the POST's path.
func (r *Room[E]) AdvanceBackfill(ctx context.Context, id string) error {
	effs, err := r.advanceBackfill(ctx, id, nil, 0)
	r.k.Perform(ctx, effs, nil)
	if err != nil {
		return fmt.Errorf("advance backfill %s: %w", id, err)
	}
	return nil
}

// BackfillRunEnded settles a backfill's run that ended (run, as its final
// state was stored) and releases the backfill's next slots: the kernel's
// effect for a finished run of a backfill. It returns the effects of the
// runs it released, for the kernel's runner.
func (r *Room[E]) BackfillRunEnded(ctx context.Context, run *ledger.Run) ([]E, error) {
	return r.advanceBackfill(ctx, run.BackfillID, run, 0)
}

// advanceBackfill settles the backfill's runs that ended (only ended, when
// the caller holds the run that just ended; every active run otherwise)
// and releases slots while fewer than MaxActive of its runs are
// unfinished, at most budget of them (0: no bound). A version conflict
// (another advance, a cancel) re-reads. It returns the effects of the runs
// it released (their first dispatches), for the caller's runner.
func (r *Room[E]) advanceBackfill(ctx context.Context, id string, ended *ledger.Run, budget int) ([]E, error) {
	a := &advancing[E]{r: r, ended: ended, budget: budget}
	err := ledger.Update(ctx, ledger.Rounds{Max: maxAdvanceRounds},
		func(ctx context.Context, _ int) (ledger.Backfill, error) { return r.store.GetBackfill(ctx, id) },
		a.decide, a.write)
	return a.effs, err
}

// advancing is one advance of a backfill from round to round: the budget
// left and the effects of the runs released so far.
type advancing[E any] struct {
	r      *Room[E]
	ended  *ledger.Run
	budget int
	effs   []E
}

// settled is a round's decision: the backfill with its ended runs
// settled, and whether it is to be written (changed, or its backstop due)
// before its next slots are released.
type settled struct {
	b     ledger.Backfill
	store bool
}

func (a *advancing[E]) decide(ctx context.Context, b ledger.Backfill) (settled, ledger.Step, error) {
	if !b.Unfinished() {
		return settled{}, ledger.StepDone, nil
	}
	next, changed, err := a.r.settleBackfill(ctx, b, a.ended)
	if err != nil {
		return settled{}, 0, err
	}
	// A due backstop is moved on by this write too.
	return settled{b: next, store: changed || !b.TimerAt.After(a.r.k.Now())}, ledger.StepWrite, nil
}

// write stores the settled backfill when it changed, then releases its
// next slots; a release that found the backfill stale reads it again.
func (a *advancing[E]) write(ctx context.Context, d settled) error {
	next := d.b
	if d.store {
		var err error
		if next, err = a.r.store.UpdateBackfill(ctx, next); err != nil {
			return err
		}
	}
	done, err := a.r.releaseBackfill(ctx, next, &a.budget, &a.effs)
	if err == nil && !done {
		return ledger.ErrVersionConflict
	}
	return err
}

// settleBackfill moves the backfill's active runs that ended to its
// counts, without writing. With ended set it looks at that run only (the
// effect of its finish); otherwise it reads every active run.
func (r *Room[E]) settleBackfill(ctx context.Context, b ledger.Backfill, ended *ledger.Run) (ledger.Backfill, bool, error) {
	changed := false
	var keep []ledger.BackfillRun
	for _, a := range b.Active {
		var run ledger.Run
		switch {
		case ended != nil && a.Run == ended.ID:
			run = *ended
		case ended != nil:
			keep = append(keep, a)
			continue
		default:
			got, err := r.store.GetRun(ctx, a.Run)
			if errors.Is(err, ledger.ErrNotFound) {
				// Not there to run: nothing left to wait for.
				b.Cancelled++
				changed = true
				continue
			}
			if err != nil {
				return b, false, err
			}
			run = got
		}
		switch run.ExecutionState {
		case statemodel.RunSucceeded:
			b.Succeeded++
		case statemodel.RunFailed:
			b.Failed++
		case statemodel.RunCancelled:
			b.Cancelled++
		default:
			keep = append(keep, a)
			continue
		}
		changed = true
	}
	b.Active = keep
	return b, changed, nil
}

// releaseBackfill releases b's oldest pending slots while it may, each in
// its run's creating write, at most *budget (0: no bound; it counts down).
// Out of budget with slots still releasable, it makes the backfill's timer
// due now, so the next tick goes on. It reports false when b proved stale
// (the caller reads it again). The effects of the runs it creates are
// added to effs.
func (r *Room[E]) releaseBackfill(ctx context.Context, b ledger.Backfill, budget *int, effs *[]E) (bool, error) {
	var j jobspec.Job
	loaded := false
	bounded := *budget > 0
	for !b.CancelRequested && len(b.Pending) > 0 && len(b.Active) < b.MaxActive {
		if bounded && *budget == 0 {
			b.WakeAt = r.k.Now()
			_, err := r.store.UpdateBackfill(ctx, b)
			return !errors.Is(err, ledger.ErrVersionConflict), ignoreConflict(err)
		}
		if !loaded {
			_, job, err := r.k.LoadJob(ctx, b.Job)
			if errors.Is(err, ledger.ErrNotFound) {
				// The job was deleted: its slots cannot run.
				r.log.WarnContext(ctx, "backfill's job is gone: its pending slots are dropped", "backfill_id", b.ID, "job", b.Job)
				b.Cancelled += len(b.Pending)
				b.Pending = nil
				_, err = r.store.UpdateBackfill(ctx, b)
				return !errors.Is(err, ledger.ErrVersionConflict), ignoreConflict(err)
			}
			if err != nil {
				return false, err
			}
			j, loaded = job, true
		}
		held := b
		slot := b.Pending[0]
		view, created, more, err := r.startRun(ctx, j, TriggerRequest{
			Job: b.Job, LogicalTime: slot, Slot: true, Params: b.Params,
			Trigger: statemodel.TriggerBackfill, BackfillID: b.ID, Release: &held, Priority: b.Priority,
		})
		*effs = append(*effs, more...)
		switch {
		case errors.Is(err, ledger.ErrVersionConflict):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("release slot %s: %w", protocol.FormatTime(slot), err)
		case !created:
			// The slot holds another run (a schedule run, another
			// backfill's): it counts as existing and is not run again.
			b.Pending = b.Pending[1:]
			b.Existing++
			b, err = r.store.UpdateBackfill(ctx, b)
			if errors.Is(err, ledger.ErrVersionConflict) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
		default:
			if bounded {
				*budget--
			}
			r.log.InfoContext(ctx, "backfill released a slot", "backfill_id", b.ID, "run_id", view.Run.ID, "slot", protocol.FormatTime(slot))
			b, err = r.store.GetBackfill(ctx, b.ID)
			if err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

func ignoreConflict(err error) error {
	if errors.Is(err, ledger.ErrVersionConflict) {
		return nil
	}
	return err
}
