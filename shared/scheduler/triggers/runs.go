package triggers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// The runs the room starts: a manual trigger's, and a schedule's slots
// (FireJob, fireSlot). Backfills and trigger events start theirs through
// startRun too.

// TriggerRequest is a run to start.
type TriggerRequest struct {
	Job         string
	Params      json.RawMessage
	LogicalTime time.Time // zero: now
	// IdempotencyKey and BodyHash make a retried request answer the run the
	// first one created.
	IdempotencyKey string
	BodyHash       string
	// Priority, if not zero, overrides the job's priority for this run
	// (checked 1..5 by the caller).
	Priority int
	// Slot claims the job's slot at LogicalTime: one slot, one run.
	Slot bool
	// Trigger is what creates the run (TriggerRun: manual).
	Trigger statemodel.Trigger
	// BackfillID and Release: the run releases Release's oldest pending
	// slot (LogicalTime, claimed), in the run's creating write.
	BackfillID string
	Release    *ledger.Backfill
	// Event names the event that starts the run (trigger event), and
	// RunID is the id the run gets ("": a new one).
	Event *protocol.RunEvent
	RunID string
	// TraceID is the trace the run joins (the trigger's traceparent's);
	// "": a new one.
	TraceID string
}

// TriggerRun creates a run of a job and moves its first tasks on at once. It
// reports created=false when an idempotency key or a slot already holds a
// run, which it returns.
func (r *Room[E]) TriggerRun(ctx context.Context, req TriggerRequest) (ledger.RunView, bool, error) {
	_, j, err := r.k.LoadJob(ctx, req.Job)
	if err != nil {
		return ledger.RunView{}, false, err
	}
	if len(j.DependsOnJobs) > 0 && req.LogicalTime.IsZero() {
		// The run waits for the upstream jobs' runs of its logical time;
		// the trigger's own time would match none of them.
		return ledger.RunView{}, false, &jobspec.Error{Code: protocol.CodeInvalidField, Field: "logical_time",
			Message: fmt.Sprintf("logical_time is required: job %s depends on other jobs and its run waits for their runs of the same logical time.", j.Name)}
	}
	req.Trigger = statemodel.TriggerManual
	view, created, effs, err := r.startRun(ctx, j, req)
	if err != nil || !created {
		return view, created, err
	}
	answer := &view
	r.k.Perform(ctx, effs, answer)
	return *answer, true, nil
}

// startRun creates a run of j in one write and returns it with the
// effects that move it on, for the caller's runner: the dispatch of each
// task created SCHEDULED, or, when its root tasks wait on other jobs' runs,
// the advance that decides them and then the arming of its dependency
// timeout. created is false when an idempotency key or a slot already
// holds a run, which it returns, with no effects.
func (r *Room[E]) startRun(ctx context.Context, j jobspec.Job, req TriggerRequest) (ledger.RunView, bool, []E, error) {
	now := r.k.Now()
	logical := req.LogicalTime
	if logical.IsZero() {
		logical = now
	}
	spec, err := wire.Marshal(j)
	if err != nil {
		return ledger.RunView{}, false, nil, err
	}
	nr := ledger.NewRun{
		ID: cmp.Or(req.RunID, r.k.NewID()), Job: j.Name, LogicalTime: logical, Params: req.Params, Spec: spec, OfLiveJob: true,
		Trigger: req.Trigger, BackfillID: req.BackfillID, Release: req.Release, ClaimSlot: req.Slot,
		// A manual run of an explicit logical time marks its slot, so a
		// backfill of that slot counts it as existing.
		MarkSlot: req.Trigger == statemodel.TriggerManual && !req.LogicalTime.IsZero(),
		Event:    req.Event, TraceID: cmp.Or(req.TraceID, protocol.NewTraceID()),
	}
	nr.Priority = r.k.StartPriority(j, req)
	nr.Retention = j.Retention // zero: the deployment's
	if j.Deadline > 0 {
		// Counted from the moment the run may start: its release, for a
		// backfill's run.
		nr.DeadlineAt = now.Add(j.Deadline)
	}
	if len(j.DependsOnJobs) > 0 {
		// Counted from its creation too (its release, for a backfill's
		// run); the run's timer falls due then, so the pass that ends
		// the tasks still waiting comes on time.
		nr.DependencyTimeoutAt = now.Add(j.DependencyTimeout())
	}
	if req.IdempotencyKey != "" {
		nr.Idempotency = &ledger.Idempotency{Key: req.IdempotencyKey, BodyHash: req.BodyHash}
	}
	for _, t := range j.Tasks() {
		secret, err := r.k.NewSecret()
		if err != nil {
			return ledger.RunView{}, false, nil, err
		}
		nr.Tasks = append(nr.Tasks, ledger.NewTask{
			ID: t.ID, Pool: t.Pool, Payload: t.Payload, Executor: r.k.ExecutorJSON(t.Executor), Policy: t.Policy,
			DependsOn: t.DependsOn, TriggerRule: t.Rule, Publish: t.Publish,
			// A task with nothing to wait for is created SCHEDULED: its
			// dependency verdict is part of the run's creating write.
			// A run of a limited job releases its roots once admitted.
			Scheduled: len(t.DependsOn) == 0 && len(j.DependsOnJobs) == 0 && !j.Limited(),
			Secret:    secret,
		})
		r.k.WithMap(&nr.Tasks[len(nr.Tasks)-1], t)
	}
	if err := r.k.CheckEnvelopes(nr, now); err != nil {
		return ledger.RunView{}, false, nil, fmt.Errorf("start run of %s: %w", j.Name, err)
	}
	if err := r.k.CheckAdmissible(ctx, j, nr); err != nil {
		return ledger.RunView{}, false, nil, err
	}
	view, err := r.store.CreateRun(ctx, nr, now)
	var existing *ledger.ExistingRunError
	if errors.As(err, &existing) && (errors.Is(err, ledger.ErrIdempotentReplay) || errors.Is(err, ledger.ErrSlotTaken)) {
		v, rerr := r.store.ReadRun(ctx, existing.RunID)
		return v, false, nil, rerr
	}
	if err != nil {
		return ledger.RunView{}, false, nil, err
	}
	r.log.InfoContext(ctx, "run created", "run_id", view.Run.ID, "job", j.Name, "tasks", len(nr.Tasks))
	r.k.Created(view)
	return view, true, r.k.NewRunEffects(view, j), nil
}

// FireJob acts on a job whose timer is due at at: it starts a batch of
// the job's pending catch-up runs, then fires its schedule (fireSchedule)
// until the next fire is after now. Two tickers racing create one run per
// slot: the slot claim is conditional, and so is every move of the
// schedule.
func (r *Room[E]) FireJob(ctx context.Context, name string, at time.Time) error {
	sj, j, err := r.k.LoadJob(ctx, name)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !sj.TimerAt().Equal(at) {
		return nil // moved on (or paused) since the index was read
	}
	if !sj.CatchupNext.IsZero() {
		sj, err = r.startCatchup(ctx, sj, j, catchupBatch)
		if err != nil {
			return ignoreMovedOn(err)
		}
	}
	return ignoreMovedOn(r.fireSchedule(ctx, sj, j))
}

// ignoreMovedOn drops errMovedOn: the writer that moved the schedule
// first carries on from there.
func ignoreMovedOn(err error) error {
	if errors.Is(err, errMovedOn) {
		return nil
	}
	return err
}

// fireSlot starts the job's run for the slot at, honouring its overlap
// policy: skip starts nothing while a run is unfinished, cancel_previous
// cancels the unfinished runs of earlier slots first. The run claims the
// slot, so a slot another ticker started already is not started again.
func (r *Room[E]) fireSlot(ctx context.Context, j jobspec.Job, at time.Time, trigger statemodel.Trigger) error {
	switch j.Overlap {
	case jobspec.OverlapSkip:
		// The overlap policy does not govern backfill runs (max_active
		// does): they do not make a slot skip.
		busy, err := r.store.HasUnfinishedRuns(ctx, j.Name, statemodel.TriggerBackfill)
		if err != nil {
			return err
		}
		if busy {
			r.log.InfoContext(ctx, "slot skipped: previous run unfinished", "job", j.Name, "slot", protocol.FormatTime(at), "trigger", string(trigger))
			return nil
		}
	case jobspec.OverlapCancelPrevious:
		if err := r.k.CancelUnfinished(ctx, j.Name, at); err != nil {
			return err
		}
	}
	_, _, effs, err := r.startRun(ctx, j, TriggerRequest{Job: j.Name, LogicalTime: at, Slot: true, Trigger: trigger})
	r.k.Perform(ctx, effs, nil)
	return err
}

// RunAt finds a job's run with the given logical time among its newest
// runs, a page at a time until scan of them were searched (the kernel's
// bound for a cross-job dependency's upstream run).
func (r *Room[E]) RunAt(ctx context.Context, job string, logical time.Time, scan int) (ledger.Run, bool, error) {
	token, seen := "", 0
	for seen < scan {
		runs, next, err := r.store.ListRuns(ctx, ledger.RunFilter{Job: job, Token: token, Limit: 100})
		if err != nil {
			return ledger.Run{}, false, err
		}
		for _, run := range runs {
			if run.LogicalTime.Equal(logical) {
				return run, true, nil
			}
		}
		seen += len(runs)
		if next == "" {
			break
		}
		token = next
	}
	return ledger.Run{}, false, nil
}
