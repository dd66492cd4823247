package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// MaxTasksPerRun is the most tasks one run may have. CreateRun writes the
// run, its per-job pointer, an optional slot claim and an optional
// idempotency key, and one item per task (the instance, its creation
// record inline) in ONE TransactWriteItems of at most 100 actions: 4 + 48
// = 52 today, so the limit, which the API documents, has room to grow.
const MaxTasksPerRun = 48

// Listing limits.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// timerKindRunBackstop is the run item's timer: re-derive the run's state
// even if no task completion woke it.
const timerKindRunBackstop = "run_backstop"

// Run is a run item. Its states are derived from its tasks by the caller
// (statemodel.DeriveRunState, DerivePublication) and stored with a version
// compare-and-set (UpdateRunState).
type Run struct {
	ID               string
	Job              string
	LogicalTime      time.Time
	Params           []byte // opaque JSON; every read of a run answers them, wherever a store keeps them
	Spec             []byte // opaque JSON: the tasks as the job defined them
	ExecutionState   statemodel.RunState
	PublicationState statemodel.PublicationState
	Status           statemodel.Status // ExecutionState.Status(), stored for filtering
	CreatedAt        time.Time
	EndedAt          time.Time
	Version          int64
	TimerAt          time.Time // its timer (RunTimer: the backstop, or sooner); zero once terminal
	// Trigger is what created the run. A run stored before runs kept it
	// is read as schedule when its job's slot at its logical time names
	// it, else as manual (legacyTriggers).
	Trigger statemodel.Trigger
	// BackfillID names the backfill that released the run (trigger
	// backfill only).
	BackfillID string
	// DeadlineAt is when the run should have finished (its job's
	// deadline after its creation); zero: none. DeadlineMissedAt is when
	// the scheduler recorded it unfinished at DeadlineAt (once; zero: not).
	DeadlineAt       time.Time
	DeadlineMissedAt time.Time
	// DependencyTimeoutAt is when the run's tasks still waiting on its
	// job dependencies end (its creation, or release, plus its job's
	// timeouts.dependency); zero: the run waits on no other job. The
	// run's timer falls due then at the latest, so the pass that ends
	// them comes on time.
	DependencyTimeoutAt time.Time
	// Event names the event that started the run (trigger event only).
	Event *protocol.RunEvent
	// Priority is the run's place in its limiters' queues: 1 first .. 5
	// last; 0 for a run stored before runs kept it (its job's then).
	Priority int
	// AdmittedAt and AdmittedIn are the run's last admission into a
	// limiter: when, and which (a job with limits only); WaitingIn is the
	// limiter it waits in since (none once admitted there). The limiter
	// write that admits the run, or leaves it waiting, writes them
	// (LimiterWrite.Mark), and they are kept once the run ends and gives
	// its room back, so an ended run still answers when it held its room.
	// Zero for a run never entered, or stored before runs kept them.
	AdmittedAt time.Time
	AdmittedIn string
	WaitingIn  string
	// ExpiresAt is when the run and every item of it expire (RunExpiry),
	// the same on all of them; Retention is how long it is kept after its
	// end, which sets how far a push moves ExpiresAt (ExpiryDue). Both
	// zero for a run stored before runs expired: it never does.
	ExpiresAt time.Time
	Retention time.Duration
	// TraceID is the run's W3C trace id (32 hex digits): the trigger's
	// traceparent's, else a new one. Stored once, on the run: its
	// attempts' and its own span ids are derived (protocol.RunSpanID,
	// AttemptSpanID), and its history records show it from here. Empty
	// for a run stored before runs kept one.
	TraceID string
}

// NewTask is one task of a new run.
type NewTask struct {
	ID      string
	Pool    string
	Payload []byte
	// Executor is the task's executor (jobspec.Executor's JSON); nil is the
	// pool's queue.
	Executor    []byte
	Policy      statemodel.Policy
	DependsOn   []string
	TriggerRule statemodel.TriggerRule
	Publish     bool
	// Scheduled creates the task SCHEDULED (its deps.met applied in the
	// same write), for a task the caller knows has nothing to wait for.
	Scheduled bool
	// Secret is the instance's attempt secret (Instance.Secret):
	// SecretBytes random bytes, or empty for none.
	Secret Secret
	// Item is a map child's element (Instance.Item).
	Item []byte
	// Map is a map task's fan-out (Instance.Map).
	Map []byte
}

// Idempotency is a client's idempotency key and the hash of the body it
// came with.
type Idempotency struct {
	Key      string
	BodyHash string
}

// NewRun is everything CreateRun writes.
type NewRun struct {
	ID          string // a ULID, so run ids sort by creation time
	Job         string
	LogicalTime time.Time
	Params      []byte
	Spec        []byte
	Tasks       []NewTask // 1..MaxTasksPerRun
	Trigger     statemodel.Trigger
	BackfillID  string // trigger backfill only
	Priority    int    // 1..5; 0: none stored
	// ClaimSlot claims the job's slot item SLOT#<LogicalTime> in the same
	// transaction (cron and one-off runs): one slot never yields two runs.
	ClaimSlot bool
	// MarkSlot marks the job's slot item as having a run without
	// claiming it (a manual run with an explicit logical time): the mark
	// keeps the first run that took the slot and refuses nothing, so
	// another manual run of that time is created, and a later claim of the
	// slot (schedule, catch-up, backfill) finds it taken.
	MarkSlot bool
	// Release is the backfill as held when the run is its oldest pending
	// slot: the backfill's write (the slot out of Pending, the run into
	// Active) rides in the run's creating write, conditioned on the
	// backfill's version (ErrVersionConflict when it changed).
	Release     *Backfill
	Idempotency *Idempotency
	// TimerAt is the run's first backstop; zero means now + the store's
	// run backstop (or DeadlineAt, when sooner).
	TimerAt time.Time
	// DeadlineAt is when the run should have finished (zero: no deadline);
	// the run's timer falls due then at the latest.
	DeadlineAt time.Time
	// DependencyTimeoutAt is when its tasks waiting on other jobs end
	// (zero: it waits on none); the run's timer falls due then at the
	// latest.
	DependencyTimeoutAt time.Time
	// OfLiveJob checks, in the creating write, that the job exists and is
	// not being deleted (DeleteJobIfIdle); ErrNotFound otherwise. The
	// service sets it; a run of no job item (a test's) leaves it false.
	OfLiveJob bool
	// Event names the event that starts the run (trigger event only).
	Event *protocol.RunEvent
	// Retention is how long the run is kept after its end (its job's
	// retention); zero is the store's, the deployment's setting.
	Retention time.Duration
	// TraceID is the run's trace id (protocol.CheckTraceID); "" stores
	// none.
	TraceID string
}

// RunView is a whole run as one Query reads it.
type RunView struct {
	Run   Run
	Tasks []TaskView // by task id
	// Maps are the map items of the run's map tasks that expanded, by
	// task: their counts (MapState).
	Maps map[string]MapState
	// Entered is, for a new run its creator entered in its limiters,
	// where each entry put it, by limiter; nil when not known (a read
	// view): the limiters tell.
	Entered map[string]Entered
}

// TaskView is one task instance with its attempt items.
type TaskView struct {
	Instance Instance
	Attempts []Attempt // by attempt number
}

// Nodes returns the run's tasks as the DAG rules see them.
func (v RunView) Nodes() []statemodel.TaskNode {
	out := make([]statemodel.TaskNode, len(v.Tasks))
	for i, t := range v.Tasks {
		out[i] = t.Instance.Node()
	}
	return out
}

// ShownRun is run as its readers see it, given its tasks (nodes): no
// write moves a run from QUEUED to RUNNING (the start of its first task
// would cost a write of the run item and of its live entry), so a run
// stored QUEUED one of whose tasks started is RUNNING, derived when read
// (docs/store.md). Any other stored state is shown as stored: a finish is
// the advance's to store, never a reader's to guess.
func ShownRun(run Run, nodes []statemodel.TaskNode) Run {
	if run.ExecutionState == statemodel.RunQueued && statemodel.DeriveRunState(nodes).Started {
		run.ExecutionState, run.Status = statemodel.RunRunning, statemodel.RunRunning.Status()
	}
	return run
}

// CreationEventID is the event id of a task's instance.created record.
func CreationEventID(run, task string) string { return "created:" + run + ":" + task }

// DepsEventID is the event id of the dependency verdict on an instance
// whose snapshot is at seq: one verdict per stay in CREATED, so evaluators
// that read the same snapshot send the same id (the second is a
// duplicate), and a task cleared back to CREATED later gets a fresh one.
func DepsEventID(seq int64) string { return fmt.Sprintf("deps:%d", seq) }

// DecideNewInstance decides a new instance: instance.created, and for a task
// the caller marked Scheduled its deps.met too, with the records both
// leave in its history.
func DecideNewInstance(key InstanceKey, t NewTask, now time.Time) (statemodel.Snapshot, []statemodel.Transition, error) {
	events := []statemodel.Event{{
		ID: CreationEventID(key.Run, key.Task), Type: statemodel.EvCreated, Actor: statemodel.ActorScheduler,
		EventTime: now, ObservedAt: now,
	}}
	if t.Scheduled {
		events = append(events, statemodel.Event{ID: DepsEventID(1), Type: statemodel.EvDepsMet, Actor: statemodel.ActorScheduler})
	}
	var snap statemodel.Snapshot
	var hist []statemodel.Transition
	for _, ev := range events {
		d := statemodel.Apply(snap, ev, now, t.Policy)
		if d.Outcome != statemodel.Applied {
			return snap, nil, fmt.Errorf("%w: creating %s: %v", ErrInvalidInput, key, d.Err)
		}
		snap = d.Snapshot
		hist = append(hist, *d.Transition)
	}
	return snap, hist, nil
}

// MergeAttempts lists every attempt of a task by number: the records the
// instance holds, the older ones from their attempt items, each with the
// late events its item keeps.
func MergeAttempts(items []Attempt, held []statemodel.AttemptRecord) []Attempt {
	byN := make(map[int]Attempt, len(items)+len(held))
	for _, a := range items {
		byN[a.N] = a
	}
	for _, r := range held {
		a := byN[r.N]
		a.AttemptRecord = r
		byN[r.N] = a
	}
	out := make([]Attempt, 0, len(byN))
	for _, a := range byN {
		if a.HasRecord() {
			out = append(out, a)
		}
	}
	// Attempt item keys are zero-padded to three digits; past 999 text
	// order is not number order, so sort by number.
	slices.SortFunc(out, func(a, b Attempt) int { return a.N - b.N })
	return out
}

// RunFilter selects runs for ListRuns.
type RunFilter struct {
	Job    string            // "": every job
	Status statemodel.Status // "": every status
	Limit  int               // 0: DefaultListLimit; at most MaxListLimit
	Token  string
}

// UnfinishedRun is a job's run that has not ended, as the live index lists
// it.
type UnfinishedRun struct {
	ID          string
	LogicalTime time.Time
	// Trigger is the run's trigger; "" for an entry of the former layout
	// (a run pointer), whose run was not a backfill's.
	Trigger statemodel.Trigger
}

// RunUpdate is a run's newly derived state.
type RunUpdate struct {
	ExecutionState   statemodel.RunState
	PublicationState statemodel.PublicationState
	// EndedAt is set when ExecutionState is terminal; zero means the
	// store's clock.
	EndedAt time.Time
	// TimerAt is the next backstop while not terminal; zero means the
	// store's clock + its run backstop.
	TimerAt time.Time
}
