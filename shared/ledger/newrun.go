package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// New-run setup, written once for every store: what CreateRun refuses
// before any I/O, and the run and instances it writes.

// CheckNewRun refuses a run that no store may create, before any I/O: its
// keys, trigger, task count, slot claim, release (answered: the backfill
// the release leaves), idempotency key, task ids, policies, secrets and
// DAG. It answers the tasks as the DAG rules see them.
func CheckNewRun(nr NewRun) (nodes []statemodel.TaskNode, released Backfill, err error) {
	if err := CheckJobName(nr.Job); err != nil {
		return nil, Backfill{}, err
	}
	if err := CheckRunID(nr.ID); err != nil {
		return nil, Backfill{}, err
	}
	if err := CheckTrigger(nr.Trigger, nr.BackfillID); err != nil {
		return nil, Backfill{}, err
	}
	if err := CheckRetention(nr.Retention); err != nil {
		return nil, Backfill{}, err
	}
	if nr.TraceID != "" && !protocol.CheckTraceID(nr.TraceID) {
		return nil, Backfill{}, fmt.Errorf("%w: trace id %q is not 32 lower-case hex digits", ErrInvalidInput, nr.TraceID)
	}
	switch {
	case len(nr.Tasks) == 0:
		return nil, Backfill{}, fmt.Errorf("%w: a run needs at least one task", ErrInvalidInput)
	case len(nr.Tasks) > MaxTasksPerRun:
		return nil, Backfill{}, fmt.Errorf("%w: %d tasks, at most %d", ErrTooManyTasks, len(nr.Tasks), MaxTasksPerRun)
	case (nr.ClaimSlot || nr.MarkSlot) && nr.LogicalTime.IsZero():
		return nil, Backfill{}, fmt.Errorf("%w: a slot claim needs a logical time", ErrInvalidInput)
	case nr.ClaimSlot && nr.MarkSlot:
		return nil, Backfill{}, fmt.Errorf("%w: a run claims its slot or marks it, not both", ErrInvalidInput)
	}
	if nr.Release != nil {
		if released, err = CheckRelease(nr); err != nil {
			return nil, Backfill{}, err
		}
	}
	if nr.Idempotency != nil {
		if err := CheckIdempotencyKey(nr.Idempotency.Key); err != nil {
			return nil, Backfill{}, err
		}
	}
	nodes = make([]statemodel.TaskNode, len(nr.Tasks))
	for i, t := range nr.Tasks {
		if err := CheckTaskID(t.ID); err != nil {
			return nil, Backfill{}, err
		}
		if err := t.Policy.Validate(); err != nil {
			return nil, Backfill{}, fmt.Errorf("%w: task %s: %w", ErrInvalidInput, t.ID, err)
		}
		if err := CheckSecret(t.ID, t.Secret); err != nil {
			return nil, Backfill{}, err
		}
		nodes[i] = statemodel.TaskNode{ID: t.ID, DependsOn: t.DependsOn, Rule: t.TriggerRule, Publish: t.Publish, State: statemodel.StateCreated}
	}
	if err := statemodel.ValidateDAG(nodes); err != nil {
		return nil, Backfill{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return nodes, released, nil
}

// NewRunRecord is the run CreateRun writes for nr (its tasks as nodes,
// from CheckNewRun), created at now, its timer armed at stamp, the store's
// clock (FirstRunTimer).
func NewRunRecord(nr NewRun, nodes []statemodel.TaskNode, now, stamp time.Time, backstop time.Duration) Run {
	run := Run{
		ID: nr.ID, Job: nr.Job, LogicalTime: nr.LogicalTime,
		Params: slices.Clone(nr.Params), Spec: slices.Clone(nr.Spec),
		ExecutionState:   statemodel.DeriveRunState(nodes).State,
		PublicationState: statemodel.DerivePublication(nodes),
		CreatedAt:        now, Version: 1, TimerAt: nr.TimerAt, DeadlineAt: nr.DeadlineAt,
		DependencyTimeoutAt: nr.DependencyTimeoutAt, Trigger: nr.Trigger, BackfillID: nr.BackfillID,
		Event: nr.Event, Priority: nr.Priority, TraceID: nr.TraceID,
	}
	run.Status = run.ExecutionState.Status()
	run.TimerAt = FirstRunTimer(run, stamp, backstop)
	return run
}

// NewInstance is task t of run nr as CreateRun writes it, decided by
// DecideNewInstance: CREATED with its creation record, or SCHEDULED for a
// task marked so. History holds its first records; the timer is the
// snapshot's where it is indexed (IndexedTimer, at the TimerHorizon; a
// store with another horizon decides it again before it writes).
func NewInstance(nr NewRun, t NewTask, now time.Time) (Instance, error) {
	key := InstanceKey{Run: nr.ID, Task: t.ID}
	snap, hist, err := DecideNewInstance(key, t, now)
	if err != nil {
		return Instance{}, err
	}
	inst := Instance{
		Key: key, Job: nr.Job, Pool: t.Pool, Payload: slices.Clone(t.Payload), Executor: slices.Clone(t.Executor), Policy: t.Policy,
		DependsOn: slices.Clone(t.DependsOn), TriggerRule: t.TriggerRule, Publish: t.Publish,
		Snapshot: snap, History: hist, Secret: slices.Clone(t.Secret), Item: slices.Clone(t.Item), Map: slices.Clone(t.Map),
	}
	inst.Policy.Random = nil
	inst.TimerAt, inst.TimerKind = IndexedTimer(key, snap, now, TimerHorizon)
	return inst, nil
}
