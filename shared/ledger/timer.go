package ledger

import (
	"time"

	"github.com/runledger/runledger/statemodel"
)

// ItemKind names what a due timer belongs to.
type ItemKind string

const (
	// TimerOfJob: a job's next fire (Job is set).
	TimerOfJob ItemKind = "job"
	// TimerOfRun: a live run's re-derivation backstop (Run is set).
	TimerOfRun ItemKind = "run"
	// TimerOfInstance: a task instance's state timer (Run and Task are
	// set; Kind says which statemodel timer).
	TimerOfInstance ItemKind = "instance"
	// TimerOfBackfill: an unfinished backfill's backstop (Backfill and
	// Job are set).
	TimerOfBackfill ItemKind = "backfill"
)

// DueTimer is one entry of the timers index whose time has come.
type DueTimer struct {
	Item ItemKind
	Job  string
	Run  string
	Task string
	// Backfill is the backfill of a backfill timer.
	Backfill string
	At       time.Time
	// Kind is the timer's purpose: a statemodel.TimerKind for instances,
	// "job_fire" or "run_backstop" otherwise.
	Kind string
}

// Instance returns the instance key of an instance timer.
func (d DueTimer) Instance() InstanceKey { return InstanceKey{Run: d.Run, Task: d.Task} }

// MaxTimerDelay is SQS's longest message delay: the furthest a delay
// message carries a timer.
const MaxTimerDelay = 15 * time.Minute

// TimerHorizon is how far ahead of the write that sets it an instance's
// timer rides a delay message instead of the timers index: SQS's longest
// delay less a minute, so the message is armed within its reach even when
// the scheduler's send comes a little after the write. A nearer timer is
// not indexed: the scheduler arms a delay message for it after the write,
// and the run's backstop (DefaultRunBackstop), whose pass fires every due
// instance timer of its run, is the net under a lost message.
const TimerHorizon = MaxTimerDelay - time.Minute

// IndexEveryTimer is the horizon of a deployment without a delay queue:
// nothing carries a short timer but the index, so every timer is indexed
// (the stores' WithTimerHorizon).
const IndexEveryTimer time.Duration = -1

// IndexedTimer is the timer an instance with snapshot s, written at now,
// holds in the timers index: the snapshot's timer when it is further than
// horizon (TimerHorizon where a delay queue carries the nearer ones;
// IndexEveryTimer where none does), or when the instance is a map child (a map's children are
// not in their run's Query, so the run's backstop does not see them and
// the index stays their net); zero otherwise. Every write of an instance's
// timer, in every store, decides it here.
func IndexedTimer(key InstanceKey, s statemodel.Snapshot, now time.Time, horizon time.Duration) (time.Time, statemodel.TimerKind) {
	at, kind := s.Timer()
	if kind == statemodel.TimerNone || at.IsZero() {
		return time.Time{}, statemodel.TimerNone
	}
	if !IndexesTimer(key, at, now, horizon) {
		return time.Time{}, statemodel.TimerNone
	}
	return at, kind
}

// IndexesTimer reports whether the instance at key, written at now with a
// timer at at, holds it in the timers index (IndexedTimer's rule).
func IndexesTimer(key InstanceKey, at, now time.Time, horizon time.Duration) bool {
	_, _, child := ParseChild(key.Task)
	return child || horizon < 0 || at.Sub(now) > horizon
}
