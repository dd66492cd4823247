// Package statemodel is runledger's state machine: the closed transition
// table of a task instance, the retry policy, the DAG trigger rules, the
// compatibility map and the metrics derived from transition times.
//
// It is pure: no AWS, no I/O, no clock reads. Time and randomness come in as
// arguments, so every decision can be replayed and model-checked.
package statemodel

// InstanceState is the full internal state of a task instance.
type InstanceState string

const (
	// StateCreated: the instance row exists; its dependencies have not been
	// evaluated. Owner: scheduler. Timer: dependency re-evaluation backstop.
	StateCreated InstanceState = "CREATED"
	// StateScheduled: dependencies met and any retry time reached; eligible
	// for dispatch. Owner: scheduler. Timer: dispatch due.
	StateScheduled InstanceState = "SCHEDULED"
	// StateQueued: the executor (the pool's SQS queue) accepted attempt n.
	// Owner: scheduler, on the executor's ack. Timer: queue timeout.
	StateQueued InstanceState = "QUEUED"
	// StateRunning: attempt n's worker claimed it. Owner: worker. Timer: the
	// heartbeat lease.
	StateRunning InstanceState = "RUNNING"
	// StateUpForRetry: an attempt failed and the policy allows another;
	// retry_at is stored. Owner: scheduler. Timer: retry_at.
	StateUpForRetry InstanceState = "UP_FOR_RETRY"
	// StateLost: the lease expired with no heartbeat. The outcome is
	// UNKNOWN, not failed. Owner: reconciler. Timer: evidence deadline.
	StateLost InstanceState = "LOST"
	// StateCancelling: cancel requested while the work may be running.
	// Owner: operator. Timer: cancel deadline.
	StateCancelling InstanceState = "CANCELLING"
	// StatePaused: an operator hold on a waiting instance. Owner: operator.
	// The one non-terminal state without a timer.
	StatePaused InstanceState = "PAUSED"

	// Terminal states. Absorbing for every automatic event; only an
	// operator may leave them (override, manual retry).
	StateSucceeded      InstanceState = "SUCCEEDED"
	StateFailed         InstanceState = "FAILED"
	StateCancelled      InstanceState = "CANCELLED"
	StateSkipped        InstanceState = "SKIPPED"
	StateUpstreamFailed InstanceState = "UPSTREAM_FAILED"
)

// AllStates lists every instance state, non-terminal first, in the order of
// the life cycle.
func AllStates() []InstanceState {
	return []InstanceState{
		StateCreated, StateScheduled, StateQueued, StateRunning, StateUpForRetry,
		StateLost, StateCancelling, StatePaused,
		StateSucceeded, StateFailed, StateCancelled, StateSkipped, StateUpstreamFailed,
	}
}

// AttemptOwningStates are the states in which the instance's current
// attempt owns its task: its claim won, and it has neither ended nor been
// found LOST (its own heartbeat brings it back). A worker's fenced commit
// (the store's Fence) lands only while the instance is in one of them with
// that attempt's number, so no two attempts' commits can both land and
// none lands after its attempt ended.
func AttemptOwningStates() []InstanceState {
	return []InstanceState{StateRunning, StateCancelling}
}

// AttemptOwnsTask reports whether s is one of AttemptOwningStates.
func (s InstanceState) AttemptOwnsTask() bool {
	for _, k := range AttemptOwningStates() {
		if k == s {
			return true
		}
	}
	return false
}

// Valid reports whether s is one of AllStates.
func (s InstanceState) Valid() bool {
	for _, k := range AllStates() {
		if k == s {
			return true
		}
	}
	return false
}

// Terminal reports whether s is absorbing for automatic events.
func (s InstanceState) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateCancelled, StateSkipped, StateUpstreamFailed:
		return true
	}
	return false
}

// Unfinished reports whether s still has work ahead of it (not terminal).
func (s InstanceState) Unfinished() bool { return s.Valid() && !s.Terminal() }

// Status is the coarse external status for clients that know only five.
type Status string

const (
	StatusPending   Status = "PENDING"
	StatusRunning   Status = "RUNNING"
	StatusSucceeded Status = "SUCCEEDED"
	StatusFailed    Status = "FAILED"
	StatusCancelled Status = "CANCELLED"
)

// AllStatuses lists the coarse statuses.
func AllStatuses() []Status {
	return []Status{StatusPending, StatusRunning, StatusSucceeded, StatusFailed, StatusCancelled}
}

// Status maps the internal state to its coarse compat status. Every API
// representation carries both, so nothing is lost for clients that know more.
func (s InstanceState) Status() Status {
	switch s {
	case StateCreated, StateScheduled, StateQueued, StateUpForRetry, StatePaused:
		return StatusPending
	case StateRunning, StateLost, StateCancelling:
		return StatusRunning
	case StateSucceeded, StateSkipped:
		return StatusSucceeded
	case StateFailed, StateUpstreamFailed:
		return StatusFailed
	case StateCancelled:
		return StatusCancelled
	}
	return ""
}

// Actor is who reports an event. Each row of the transition table names the
// one actor allowed to send its event.
type Actor string

const (
	ActorScheduler  Actor = "scheduler"
	ActorExecutor   Actor = "executor"
	ActorWorker     Actor = "worker"
	ActorReconciler Actor = "reconciler"
	ActorOperator   Actor = "operator"
)

// AllActors lists every actor.
func AllActors() []Actor {
	return []Actor{ActorScheduler, ActorExecutor, ActorWorker, ActorReconciler, ActorOperator}
}
