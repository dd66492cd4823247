package ledger

import "time"

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
