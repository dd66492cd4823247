package statemodel

import (
	"fmt"
	"time"
)

// EventType names what happened. Each row of the transition table pairs a
// state with one event type and the one actor allowed to report it.
type EventType string

const (
	// EvCreated is the instance's first record: from no state to CREATED.
	EvCreated EventType = "instance.created"

	EvDepsMet            EventType = "deps.met"
	EvDepsSkipped        EventType = "deps.skipped"
	EvDepsUpstreamFailed EventType = "deps.upstream_failed"
	// EvDepsTimeout: the run's depends_on_jobs were not met within its
	// dependency timeout (reason dependency_timeout).
	EvDepsTimeout EventType = "deps.timeout"

	// EvDispatched: the executor (the pool's queue) accepted attempt n. The
	// event names the attempt it creates: the current attempt plus one.
	EvDispatched EventType = "dispatch.accepted"
	// EvDispatchFailed: the scheduler could not hand attempt n+1 to its
	// executor for the whole queue timeout since the instance became
	// SCHEDULED (the queue refuses the message, the pool has no queue).
	// The instance fails without a retry: category dispatch_failed, the
	// error in the transition's reason.
	EvDispatchFailed EventType = "dispatch.failed"

	EvStarted   EventType = "attempt.started"
	EvHeartbeat EventType = "attempt.heartbeat"
	EvSucceeded EventType = "attempt.succeeded"
	EvFailed    EventType = "attempt.failed"
	EvCancelled EventType = "attempt.cancelled"

	EvLeaseExpired   EventType = "lease.expired"
	EvQueueTimeout   EventType = "queue.timeout"
	EvCancelTimeout  EventType = "cancel.timeout"
	EvEvidenceOK     EventType = "evidence.succeeded"
	EvEvidenceFailed EventType = "evidence.failed"
	EvNeverStarted   EventType = "evidence.never_started"
	EvWindowExpired  EventType = "evidence.window_expired"

	EvRetryDue EventType = "retry.due"

	EvCancelRequested   EventType = "cancel.requested"
	EvPause             EventType = "pause"
	EvResume            EventType = "resume"
	EvOverrideSucceeded EventType = "override.succeeded"
	EvOverrideFailed    EventType = "override.failed"
	EvManualRetry       EventType = "operator.retry"
	// EvOverrideCleared returns a task that ended without running
	// (UPSTREAM_FAILED or SKIPPED) to CREATED, to be evaluated again: the
	// retry of an upstream task with its downstream (scope "downstream").
	EvOverrideCleared EventType = "override.cleared"

	// Signal tasks (executor "signal"): no worker runs them. The
	// scheduler starts the attempt at once (QUEUED -> RUNNING, no lease),
	// a person or an outside system settles it through the signal route
	// (actor operator), and the run timeout is its only timer.
	EvSignalRequested EventType = "signal.requested"
	EvSignalSucceeded EventType = "signal.succeeded"
	EvSignalFailed    EventType = "signal.failed"
	EvSignalTimeout   EventType = "signal.timeout"
)

// AllEventTypes lists every event type in the order of the life cycle.
func AllEventTypes() []EventType {
	return []EventType{
		EvCreated, EvDepsMet, EvDepsSkipped, EvDepsUpstreamFailed, EvDepsTimeout, EvDispatched, EvDispatchFailed,
		EvStarted, EvHeartbeat, EvSucceeded, EvFailed, EvCancelled,
		EvLeaseExpired, EvQueueTimeout, EvCancelTimeout,
		EvEvidenceOK, EvEvidenceFailed, EvNeverStarted, EvWindowExpired,
		EvRetryDue, EvCancelRequested, EvPause, EvResume,
		EvOverrideSucceeded, EvOverrideFailed, EvManualRetry, EvOverrideCleared,
		EvSignalRequested, EvSignalSucceeded, EvSignalFailed, EvSignalTimeout,
	}
}

// Fenced reports whether events of this type concern one attempt and are
// therefore checked against the current attempt: an older attempt's event is
// stale, recorded on that attempt and never applied.
func (t EventType) Fenced() bool {
	switch t {
	case EvStarted, EvHeartbeat, EvSucceeded, EvFailed, EvCancelled,
		EvLeaseExpired, EvQueueTimeout, EvCancelTimeout,
		EvEvidenceOK, EvEvidenceFailed, EvNeverStarted, EvWindowExpired,
		EvSignalRequested, EvSignalSucceeded, EvSignalFailed, EvSignalTimeout:
		return true
	}
	return false
}

// Event is a fact reported by one actor.
type Event struct {
	ID      string    // unique per fact; the same ID again is a duplicate
	Type    EventType // what happened
	Actor   Actor     // who reports it
	Attempt int       // the attempt it concerns (0: none)
	// EventTime is when it happened by the reporter's clock; ObservedAt is
	// when runledger received it. Zero values default to Apply's now.
	EventTime  time.Time
	ObservedAt time.Time
	Evidence   map[string]string // what the reporter saw (reconciler verdicts, executor ids)
	Reason     string
	Operator   string // required on overrides

	// Worker and executor details.
	WorkerID      string
	ExecutorID    string // the executor's id for the attempt (the SQS message id, a Lambda request id, an ECS task ARN)
	Executor      string // the executor's type on dispatch; "" is the pool's queue
	TokenHash     string // hash of the new attempt's fencing token (dispatch)
	ExitCode      *int
	ErrorCategory string
	Retryable     *bool // nil means retryable
	OutputRef     string
	// Output is the attempt's output as JSON; kept on the attempt record
	// when the event ends it succeeded.
	Output []byte
}

func (e Event) retryable() bool { return e.Retryable == nil || *e.Retryable }

func (e Event) String() string {
	return fmt.Sprintf("%s(%s, attempt %d, id %q)", e.Type, e.Actor, e.Attempt, e.ID)
}

// Reserved error categories. Others are free snake_case from workers.
const (
	CategoryLost         = "lost"
	CategoryTimeout      = "timeout"
	CategoryCancelled    = "cancelled"
	CategoryNeverStarted = "never_started"
	// CategoryDispatchFailed: no attempt could be dispatched; it is
	// recorded in the transition's evidence (error_category), as no
	// attempt exists to carry it.
	CategoryDispatchFailed = "dispatch_failed"
	// CategoryRejected: a signal task's signal said failed.
	CategoryRejected = "rejected"
)
