package statemodel

import (
	"bytes"
	"slices"
	"time"
)

// AttemptOutcome is how an attempt ended, and who said so.
type AttemptOutcome string

const (
	OutcomeNone         AttemptOutcome = ""              // not ended
	OutcomeSucceeded    AttemptOutcome = "succeeded"     // reported by the worker or confirmed by evidence
	OutcomeFailed       AttemptOutcome = "failed"        // reported by the worker or confirmed by evidence
	OutcomeCancelled    AttemptOutcome = "cancelled"     // the worker acknowledged a cancel, or cancel won over unknown
	OutcomeLost         AttemptOutcome = "lost"          // gone without a word: the evidence window ended empty, or its process is gone
	OutcomeTimeout      AttemptOutcome = "timeout"       // never claimed within the queue timeout
	OutcomeNeverStarted AttemptOutcome = "never_started" // evidence: the work never began
	OutcomeAbandoned    AttemptOutcome = "abandoned"     // an operator decided the instance while it was unresolved
)

// Undecided reports whether no one has yet told the attempt's real outcome:
// a late success from such an attempt is still the truth and must win.
func (o AttemptOutcome) Undecided() bool {
	return o == OutcomeNone || o == OutcomeLost || o == OutcomeNeverStarted
}

// AttemptRecord is one process-level try of an instance. Its times come from
// transitions, so a retry never erases what the attempt did.
type AttemptRecord struct {
	N               int
	TokenHash       string // hash of the fencing token; the token itself is never stored
	ExecutorID      string // the executor's handle (SQS message id, Lambda request id, ECS task ARN)
	Executor        string // the executor's type ("lambda", "ecs"); "" is the pool's queue
	WorkerID        string // the worker that claimed it; set once
	SpendsBudget    bool   // false for never-started resubmits
	QueuedAt        time.Time
	StartedAt       time.Time
	EndedAt         time.Time
	LastHeartbeatAt time.Time // as of the attempt's end (live value: Snapshot.Lease)
	ExitCode        *int
	ErrorCategory   string
	Outcome         AttemptOutcome
	OutputRef       string
	ClaimEventID    string // the winning claim's event id: its retry is answered again
	// Output is the JSON value a successful attempt reported (at most 16
	// KiB, checked by the caller); nil when none. Only a succeeded
	// outcome keeps it.
	Output []byte
}

// Claimed reports whether a worker ever took the attempt.
func (a AttemptRecord) Claimed() bool { return !a.StartedAt.IsZero() }

// Lease is liveness, not state: heartbeats refresh it without a history
// record, which keeps heartbeats cheap. Replay compares everything but it.
type Lease struct {
	LastHeartbeatAt time.Time
	ExpiresAt       time.Time
}

// SeenEvent remembers an applied event so that its duplicate answers with
// the first outcome.
type SeenEvent struct {
	ID  string
	Seq int64
	To  InstanceState
}

// MaxInlineAttempts bounds the attempt records a snapshot holds: the
// latest ones. Every decision needs only the current attempt; an event of
// an older attempt is stale whether its record is held or not. One keeps
// the instance item under 1 KB, so each of its writes costs one write
// unit; the store keeps the older records in their attempt items.
const MaxInlineAttempts = 1

// RecentEvents bounds how many applied event ids a snapshot remembers. Older
// duplicates are still caught by the store's look-up in the whole history
// (a store may remember fewer: the DynamoDB store's are its inline
// records').
const RecentEvents = 32

// Snapshot is the state of one task instance. The zero value is the state
// before instance.created.
type Snapshot struct {
	State InstanceState
	// Version increments with every applied transition; the store's
	// compare-and-set conditions on it together with State.
	Version int64
	// Seq is the sequence number of the last transition record.
	Seq int64
	// Attempt is the current attempt's number, 0 before the first dispatch.
	Attempt int
	// Attempts are the latest attempts' records, at most MaxInlineAttempts,
	// in order of their numbers with no gap, the current one last (see
	// AttemptN). Older records are not part of the snapshot: the store
	// keeps every attempt in its own item too.
	Attempts []AttemptRecord
	// Spent counts budget-spending attempts since creation or the last
	// manual retry; it never exceeds the policy's MaxAttempts.
	Spent int
	// Resubmits counts never-started resubmits, bounded by MaxResubmits.
	Resubmits int
	// FreeNext: the next dispatch is a never-started resubmit and spends no
	// budget.
	FreeNext bool
	// RetryAt is when UP_FOR_RETRY becomes SCHEDULED; persisted, never an
	// in-memory timer.
	RetryAt time.Time
	// Deadline is the timer of every timed state but RUNNING (whose timer is
	// the lease): dependency backstop, dispatch due, queue timeout, retry_at,
	// evidence deadline, cancel deadline; and a RUNNING signal attempt's
	// run timeout, as it has no lease.
	Deadline        time.Time
	CancelRequested bool
	// PausedFrom is where resume returns to.
	PausedFrom InstanceState
	Lease      Lease
	Recent     []SeenEvent
	CreatedAt  time.Time
	// ScheduledAt is when dependencies were first met (dependency wait).
	ScheduledAt time.Time
}

// Started reports whether any attempt of the instance ever began: one was
// claimed, or a later attempt exists (the earlier one ended, so a retry
// followed). It only ever turns true (TaskNode.Started).
func (s Snapshot) Started() bool {
	if s.Attempt > 1 {
		return true
	}
	return slices.ContainsFunc(s.Attempts, AttemptRecord.Claimed)
}

// TimerKind says what a timer is for.
type TimerKind string

const (
	TimerNone         TimerKind = ""
	TimerDepsRecheck  TimerKind = "deps_recheck"
	TimerDispatch     TimerKind = "dispatch"
	TimerQueueTimeout TimerKind = "queue_timeout"
	TimerLease        TimerKind = "lease"
	TimerRetry        TimerKind = "retry"
	TimerEvidence     TimerKind = "evidence"
	TimerCancel       TimerKind = "cancel"
	// TimerSignal: a RUNNING signal attempt's run timeout.
	TimerSignal TimerKind = "signal_timeout"
)

// Timer is when the instance's owner must act next, derived from its state.
// Every non-terminal state but PAUSED has one.
func (s Snapshot) Timer() (time.Time, TimerKind) {
	switch s.State {
	case StateCreated:
		return s.Deadline, TimerDepsRecheck
	case StateScheduled:
		return s.Deadline, TimerDispatch
	case StateQueued:
		return s.Deadline, TimerQueueTimeout
	case StateRunning:
		if s.SignalAttempt() {
			return s.Deadline, TimerSignal
		}
		return s.Lease.ExpiresAt, TimerLease
	case StateUpForRetry:
		return s.Deadline, TimerRetry
	case StateLost:
		return s.Deadline, TimerEvidence
	case StateCancelling:
		return s.Deadline, TimerCancel
	}
	return time.Time{}, TimerNone
}

// Current returns the current attempt's record.
func (s Snapshot) Current() (AttemptRecord, bool) {
	return s.AttemptN(s.Attempt)
}

// AttemptN returns attempt n's record, if the snapshot holds it: the
// latest MaxInlineAttempts attempts only.
func (s Snapshot) AttemptN(n int) (AttemptRecord, bool) {
	i := s.attemptIndex(n)
	if i < 0 {
		return AttemptRecord{}, false
	}
	return s.Attempts[i], true
}

// attemptIndex is attempt n's index in Attempts, or -1.
func (s Snapshot) attemptIndex(n int) int {
	if n < 1 || len(s.Attempts) == 0 {
		return -1
	}
	i := n - s.Attempts[0].N
	if i < 0 || i >= len(s.Attempts) || s.Attempts[i].N != n {
		return -1
	}
	return i
}

// Seen returns the first outcome of an already applied event id.
func (s Snapshot) Seen(id string) (SeenEvent, bool) {
	if id == "" {
		return SeenEvent{}, false
	}
	for i := len(s.Recent) - 1; i >= 0; i-- {
		if SameEvent(s.Recent[i].ID, id) {
			return s.Recent[i], true
		}
	}
	return SeenEvent{}, false
}

// Clone returns a deep copy that shares nothing mutable with s.
func (s Snapshot) Clone() Snapshot {
	c := s
	c.Attempts = slices.Clone(s.Attempts)
	c.Recent = slices.Clone(s.Recent)
	return c
}

// EqualState compares two snapshots on everything a transition sets: all
// fields but the lease, which heartbeats refresh outside history.
func (s Snapshot) EqualState(o Snapshot) bool {
	if s.State != o.State || s.Version != o.Version || s.Seq != o.Seq || s.Attempt != o.Attempt ||
		s.Spent != o.Spent || s.Resubmits != o.Resubmits || s.FreeNext != o.FreeNext ||
		!s.RetryAt.Equal(o.RetryAt) || !s.Deadline.Equal(o.Deadline) ||
		s.CancelRequested != o.CancelRequested || s.PausedFrom != o.PausedFrom ||
		!s.CreatedAt.Equal(o.CreatedAt) || !s.ScheduledAt.Equal(o.ScheduledAt) || len(s.Attempts) != len(o.Attempts) ||
		!recentAgree(s.Recent, o.Recent) {
		return false
	}
	for i := range s.Attempts {
		if !s.Attempts[i].Equal(o.Attempts[i]) {
			return false
		}
	}
	return true
}

// recentAgree reports whether two lists of recent event ids remember the
// same events where both remember: the recent ids are a cache of the
// history's newest records, which a store may keep fewer of, or hold as
// their digests (EventDigest).
func recentAgree(a, b []SeenEvent) bool {
	n := min(len(a), len(b))
	a, b = a[len(a)-n:], b[len(b)-n:]
	for i := range a {
		// A digest is its own digest (MaxPlainEventID).
		if a[i].Seq != b[i].Seq || a[i].To != b[i].To || EventDigest(a[i].ID) != EventDigest(b[i].ID) {
			return false
		}
	}
	return true
}

// Equal compares two attempt records field by field.
func (a AttemptRecord) Equal(b AttemptRecord) bool {
	if (a.ExitCode == nil) != (b.ExitCode == nil) || (a.ExitCode != nil && *a.ExitCode != *b.ExitCode) {
		return false
	}
	return a.N == b.N && a.TokenHash == b.TokenHash && a.ExecutorID == b.ExecutorID && a.Executor == b.Executor &&
		a.WorkerID == b.WorkerID && a.SpendsBudget == b.SpendsBudget &&
		a.QueuedAt.Equal(b.QueuedAt) && a.StartedAt.Equal(b.StartedAt) && a.EndedAt.Equal(b.EndedAt) &&
		a.LastHeartbeatAt.Equal(b.LastHeartbeatAt) && a.ErrorCategory == b.ErrorCategory &&
		a.Outcome == b.Outcome && a.OutputRef == b.OutputRef && a.ClaimEventID == b.ClaimEventID &&
		bytes.Equal(a.Output, b.Output)
}
