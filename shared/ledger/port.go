package ledger

import (
	"context"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// Store is the storage contract the scheduler uses: everything it reads
// and writes, and nothing else, in this package's records, with every
// change of an instance's state decided by the decision loop. A store
// implements the port (Storage); New builds the Store over it once.
//
// Errors are this package's sentinels (ErrNotFound, ErrVersionConflict,
// ...) and statemodel's for a rejected event, whatever the implementation.
type Store interface {
	Runs
	Instances
	Timers
	Jobs
	WorkerLeases
	Backfills
	Outputs
	Maps
	Limiters
}

// Storage is the port a store implements: reads and conditional writes,
// no decisions. The DynamoDB store (shared/store) and the in-memory one
// (shared/store/memstore) implement it, and one contract suite
// (ledgertest) holds both, each under New, to the same behaviour.
type Storage interface {
	Runs
	InstanceStorage
	InstanceRecords
	Timers
	Jobs
	WorkerLeases
	Backfills
	Outputs
	Maps
	Limiters
}

// Ledger is a Store: a port with the decision loop over it. The loop
// (TransitionAll) runs on the port's instance reads and writes; every
// other call goes to the port as it is.
type Ledger struct {
	Storage
}

// New returns the Store over port s: the one place the decision loop is
// joined to a store.
func New(s Storage) Ledger { return Ledger{Storage: s} }

// Transition applies e to the instance at key (see the function
// Transition).
func (l Ledger) Transition(ctx context.Context, key InstanceKey, e statemodel.Event, now time.Time, p statemodel.Policy) (Result, error) {
	return Transition(ctx, l.Storage, key, e, now, p)
}

// TransitionFrom applies e decided from held (see the function
// TransitionFrom).
func (l Ledger) TransitionFrom(ctx context.Context, held Instance, e statemodel.Event, now time.Time, p statemodel.Policy) (Result, error) {
	return TransitionFrom(ctx, l.Storage, held, e, now, p)
}

// TransitionAll applies events in order to held as one write (see the
// function TransitionAll).
func (l Ledger) TransitionAll(ctx context.Context, held Instance, events []statemodel.Event, now time.Time, p statemodel.Policy) (Result, error) {
	return TransitionAll(ctx, l.Storage, held, events, now, p)
}

// A Ledger is a Store.
var _ Store = Ledger{}

// Backfills keeps backfills: the slots of a range still to release, the
// runs released and not ended, and what became of the others. Releasing a
// slot is CreateRun with NewRun.Release, in the run's creating write.
type Backfills interface {
	// CreateBackfill writes a new backfill (CheckNewBackfill).
	CreateBackfill(ctx context.Context, b Backfill) (Backfill, error)
	GetBackfill(ctx context.Context, id string) (Backfill, error)
	// ListBackfills lists a job's backfills newest first; callers page
	// until the token is "".
	ListBackfills(ctx context.Context, job string, limit int, token string) ([]Backfill, string, error)
	// UpdateBackfill stores what b holds now with a compare-and-set on
	// b.Version (ErrVersionConflict when another write won).
	UpdateBackfill(ctx context.Context, b Backfill) (Backfill, error)
	// TakenSlots reports which of a job's slots hold a run, in order.
	TakenSlots(ctx context.Context, job string, slots []time.Time) ([]bool, error)
}

// Runs creates runs, reads them whole, stores their derived state, and
// answers from the live-work indexes: the unfinished runs of a job and the
// jobs that depend on one.
type Runs interface {
	// CreateRun writes a run, its instances (CREATED, or SCHEDULED when
	// marked so) and their first records atomically; a taken slot or idempotency key is an
	// *ExistingRunError.
	CreateRun(ctx context.Context, nr NewRun, now time.Time) (RunView, error)
	// ReadRun reads a run with its instances and attempts, tasks by id;
	// its run as shown (ShownRun).
	ReadRun(ctx context.Context, id string) (RunView, error)
	// GetRun reads the run item alone (with its params, wherever a store
	// keeps them), its state as stored: QUEUED until the run ends, though
	// a task of it started (ShownRun).
	GetRun(ctx context.Context, id string) (Run, error)
	// ListRuns lists runs newest first, as shown (ShownRun), the status
	// filter applied to that; callers page until the token is "".
	ListRuns(ctx context.Context, f RunFilter) ([]Run, string, error)
	// UpdateRunState stores a derived state with a compare-and-set on
	// run.Version (ErrVersionConflict when another write won).
	UpdateRunState(ctx context.Context, run Run, u RunUpdate) (Run, error)
	// RearmRunBackstop moves a live run's backstop timer ahead when its
	// state and version are still run's.
	RearmRunBackstop(ctx context.Context, run Run) (Run, error)
	// ListUnfinishedRuns lists a job's unfinished runs, oldest first.
	ListUnfinishedRuns(ctx context.Context, job string) ([]UnfinishedRun, error)
	// HasUnfinishedRuns reports whether a job has a run that has not
	// ended, leaving out the runs of the ignored triggers.
	HasUnfinishedRuns(ctx context.Context, job string, ignore ...statemodel.Trigger) (bool, error)
	// MarkDeadlineMissed records that an unfinished run was found at or
	// past its deadline, with one conditional write, and answers the run
	// as stored; false when it was recorded already or the run finished.
	MarkDeadlineMissed(ctx context.Context, run Run) (Run, bool, error)
	// ListDependents lists the jobs whose depends_on_jobs name job.
	ListDependents(ctx context.Context, job string) ([]string, error)
}

// Instances moves task instances through the state machine: every change
// of state is a Transition decided by statemodel from the stored snapshot
// and written conditionally, so a race costs a re-decision, never a wrong
// write.
type Instances interface {
	InstanceRecords
	GetInstance(ctx context.Context, key InstanceKey) (Instance, error)
	// Transition applies e at now under policy p (StoredPolicy: the
	// instance's own) and answers what it did (Result).
	Transition(ctx context.Context, key InstanceKey, e statemodel.Event, now time.Time, p statemodel.Policy) (Result, error)
	// TransitionFrom is Transition decided from the instance the caller
	// holds, with no read unless it proves stale; Result.Instance is the
	// instance as written.
	TransitionFrom(ctx context.Context, held Instance, e statemodel.Event, now time.Time, p statemodel.Policy) (Result, error)
	// TransitionAll applies events in order as one write, stopping at the
	// first that does not apply (deps.met and dispatch.accepted).
	TransitionAll(ctx context.Context, held Instance, events []statemodel.Event, now time.Time, p statemodel.Policy) (Result, error)
}

// InstanceRecords reads an instance's run, attempts and history, and
// renews its lease: the instance calls a store answers on its own, with
// no decision of the loop's.
type InstanceRecords interface {
	// GetInstanceAndRun reads an instance and its run in one call.
	GetInstanceAndRun(ctx context.Context, key InstanceKey) (Instance, Run, error)
	// GetAttempt reads attempt n, also one the instance no longer holds.
	GetAttempt(ctx context.Context, key InstanceKey, n int) (Attempt, error)
	// Heartbeat renews attempt's lease without a history record.
	Heartbeat(ctx context.Context, key InstanceKey, attempt int, now time.Time, lease time.Duration) (HeartbeatResult, error)
	// History pages an instance's transition records in order.
	History(ctx context.Context, key InstanceKey, limit int, token string) ([]statemodel.Transition, string, error)
	// Fence is the check a worker's own DynamoDB transaction adds so that
	// it commits only while attempt owns the instance at key; false when
	// the store is not one a worker can reach (in memory).
	Fence(ctx context.Context, key InstanceKey, attempt int) (protocol.Fence, bool, error)
}

// Timers lists what is due: job fires, run backstops and instance timers.
type Timers interface {
	// ListDueTimers lists shard's timers due at now (shard in
	// 0..tableschema.TimerShards-1), oldest first, paged.
	ListDueTimers(ctx context.Context, shard int, now time.Time, limit int, token string) ([]DueTimer, string, error)
}

// Jobs keeps job definitions and their schedule state.
type Jobs interface {
	CreateJob(ctx context.Context, j Job) (Job, error)
	GetJob(ctx context.Context, name string) (Job, error)
	ListJobs(ctx context.Context, limit int, token string) ([]Job, string, error)
	// UpdateJob replaces a job's definition with a compare-and-set on its
	// version.
	UpdateJob(ctx context.Context, j Job, expected int64) (Job, error)
	SetJobPaused(ctx context.Context, name string, paused bool) (Job, error)
	// MoveSchedule moves a running job's schedule position (next fire,
	// pending catch-up) and adds to its missed slots, conditioned on the
	// version and position the move was decided from (ErrConflict
	// otherwise).
	MoveSchedule(ctx context.Context, name string, m ScheduleMove) (Job, error)
	// ResumeJob resumes a paused job and moves its schedule in the same
	// conditional write (ErrConflict when it changed since read).
	ResumeJob(ctx context.Context, name string, m ScheduleMove) (Job, error)
	// DeleteJobIfIdle deletes a job and its dependency edges (its runs
	// stay readable) only when it has no unfinished run
	// (ErrUnfinishedRuns), in conditional writes: a run created
	// meanwhile is found, or its creating write (NewRun.OfLiveJob) fails.
	DeleteJobIfIdle(ctx context.Context, name string) error
}

// WorkerLeases keeps each worker process's lease, the evidence for
// resolving LOST instances.
type WorkerLeases interface {
	// PutWorkerLease stores l unless the stored lease is newer.
	PutWorkerLease(ctx context.Context, l WorkerLease) error
	GetWorkerLease(ctx context.Context, name string) (WorkerLease, error)
}
