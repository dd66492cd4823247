package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/runledger/runledger/statemodel"
)

// CheckInstanceKey validates an instance key (InvalidKeyError).
func CheckInstanceKey(k InstanceKey) error { return checkInstanceKey(k) }

// CheckJobName validates a job name (InvalidKeyError).
func CheckJobName(job string) error { return checkJob(job) }

// CheckRunID validates a run id (InvalidKeyError).
func CheckRunID(run string) error { return checkRun(run) }

// CheckTaskID validates a task id (InvalidKeyError).
func CheckTaskID(task string) error { return checkTask(task) }

// CheckSecret validates a new task's instance secret (ErrInvalidInput).
func CheckSecret(task string, s Secret) error { return checkSecret(task, s) }

// CheckEventID validates an event id of the instance at k (InvalidKeyError).
func CheckEventID(k InstanceKey, id string) error { return checkEventID(k, id) }

// CheckIdempotencyKey validates an idempotency key (InvalidKeyError).
func CheckIdempotencyKey(key string) error {
	return CheckTail("idempotency key", key, "IDEM#"+key, MaxSortKeyBytes)
}

// CheckWorkerName validates a worker's name (InvalidKeyError).
func CheckWorkerName(name string) error { return CheckName("worker", name, MaxJobNameBytes) }

// CheckUpstream validates and normalises j.Upstream (sorted, none twice,
// not j itself, at most MaxUpstreamJobs) as CreateJob and UpdateJob do.
func CheckUpstream(j *Job) error { return checkUpstream(j) }

// DecisionPolicy is the policy a transition decides with: p, or the
// instance's stored policy with p's jitter source when p is StoredPolicy's.
func DecisionPolicy(p, stored statemodel.Policy) statemodel.Policy {
	if !usesStoredPolicy(p) {
		return p
	}
	stored.Random = p.Random
	return stored
}

// HeartbeatTarget says which form of a heartbeat of attempt fits the
// instance in snapshot cur (RUNNING or CANCELLING), or why none does:
// ErrStaleAttempt, ErrLostNeedsTransition or a *statemodel.TransitionError.
func HeartbeatTarget(cur statemodel.Snapshot, attempt int) (statemodel.InstanceState, error) {
	return heartbeatTarget(cur, attempt)
}

// MayHaveForgotten reports whether an event the snapshot's recent ids do
// not know may still have been applied before: always when statemodel
// would reject it or call it stale (a replay of an old event usually is),
// and for an event it would apply only once older ids left the recent list.
func MayHaveForgotten(inst Instance, o statemodel.Outcome) bool {
	switch o {
	case statemodel.Rejected, statemodel.Stale:
		return true
	case statemodel.Applied:
		return inst.Snapshot.Seq > int64(len(inst.Snapshot.Recent))
	}
	return false
}

// HeldCopyUsable reports whether a transition may decide from inst, an
// instance a caller holds, or must read it first: a copy whose inline
// history does not end at its snapshot's seq was not read or written whole.
func HeldCopyUsable(inst Instance) bool { return historyMatches(inst) }

// NextRun is run with its newly derived state u, as UpdateRunState stores
// it at stamp: the version moves on; a terminal run ends (at u.EndedAt, or
// stamp) and waits on no backstop; a live one's backstop is u.TimerAt (or
// stamp + backstop). Unusable keys and states that do not exist are
// refused.
func NextRun(run Run, u RunUpdate, stamp time.Time, backstop time.Duration) (Run, error) {
	if err := checkRun(run.ID); err != nil {
		return Run{}, err
	}
	if err := checkJob(run.Job); err != nil {
		return Run{}, err
	}
	if !u.ExecutionState.Valid() {
		return Run{}, fmt.Errorf("%w: execution state %q", ErrInvalidInput, u.ExecutionState)
	}
	if !slices.Contains(statemodel.AllPublicationStates(), u.PublicationState) {
		return Run{}, fmt.Errorf("%w: publication state %q", ErrInvalidInput, u.PublicationState)
	}
	next := run
	next.ExecutionState, next.PublicationState = u.ExecutionState, u.PublicationState
	next.Status = u.ExecutionState.Status()
	next.Version = run.Version + 1
	next.EndedAt, next.TimerAt = time.Time{}, time.Time{}
	if u.ExecutionState.Terminal() {
		next.EndedAt = u.EndedAt
		if next.EndedAt.IsZero() {
			next.EndedAt = stamp
		}
	} else {
		next.TimerAt = u.TimerAt
		if next.TimerAt.IsZero() {
			next.TimerAt = RunTimer(run, stamp, backstop)
		}
	}
	return next, nil
}

// RunTimer is when a live run's timer falls due when armed at stamp: its
// backstop (stamp + backstop), or an earlier time the run must be looked
// at by: its deadline, until it has been recorded as missed, so that the
// pass that finds the run unfinished at its deadline comes on time; and
// its dependency timeout while it is still ahead of stamp, so that the
// pass that ends the tasks still waiting on other jobs comes on time. A
// write at or after the dependency timeout (that pass's own) puts the
// timer back to the backstop.
func RunTimer(run Run, stamp time.Time, backstop time.Duration) time.Time {
	t := stamp.Add(backstop)
	if !run.DeadlineAt.IsZero() && run.DeadlineMissedAt.IsZero() && run.DeadlineAt.Before(t) {
		t = run.DeadlineAt
	}
	return dependencyTimer(run, stamp, t)
}

// FirstRunTimer is a new run's timer: the one its creator asked for
// (run.TimerAt), else RunTimer, and never after its deadline or its
// dependency timeout.
func FirstRunTimer(run Run, stamp time.Time, backstop time.Duration) time.Time {
	if run.TimerAt.IsZero() {
		return RunTimer(run, stamp, backstop)
	}
	t := run.TimerAt
	if !run.DeadlineAt.IsZero() && run.DeadlineAt.Before(t) {
		t = run.DeadlineAt
	}
	return dependencyTimer(run, stamp, t)
}

// dependencyTimer is t, or the run's dependency timeout when that is
// after stamp and before t.
func dependencyTimer(run Run, stamp, t time.Time) time.Time {
	if at := run.DependencyTimeoutAt; at.After(stamp) && at.Before(t) {
		return at
	}
	return t
}

// DeadlineMissed is run as MarkDeadlineMissed stores it at stamp: missed
// at stamp, its timer back to the backstop. Its version stays: the mark
// changes no derived state, so it races with no finisher.
func DeadlineMissed(run Run, stamp time.Time, backstop time.Duration) Run {
	next := run
	next.DeadlineMissedAt = stamp
	next.TimerAt = RunTimer(next, stamp, backstop)
	return next
}

// Timer kinds of the items that are not instances (DueTimer.Kind).
const (
	TimerKindJobFire     = timerKindJobFire
	TimerKindRunBackstop = timerKindRunBackstop
)

// CheckTrigger validates a new run's trigger: one of
// statemodel.AllTriggers, with a backfill id exactly when the trigger is
// backfill.
func CheckTrigger(t statemodel.Trigger, backfillID string) error {
	switch {
	case !t.Valid():
		return fmt.Errorf("%w: run trigger %q is not one of %v", ErrInvalidInput, t, statemodel.AllTriggers())
	case t == statemodel.TriggerBackfill && backfillID == "":
		return fmt.Errorf("%w: a backfill run needs its backfill id", ErrInvalidInput)
	case t != statemodel.TriggerBackfill && backfillID != "":
		return fmt.Errorf("%w: a %s run names no backfill", ErrInvalidInput, t)
	}
	return nil
}

// historyMatches reports whether inst's inline records end where its
// snapshot is. The write of a transition replaces the inline list with
// the held one plus the new record, so a copy whose snapshot was moved on
// without its history must never be written from.
func historyMatches(inst Instance) bool {
	n := len(inst.History)
	return n == 0 || inst.History[n-1].Seq == inst.Snapshot.Seq
}
