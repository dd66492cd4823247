package statemodel

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Outcome classifies what Apply decided.
type Outcome string

const (
	// Applied: the event changed the state; Transition is its history
	// record and the caller must write it atomically with the snapshot.
	Applied Outcome = "applied"
	// Refreshed: a heartbeat renewed the lease; no history record, no
	// version bump.
	Refreshed Outcome = "refreshed"
	// Duplicate: the event id was applied before; nothing changes and First
	// is the outcome that stands.
	Duplicate Outcome = "duplicate"
	// Stale: the event concerns an older attempt. It is recorded on that
	// attempt as late (Late) and never changes the instance.
	Stale Outcome = "stale"
	// Rejected: no row allows it; Err is a *TransitionError.
	Rejected Outcome = "rejected"
)

// Transition is the history record of an applied event. It carries what the
// decision computed (times, attempt records), so folding records needs no
// policy, clock or randomness and reproduces the snapshot exactly.
type Transition struct {
	Seq        int64
	From       InstanceState
	To         InstanceState
	Event      EventType
	EventID    string
	Actor      Actor
	Attempt    int // the attempt the event concerns (0: none)
	EventTime  time.Time
	ObservedAt time.Time
	Evidence   map[string]string
	Reason     string
	Operator   string
	Scope      string // overrides: "task"; override.cleared: "downstream"

	// The record of attempt Attempt as it stands after the transition;
	// nil when the attempt did not change.
	AttemptRecord   *AttemptRecord
	Lease           Lease
	RetryAt         time.Time
	Deadline        time.Time
	CancelRequested bool
	PausedFrom      InstanceState
	Spent           int
	Resubmits       int
	FreeNext        bool
}

// Override reports whether the record is an operator override.
func (t Transition) Override() bool {
	return t.Event == EvOverrideSucceeded || t.Event == EvOverrideFailed || t.Event == EvOverrideCleared
}

// LateEvent is an event from an older attempt, kept on that attempt.
type LateEvent struct {
	Attempt    int
	EventID    string
	Type       EventType
	Actor      Actor
	EventTime  time.Time
	ObservedAt time.Time
	Outcome    AttemptOutcome // what the late report said, if it was a completion
	Detail     string
}

// EffectKind is work the caller must perform after writing a decision.
type EffectKind string

const (
	// EffectDispatch: the instance is SCHEDULED; send attempt Attempt at At.
	EffectDispatch EffectKind = "dispatch"
	// EffectTimer: (re)arm the instance's timer at At.
	EffectTimer EffectKind = "timer"
	// EffectClearTimer: the instance waits on no time any more.
	EffectClearTimer EffectKind = "clear_timer"
	// EffectNotifyDownstream: the instance finished; evaluate its
	// downstream tasks and the run's state now, not on the next tick.
	EffectNotifyDownstream EffectKind = "notify_downstream"
	// EffectRequestCancel: tell the running worker (heartbeat answers).
	EffectRequestCancel EffectKind = "request_cancel"
	// EffectGatherEvidence: the outcome is unknown; ask the evidence providers.
	EffectGatherEvidence EffectKind = "gather_evidence"
	// EffectRecordLate: append Late to the older attempt's record.
	EffectRecordLate EffectKind = "record_late"
)

// Effect is one piece of follow-up work.
type Effect struct {
	Kind    EffectKind
	At      time.Time
	Attempt int
}

// Decision is what Apply decided and what the caller must do about it.
type Decision struct {
	Outcome    Outcome
	Snapshot   Snapshot    // after the event (unchanged unless Applied or Refreshed)
	Transition *Transition // Applied only
	First      SeenEvent   // Duplicate only: the outcome that stands
	Late       *LateEvent  // Stale only
	Effects    []Effect
	Err        error // Rejected only
}

// Apply decides what event e does to snapshot s at time now under policy p.
// It is pure: s is never modified.
//
// Order of checks: a malformed event is rejected; a known event id is a
// duplicate; the wrong actor is rejected; a fenced event from an older
// attempt is stale (whatever the state, terminal included); then the table
// row and its guard decide.
func Apply(s Snapshot, e Event, now time.Time, p Policy) Decision {
	if e.ID == "" {
		return reject(s, e, ErrInvalidEvent, "event id is required")
	}
	if seen, ok := s.Seen(e.ID); ok {
		return Decision{Outcome: Duplicate, Snapshot: s, First: seen}
	}
	actor, ok := ActorOf(e.Type)
	if !ok {
		return reject(s, e, ErrInvalidEvent, "unknown event type")
	}
	if e.Actor != actor {
		return reject(s, e, ErrWrongActor, fmt.Sprintf("%s is reported by %s", e.Type, actor))
	}
	if e.ObservedAt.IsZero() {
		e.ObservedAt = now
	}
	if e.EventTime.IsZero() {
		e.EventTime = e.ObservedAt
	}
	switch {
	case e.Type == EvDispatched:
		if e.Attempt <= s.Attempt && e.Attempt >= 1 {
			return stale(s, e)
		}
		if e.Attempt != s.Attempt+1 {
			return reject(s, e, ErrUnknownAttempt, "dispatch must name the next attempt")
		}
	case e.Type.Fenced():
		if e.Attempt < 1 || e.Attempt > s.Attempt {
			return reject(s, e, ErrUnknownAttempt, "")
		}
		if e.Attempt < s.Attempt {
			return stale(s, e)
		}
	}
	row, ok := Lookup(s.State, e.Type)
	if !ok {
		return reject(s, e, ErrIllegalTransition, "")
	}
	if why := signalRefusal(s, e); why != "" {
		return reject(s, e, ErrGuard, why)
	}
	tr, err := decide(s, e, now, p)
	if err != nil {
		return Decision{Outcome: Rejected, Snapshot: s, Err: err}
	}
	if !slices.Contains(row.To, tr.To) {
		return reject(s, e, ErrTableViolation, fmt.Sprintf("decided %s", tr.To))
	}
	if row.Silent {
		n := s
		n.Lease = tr.Lease
		at, _ := n.Timer()
		return Decision{Outcome: Refreshed, Snapshot: n, Effects: []Effect{{Kind: EffectTimer, At: at, Attempt: s.Attempt}}}
	}
	tr.Seq = s.Seq + 1
	n := s.Fold(tr)
	return Decision{Outcome: Applied, Snapshot: n, Transition: &tr, Effects: effects(n, tr)}
}

func stale(s Snapshot, e Event) Decision {
	late := &LateEvent{
		Attempt: e.Attempt, EventID: e.ID, Type: e.Type, Actor: e.Actor,
		EventTime: e.EventTime, ObservedAt: e.ObservedAt, Outcome: reportedOutcome(e.Type),
		Detail: fmt.Sprintf("attempt %d is current", s.Attempt),
	}
	return Decision{Outcome: Stale, Snapshot: s, Late: late,
		Effects: []Effect{{Kind: EffectRecordLate, Attempt: e.Attempt}}}
}

func reportedOutcome(t EventType) AttemptOutcome {
	switch t {
	case EvSucceeded:
		return OutcomeSucceeded
	case EvFailed:
		return OutcomeFailed
	case EvCancelled:
		return OutcomeCancelled
	}
	return OutcomeNone
}

// decide computes the transition record for an event the table allows in
// s.State. It returns a *TransitionError when a guard does not hold.
func decide(s Snapshot, e Event, now time.Time, p Policy) (Transition, error) {
	tr := Transition{
		From: s.State, Event: e.Type, EventID: e.ID, Actor: e.Actor, Attempt: s.Attempt,
		EventTime: e.EventTime, ObservedAt: e.ObservedAt, Evidence: e.Evidence,
		Reason: e.Reason, Operator: e.Operator,
		CancelRequested: s.CancelRequested, Spent: s.Spent, Resubmits: s.Resubmits,
		FreeNext: s.FreeNext, PausedFrom: s.PausedFrom,
	}
	guard := func(err error, detail string) (Transition, error) {
		return Transition{}, reject(s, e, err, detail).Err
	}
	cur, _ := s.Current()
	// endAttempt records how the current attempt ended.
	endAttempt := func(o AttemptOutcome, category string) {
		a := cur
		a.EndedAt = now
		a.Outcome = o
		a.ErrorCategory = category
		if s.State == StateRunning || s.State == StateCancelling {
			a.LastHeartbeatAt = s.Lease.LastHeartbeatAt
		}
		if e.Actor == ActorWorker {
			a.ExitCode = e.ExitCode
			a.OutputRef = e.OutputRef
		}
		if signalEvent(e.Type) {
			a.OutputRef = e.OutputRef
		}
		if o == OutcomeSucceeded && e.Output != nil {
			a.Output = e.Output
		}
		if e.Type == EvEvidenceFailed && e.ExitCode != nil {
			// The executor saw the process exit (an ECS task's container).
			a.ExitCode = e.ExitCode
		}
		tr.AttemptRecord = &a
	}
	// retryOrFail is the policy's verdict on a failed or lost attempt.
	retryOrFail := func(retryable bool) {
		if retryable && s.Spent < p.Retry.MaxAttempts {
			tr.To = StateUpForRetry
			tr.RetryAt = now.Add(p.Retry.Backoff(s.Spent, p.draw()))
			tr.Deadline = tr.RetryAt
			return
		}
		tr.To = StateFailed
	}
	live := func() { // RUNNING or CANCELLING keep the lease; other states drop it
		tr.Lease = s.Lease
	}

	switch e.Type {
	case EvCreated:
		tr.To = StateCreated
		tr.Deadline = now.Add(p.DepsRecheck)
	case EvDepsMet:
		tr.To = StateScheduled
		tr.Deadline = now
	case EvDepsSkipped:
		tr.To = StateSkipped
	case EvDepsUpstreamFailed, EvDepsTimeout:
		tr.To = StateUpstreamFailed

	case EvDispatched:
		tr.To = StateQueued
		tr.Attempt = e.Attempt
		spends := !s.FreeNext
		if spends {
			tr.Spent = s.Spent + 1
		}
		tr.FreeNext = false
		tr.Deadline = now.Add(p.Timeouts.Queue)
		tr.AttemptRecord = &AttemptRecord{
			N: e.Attempt, TokenHash: e.TokenHash, ExecutorID: e.ExecutorID, Executor: e.Executor,
			SpendsBudget: spends, QueuedAt: now,
		}

	case EvDispatchFailed:
		// SCHEDULED's deadline is when it became due for dispatch.
		if now.Before(s.Deadline.Add(p.Timeouts.Queue)) {
			return guard(ErrNotDue, "queue timeout since scheduled not reached")
		}
		tr.To = StateFailed
		tr.Evidence = make(map[string]string, len(e.Evidence)+1)
		maps.Copy(tr.Evidence, e.Evidence)
		tr.Evidence["error_category"] = CategoryDispatchFailed

	case EvStarted:
		if cur.Claimed() {
			return guard(ErrGuard, "attempt already claimed")
		}
		tr.To = StateRunning
		a := cur
		a.StartedAt = now
		a.WorkerID = e.WorkerID
		a.ClaimEventID = e.ID
		tr.AttemptRecord = &a
		tr.Lease = Lease{LastHeartbeatAt: now, ExpiresAt: now.Add(p.Timeouts.Heartbeat)}

	case EvHeartbeat:
		tr.Lease = Lease{LastHeartbeatAt: now, ExpiresAt: now.Add(p.Timeouts.Heartbeat)}
		switch s.State {
		case StateRunning:
			tr.To = StateRunning
		case StateCancelling:
			tr.To = StateCancelling
		case StateLost: // alive after all
			if s.CancelRequested {
				tr.To = StateCancelling
				tr.Deadline = now.Add(p.Timeouts.Cancel)
			} else {
				tr.To = StateRunning
			}
		}

	case EvSucceeded:
		if !cur.Claimed() || !cur.Outcome.Undecided() {
			return guard(ErrGuard, "the current attempt was not running or its outcome is decided")
		}
		tr.To = StateSucceeded
		tr.CancelRequested = false
		endAttempt(OutcomeSucceeded, "")

	case EvFailed:
		category := e.ErrorCategory
		if s.State == StateCancelling || (s.State == StateLost && s.CancelRequested) {
			tr.To = StateFailed
		} else {
			retryOrFail(e.retryable())
		}
		tr.CancelRequested = false
		endAttempt(OutcomeFailed, category)

	case EvCancelled:
		if !s.CancelRequested {
			return guard(ErrGuard, "no cancel was requested")
		}
		tr.To = StateCancelled
		tr.CancelRequested = false
		endAttempt(OutcomeCancelled, CategoryCancelled)

	case EvLeaseExpired:
		if now.Before(s.Lease.ExpiresAt) {
			return guard(ErrNotDue, fmt.Sprintf("lease runs until %s", s.Lease.ExpiresAt.Format(time.RFC3339Nano)))
		}
		tr.To = StateLost
		tr.Deadline = now.Add(p.EvidenceWindow)
		tr.Lease = s.Lease

	case EvQueueTimeout:
		if now.Before(s.Deadline) {
			return guard(ErrNotDue, "queue deadline not reached")
		}
		retryOrFail(true)
		endAttempt(OutcomeTimeout, CategoryTimeout)

	case EvCancelTimeout:
		if now.Before(s.Deadline) {
			return guard(ErrNotDue, "cancel deadline not reached")
		}
		tr.To = StateLost
		tr.Deadline = now.Add(p.EvidenceWindow)
		live()

	case EvEvidenceOK:
		tr.To = StateSucceeded
		tr.CancelRequested = false
		endAttempt(OutcomeSucceeded, "")

	case EvEvidenceFailed:
		// Category lost: the process is gone but how the attempt ended is
		// unknown (its worker restarted), so the attempt ends lost and its
		// own late success still wins until a newer attempt is dispatched.
		// Any other category is a confirmed failure.
		outcome := OutcomeFailed
		if e.ErrorCategory == CategoryLost {
			outcome = OutcomeLost
		}
		if s.CancelRequested { // it stopped: that is what the operator asked for
			tr.To = StateCancelled
			endAttempt(OutcomeCancelled, CategoryCancelled)
		} else {
			retryOrFail(e.retryable())
			endAttempt(outcome, e.ErrorCategory)
		}
		tr.CancelRequested = false

	case EvNeverStarted:
		switch {
		case s.CancelRequested:
			tr.To = StateCancelled
		case s.Resubmits < p.MaxResubmits:
			tr.To = StateScheduled
			tr.Deadline = now
			tr.Resubmits = s.Resubmits + 1
			tr.FreeNext = true
		default:
			tr.To = StateFailed
		}
		tr.CancelRequested = false
		endAttempt(OutcomeNeverStarted, CategoryNeverStarted)

	case EvWindowExpired:
		if now.Before(s.Deadline) {
			return guard(ErrNotDue, "evidence window still open")
		}
		if s.CancelRequested {
			tr.To = StateCancelled
		} else {
			retryOrFail(true)
		}
		tr.CancelRequested = false
		endAttempt(OutcomeLost, CategoryLost)

	case EvRetryDue:
		if now.Before(s.RetryAt) {
			return guard(ErrNotDue, "retry_at not reached")
		}
		tr.To = StateScheduled
		tr.Deadline = now

	case EvCancelRequested:
		switch {
		case s.State == StateRunning && s.SignalAttempt():
			// Nothing runs it: nothing to wait for.
			tr.To = StateCancelled
			endAttempt(OutcomeCancelled, CategoryCancelled)
		case s.State == StateRunning || s.State == StateLost:
			tr.To = StateCancelling
			tr.CancelRequested = true
			tr.Deadline = now.Add(p.Timeouts.Cancel)
			live()
		default:
			tr.To = StateCancelled
			if s.State == StateQueued { // never claimed: it ends here
				endAttempt(OutcomeCancelled, CategoryCancelled)
			}
		}

	case EvPause:
		tr.To = StatePaused
		tr.PausedFrom = s.State
		tr.RetryAt = s.RetryAt

	case EvResume:
		tr.To = s.PausedFrom
		tr.PausedFrom = StateNone
		switch tr.To {
		case StateCreated:
			tr.Deadline = now
		case StateScheduled:
			tr.Deadline = now
		case StateUpForRetry:
			tr.RetryAt = s.RetryAt
			tr.Deadline = s.RetryAt
		}

	case EvOverrideSucceeded, EvOverrideFailed:
		if e.Operator == "" || e.Reason == "" {
			return guard(ErrOperatorRequired, "")
		}
		tr.To = StateSucceeded
		if e.Type == EvOverrideFailed {
			tr.To = StateFailed
		}
		tr.Scope = "task"
		tr.CancelRequested = false
		if s.State == StateLost {
			endAttempt(OutcomeAbandoned, "")
		}

	case EvOverrideCleared:
		// Evaluated again at once by the retry that clears it; the timer
		// is the same backstop a new instance has.
		tr.To = StateCreated
		tr.Scope = "downstream"
		tr.Deadline = now.Add(p.DepsRecheck)

	case EvSignalRequested:
		// Started by the scheduler at once: no claim, no lease; the run
		// timeout is its one timer.
		if cur.Claimed() {
			return guard(ErrGuard, "attempt already started")
		}
		tr.To = StateRunning
		a := cur
		a.StartedAt = now
		a.ClaimEventID = e.ID
		tr.AttemptRecord = &a
		tr.Deadline = now.Add(p.Timeouts.Run)

	case EvSignalSucceeded:
		tr.To = StateSucceeded
		tr.CancelRequested = false
		endAttempt(OutcomeSucceeded, "")

	case EvSignalFailed:
		category := e.ErrorCategory
		if category == "" {
			category = CategoryRejected
		}
		retryOrFail(e.retryable())
		tr.CancelRequested = false
		endAttempt(OutcomeFailed, category)

	case EvSignalTimeout:
		if now.Before(s.Deadline) {
			return guard(ErrNotDue, "run timeout not reached")
		}
		retryOrFail(true)
		tr.CancelRequested = false
		endAttempt(OutcomeTimeout, CategoryTimeout)

	case EvManualRetry:
		tr.To = StateScheduled
		tr.Deadline = now
		tr.Spent = 0
		tr.Resubmits = 0
		tr.FreeNext = false
	}
	if tr.To != StatePaused && e.Type != EvResume {
		tr.PausedFrom = StateNone
	}
	return tr, nil
}

// Fold applies a transition record to s and returns the new snapshot; s is
// not modified. Apply uses it, and so does Replay: the snapshot is always
// what its history says.
func (s Snapshot) Fold(tr Transition) Snapshot {
	n := s
	n.State = tr.To
	n.Version = s.Version + 1
	n.Seq = tr.Seq
	if tr.From == StateNone {
		n.CreatedAt = tr.ObservedAt
	}
	if tr.To == StateScheduled && s.ScheduledAt.IsZero() {
		n.ScheduledAt = tr.ObservedAt
	}
	if a := tr.AttemptRecord; a != nil {
		n.Attempts = foldAttempt(s.Attempts, *a)
		n.Attempt = max(s.Attempt, a.N)
	}
	n.Lease = tr.Lease
	n.RetryAt = tr.RetryAt
	n.Deadline = tr.Deadline
	n.CancelRequested = tr.CancelRequested
	n.PausedFrom = tr.PausedFrom
	n.Spent = tr.Spent
	n.Resubmits = tr.Resubmits
	n.FreeNext = tr.FreeNext
	keep := min(len(s.Recent), RecentEvents-1)
	n.Recent = make([]SeenEvent, keep+1)
	copy(n.Recent, s.Recent[len(s.Recent)-keep:])
	n.Recent[keep] = SeenEvent{ID: tr.EventID, Seq: tr.Seq, To: tr.To}
	return n
}

// foldAttempt returns the records with a in its place: replacing its
// record if held, else appended (a new attempt is the next number), then
// only the latest MaxInlineAttempts kept. The evicted records live on in
// the store's attempt items, which every transition that set them wrote.
func foldAttempt(held []AttemptRecord, a AttemptRecord) []AttemptRecord {
	if len(held) > 0 && a.N < held[0].N {
		return held // an evicted attempt: not held, whatever it says
	}
	out := make([]AttemptRecord, 0, min(len(held)+1, MaxInlineAttempts+1))
	replaced := false
	for _, r := range held {
		if r.N == a.N {
			r, replaced = a, true
		}
		out = append(out, r)
	}
	if !replaced {
		out = append(out, a)
	}
	if drop := len(out) - MaxInlineAttempts; drop > 0 {
		out = append([]AttemptRecord(nil), out[drop:]...)
	}
	return out
}

// ErrReplay marks a history that does not fold.
var ErrReplay = fmt.Errorf("history does not replay")

// Replay folds an instance's transition records, in order, from nothing.
// The result equals the stored snapshot (EqualState) when the history is
// complete: that is invariant 5.
func Replay(history []Transition) (Snapshot, error) {
	var s Snapshot
	for i, tr := range history {
		if tr.Seq != s.Seq+1 {
			return s, fmt.Errorf("%w: record %d has seq %d, want %d", ErrReplay, i, tr.Seq, s.Seq+1)
		}
		if tr.From != s.State {
			return s, fmt.Errorf("%w: record %d goes from %s but the state is %s", ErrReplay, i, tr.From, s.State)
		}
		s = s.Fold(tr)
	}
	return s, nil
}

func effects(n Snapshot, tr Transition) []Effect {
	out := make([]Effect, 0, 2)
	at, kind := n.Timer()
	switch {
	case kind == TimerNone:
		out = append(out, Effect{Kind: EffectClearTimer})
	default:
		out = append(out, Effect{Kind: EffectTimer, At: at, Attempt: n.Attempt})
	}
	switch {
	case n.State == StateScheduled:
		out = append(out, Effect{Kind: EffectDispatch, At: n.Deadline, Attempt: n.Attempt + 1})
	case n.State.Terminal():
		out = append(out, Effect{Kind: EffectNotifyDownstream})
	case n.State == StateCancelling && tr.Event == EvCancelRequested:
		out = append(out, Effect{Kind: EffectRequestCancel, Attempt: n.Attempt})
	case n.State == StateLost:
		out = append(out, Effect{Kind: EffectGatherEvidence, Attempt: n.Attempt})
	}
	return out
}
