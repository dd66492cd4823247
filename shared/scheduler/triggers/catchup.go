package triggers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// Catch-up of missed slots (docs/api.md, "Catch-up of missed slots").
//
// A job's schedule position (ledger.SchedulePosition) is its next fire and
// the catch-up runs decided but not started yet, a range of its slots. A
// slot is missed when it fell while the job was paused (decided on
// resume), or when the ticker first sees it more than lateAfter after its
// time (decided on that pass). The decision is one conditional write
// (MoveSchedule, ResumeJob) that moves the next fire past now, adds the
// skipped slots to missed_slots and records the range of catch-up runs;
// the runs are then started from that range in batches, each batch moving
// the range on with another conditional write. Each run still claims its
// slot, so a crash between a batch and its move, or two tickers racing,
// start no slot twice, and no decided slot is lost: the range stays until
// its runs are started.

// DefaultTickerPeriod is the ticker's period unless one is configured
// (the scheduler's Config.TickerPeriod): the CDK stack's ticker runs every
// minute.
const DefaultTickerPeriod = time.Minute

// Batches of catch-up runs: a ticker pass starts at most catchupBatch of
// one job's runs (a 1,000-slot catch-up of a 48-task job spreads over
// passes), a resume answers after at most resumeBatch.
const (
	catchupBatch = 50
	resumeBatch  = 10
)

// maxDecideSteps bounds the slots one decision walks (a cron slot costs a
// few microseconds; 50,000 are a month of minutes). A longer walk (a
// frequent schedule paused for months) is decided in parts: each part
// skips the slots it knows the policy will not run, moves the next fire to
// the first it still holds, and the next part (the same ticker pass while
// its deadline allows, else the next pass) goes on from there.
const maxDecideSteps = 50_000

// lateAfter is how late the ticker may first see a slot and still fire
// it as scheduled: max(60 s, two ticker periods).
func (r *Room[E]) lateAfter() time.Duration {
	return max(time.Minute, 2*r.tickerPeriod)
}

// catchupDecision is what a decision does to a job's schedule.
type catchupDecision struct {
	To     ledger.SchedulePosition
	Missed int64 // slots skipped
	Runs   int   // catch-up runs decided (the range's slots)
}

// decideCatchup decides the missed slots of a schedule whose next fire is
// from (missed tells them: every slot up to now when the job was paused;
// those more than lateAfter old for the ticker). Slots older than the
// catch-up window are skipped; inside it, the policy keeps some to run:
// none keeps no slot, latest the latest, all the newest
// jobspec.MaxCatchupRuns; the others are skipped. The position it answers
// has the next fire at the first slot not missed (after now, or one the
// ticker is still on time for) and the kept slots as the range of
// catch-up runs.
//
// A walk that reaches maxDecideSteps stops with the slots it knows are
// skipped (those a later missed slot pushed out of what the policy keeps)
// and the next fire at the first slot it still kept, and decides no run:
// deciding again from there finishes it.
func decideCatchup(sched jobspec.Schedule, from time.Time, missed func(time.Time) bool, now time.Time, budget int) catchupDecision {
	keep := 1
	switch sched.CatchupPolicy() {
	case jobspec.CatchupNone:
		keep = 0
	case jobspec.CatchupAll:
		keep = jobspec.MaxCatchupRuns
	}
	windowStart := now.Add(-sched.Window())
	var d catchupDecision
	var kept []time.Time // the newest missed slots inside the window, at most keep
	slot := from
	for steps := 0; !slot.IsZero() && missed(slot); steps++ {
		if steps == budget {
			d.To.NextFireAt = slot
			if len(kept) > 0 {
				d.To.NextFireAt = kept[0]
			}
			return d
		}
		switch {
		case keep == 0 || slot.Before(windowStart):
			d.Missed++
		case len(kept) == keep:
			kept = append(kept[1:], slot)
			d.Missed++
		default:
			kept = append(kept, slot)
		}
		n, ok := sched.Next(slot)
		if !ok {
			n = time.Time{}
		}
		slot = n
	}
	d.To.NextFireAt = slot
	if d.Runs = len(kept); d.Runs > 0 {
		d.To.CatchupNext, d.To.CatchupLast = kept[0], kept[len(kept)-1]
	}
	return d
}

// decideLate decides the slots the ticker sees too late, from the job's
// next fire (which is one of them).
func (r *Room[E]) decideLate(sched jobspec.Schedule, from, now time.Time) catchupDecision {
	cutoff := now.Add(-r.lateAfter())
	return decideCatchup(sched, from, func(t time.Time) bool { return t.Before(cutoff) }, now, maxDecideSteps)
}

// decidePaused decides the slots that fell while the job was paused: each
// slot up to now.
func decidePaused(sched jobspec.Schedule, from, now time.Time) catchupDecision {
	return decideCatchup(sched, from, func(t time.Time) bool { return !t.After(now) }, now, maxDecideSteps)
}

// ResumeJob resumes a paused job: the slots that fell while it was paused
// are decided by its catch-up policy in the same write that resumes it,
// and the first catch-up runs start before it answers (the ticker starts
// the rest). Resuming a job that is not paused changes nothing. A catch-up
// still under way from before the pause is finished first; the slots
// after it are then decided as the ticker finds them. So are the slots
// past maxDecideSteps of a frequent schedule paused for months: the
// resume answers with the part it decided.
func (r *Room[E]) ResumeJob(ctx context.Context, name string) (ledger.Job, error) {
	defer r.ForgetEventIndex()
	for try := 0; ; try++ {
		sj, j, err := r.k.LoadJob(ctx, name)
		if err != nil || !sj.Paused {
			return sj, err
		}
		m := ledger.ScheduleMove{Version: sj.Version, From: sj.Position(), To: sj.Position()}
		now := r.k.Now()
		var d catchupDecision
		if sj.CatchupNext.IsZero() && !sj.NextFireAt.IsZero() && !sj.NextFireAt.After(now) {
			d = decidePaused(j.Schedule, sj.NextFireAt, now)
			m.To, m.Missed = d.To, d.Missed
		}
		out, err := r.store.ResumeJob(ctx, name, m)
		if errors.Is(err, ledger.ErrConflict) && try < conflictRetries {
			continue // changed since read: decide again from what stands
		}
		if err != nil {
			return ledger.Job{}, err
		}
		if m.Missed > 0 || d.Runs > 0 {
			r.log.InfoContext(ctx, "resumed: missed slots decided", "job", name, "policy", string(j.Schedule.CatchupPolicy()),
				"missed", m.Missed, "catchup_runs", d.Runs, "next_fire", protocol.FormatTime(out.NextFireAt))
		}
		if out.CatchupNext.IsZero() {
			return out, nil
		}
		started, err := r.startCatchup(ctx, out, j, resumeBatch)
		if err != nil {
			// The range stays in the job: the ticker starts its runs.
			r.log.WarnContext(ctx, "resume: start catch-up runs", "job", name, "error", err.Error())
			return r.store.GetJob(ctx, name)
		}
		return started, nil
	}
}

// conflictRetries bounds how often a resume decides again after a
// concurrent change.
const conflictRetries = 3

// errMovedOn says a schedule move met a position another writer moved
// first: that writer carries on from there.
var errMovedOn = errors.New("schedule moved on")

// moveSchedule writes a move decided from sj; errMovedOn when another
// writer moved the job first (or paused, resumed or updated it).
func (r *Room[E]) moveSchedule(ctx context.Context, sj ledger.Job, to ledger.SchedulePosition, missed int64) (ledger.Job, error) {
	out, err := r.store.MoveSchedule(ctx, sj.Name, ledger.ScheduleMove{Version: sj.Version, From: sj.Position(), To: to, Missed: missed})
	if errors.Is(err, ledger.ErrConflict) {
		return sj, errMovedOn
	}
	return out, err
}

// startCatchup starts up to limit of the job's pending catch-up runs,
// oldest slot first, then moves the range past them. Each run claims its
// slot, so runs another writer started already are not started twice.
func (r *Room[E]) startCatchup(ctx context.Context, sj ledger.Job, j jobspec.Job, limit int) (ledger.Job, error) {
	slot, started, missed := sj.CatchupNext, 0, int64(0)
	var ferr error
	for ; !slot.IsZero() && !slot.After(sj.CatchupLast) && started < limit && !r.k.DeadlineReached(ctx); started++ {
		if ferr = r.fireSlot(ctx, j, slot, statemodel.TriggerCatchup); errors.Is(ferr, ledger.ErrLimitQueueFull) {
			missed, ferr = missed+1, nil // its limiter's queue is full: the slot is missed
		} else if ferr != nil {
			break
		}
		n, ok := j.NextFire(slot)
		if !ok {
			n = time.Time{}
		}
		slot = n
	}
	if started == 0 {
		return sj, ferr
	}
	to := sj.Position()
	to.CatchupNext = slot
	if slot.IsZero() || slot.After(sj.CatchupLast) {
		to.CatchupNext, to.CatchupLast = time.Time{}, time.Time{}
	}
	out, err := r.moveSchedule(ctx, sj, to, missed)
	if err != nil {
		return sj, errors.Join(ferr, err)
	}
	return out, ferr
}

// fireSchedule fires what the job's schedule has due: slots the ticker
// sees too late are decided by the catch-up policy, slots still on time
// run as scheduled, until the next fire is after now. While an earlier
// catch-up is still under way, late slots wait for it to end.
func (r *Room[E]) fireSchedule(ctx context.Context, sj ledger.Job, j jobspec.Job) error {
	now := r.k.Now()
	for !sj.NextFireAt.IsZero() && !sj.NextFireAt.After(now) && !r.k.DeadlineReached(ctx) {
		at := sj.NextFireAt
		var err error
		if at.Before(now.Add(-r.lateAfter())) {
			if !sj.CatchupNext.IsZero() {
				return nil
			}
			d := r.decideLate(j.Schedule, at, now)
			if sj, err = r.moveSchedule(ctx, sj, d.To, d.Missed); err != nil {
				return err
			}
			r.log.InfoContext(ctx, "missed slots decided", "job", sj.Name, "policy", string(j.Schedule.CatchupPolicy()),
				"from", protocol.FormatTime(at), "missed", d.Missed, "catchup_runs", d.Runs, "next_fire", protocol.FormatTime(sj.NextFireAt))
			if !sj.CatchupNext.IsZero() {
				if sj, err = r.startCatchup(ctx, sj, j, catchupBatch); err != nil {
					return err
				}
			}
			continue
		}
		missed := int64(0)
		if err := r.fireSlot(ctx, j, at, statemodel.TriggerSchedule); errors.Is(err, ledger.ErrLimitQueueFull) {
			missed = 1 // its limiter's queue is full: the slot is missed
			r.log.WarnContext(ctx, "slot missed: limiter queue full", "job", sj.Name, "slot", protocol.FormatTime(at))
		} else if err != nil {
			return fmt.Errorf("fire job %s at %s: %w", sj.Name, protocol.FormatTime(at), err)
		}
		to := sj.Position()
		to.NextFireAt, _ = j.NextFire(at)
		if sj, err = r.moveSchedule(ctx, sj, to, missed); err != nil {
			return err
		}
	}
	return nil
}
