package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/statemodel"
)

// Instance is one task instance item: its statemodel snapshot and what the
// scheduler needs to dispatch it and evaluate its dependencies.
type Instance struct {
	Key     InstanceKey
	Job     string
	Pool    string
	Payload []byte
	// Executor is the task's executor as jobspec.Executor's JSON; nil is
	// the pool's queue.
	Executor    []byte
	Policy      statemodel.Policy // Random is never stored
	DependsOn   []string
	TriggerRule statemodel.TriggerRule
	Publish     bool
	Snapshot    statemodel.Snapshot
	// TimerAt and TimerKind are the timer the instance holds in the
	// timers index (IndexedTimer as of the last write that set it); zero
	// when it is in no index: terminal, PAUSED, or a timer near enough to
	// ride a delay message and its run's backstop.
	TimerAt   time.Time
	TimerKind statemodel.TimerKind
	// History holds the newest transition records, oldest first; older
	// ones were spilled to history items (history.go).
	History []statemodel.Transition
	// Secret is the instance's attempt secret, set when its run was
	// created (NewTask.Secret) and never changed: the scheduler derives
	// each attempt's token from it. Empty for an instance created before
	// instances had one. No history record, attempt item or run holds it.
	Secret Secret
	// Item is a map child's element of its map's rendered array; nil for
	// any other task.
	Item []byte
	// Map is a map task's fan-out (the scheduler's JSON); nil for any
	// other task.
	Map []byte
	// ExpiresAt is its run's expiry (Run.ExpiresAt) as of the instance's
	// creation or the last push, so the writer of any item of the run
	// stamps it without reading the run; zero for a run that never
	// expires.
	ExpiresAt time.Time
}

// SecretBytes is the length of an instance's attempt secret.
const SecretBytes = 32

// Secret is an instance's attempt secret. It prints, logs and encodes as
// a placeholder, so a dump of an instance cannot reveal it.
type Secret []byte

const redacted = "[redacted]"

func (Secret) String() string { return redacted }

func (Secret) GoString() string { return redacted }

func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// checkSecret refuses a secret of the wrong length; empty is none.
func checkSecret(task string, s Secret) error {
	if len(s) != 0 && len(s) != SecretBytes {
		return fmt.Errorf("%w: task %s: an instance secret is %d bytes, not %d", ErrInvalidInput, task, SecretBytes, len(s))
	}
	return nil
}

// Node returns the instance as the DAG rules see it.
func (i Instance) Node() statemodel.TaskNode {
	return statemodel.TaskNode{
		ID: i.Key.Task, DependsOn: slices.Clone(i.DependsOn), Rule: i.TriggerRule,
		Publish: i.Publish, State: i.Snapshot.State, Started: i.Snapshot.Started(),
	}
}

// Attempt is an attempt item: the record as the instance's transitions left
// it, plus the late events from that attempt that arrived after a newer
// attempt started.
type Attempt struct {
	statemodel.AttemptRecord
	// Late holds the first MaxLateEvents late events; LateDropped counts
	// the deliveries of later ones.
	Late        []statemodel.LateEvent
	LateDropped int
}

// Result is what a Transition did.
type Result struct {
	Outcome statemodel.Outcome
	// Snapshot is the instance as stored after the call (for Duplicate,
	// Stale and Rejected: as found).
	Snapshot   statemodel.Snapshot
	Transition *statemodel.Transition // Applied
	// Transitions are every record this call wrote, in order: more than
	// Transition when TransitionAll applied several events, and set also
	// when it Stopped after writing some.
	Transitions []statemodel.Transition
	First       statemodel.SeenEvent  // Duplicate: the outcome that stands
	Late        *statemodel.LateEvent // Stale: what was recorded on the older attempt
	Effects     []statemodel.Effect
	// Rounds is how many read-decide-write rounds it took (1 without
	// contention).
	Rounds int
	// Instance is the instance as written (Applied, Refreshed) or as last
	// found: a caller that goes on with it needs no read.
	Instance Instance
	// Stopped: TransitionAll wrote some of its events and stopped at one
	// that did not apply; Outcome, First and Late are that event's.
	Stopped bool
}

// Heartbeat and duplicate errors.
var (
	// ErrStaleAttempt: the call names an attempt older than the current one.
	ErrStaleAttempt = fault.New(fault.Conflict, "stale attempt")
	// ErrLostNeedsTransition: a heartbeat met the instance LOST with the
	// same attempt. That heartbeat is a real transition (the worker proved
	// alive): the caller applies EvHeartbeat with Transition.
	ErrLostNeedsTransition = fault.New(fault.Conflict, "heartbeat in LOST is a transition")
)

// StoredPolicy returns a policy argument that makes Transition decide with
// the policy stored on the instance, drawing jitter from random (nil: no
// jitter). It is recognised by its zero Retry.MaxAttempts, which no valid
// policy has.
func StoredPolicy(random func() float64) statemodel.Policy {
	return statemodel.Policy{Random: random}
}

func usesStoredPolicy(p statemodel.Policy) bool { return p.Retry.MaxAttempts == 0 }

// HasRecord reports whether a holds the attempt's record, not only its
// late events: every attempt is queued before anything else happens to it.
func (a Attempt) HasRecord() bool { return !a.QueuedAt.IsZero() }

// MaxLateEvents is how many late events an attempt item keeps (API.md):
// the first ones. Later ones are only counted, in late_events_dropped, so
// no flood of stale reports can grow the item. A dropped event's id is not
// remembered (that too would grow), so a redelivery of a dropped event is
// counted again: the count is of deliveries past the cap.
const MaxLateEvents = 16

// HeartbeatResult is what a heartbeat answers the worker.
type HeartbeatResult struct {
	State           statemodel.InstanceState
	CancelRequested bool
	LeaseExpiresAt  time.Time
}

// heartbeatTarget says which form of the heartbeat fits the instance as
// found, or why none does.
func heartbeatTarget(cur statemodel.Snapshot, attempt int) (statemodel.InstanceState, error) {
	reject := func(sentinel error, detail string) error {
		return &statemodel.TransitionError{
			State: cur.State, Event: statemodel.EvHeartbeat, Actor: statemodel.ActorWorker,
			Attempt: attempt, Current: cur.Attempt, Detail: detail, Err: sentinel,
		}
	}
	switch {
	case attempt < cur.Attempt:
		return "", fmt.Errorf("%w: attempt %d is current", ErrStaleAttempt, cur.Attempt)
	case attempt > cur.Attempt:
		return "", reject(statemodel.ErrUnknownAttempt, "")
	}
	switch cur.State {
	case statemodel.StateRunning, statemodel.StateCancelling:
		return cur.State, nil
	case statemodel.StateLost:
		return "", ErrLostNeedsTransition
	}
	return "", reject(statemodel.ErrIllegalTransition, "")
}

// HistoryPager pages an instance's history: any Store.
type HistoryPager interface {
	History(ctx context.Context, key InstanceKey, limit int, token string) ([]statemodel.Transition, string, error)
}

// FullHistory pages h's history of the instance at key to the end.
func FullHistory(ctx context.Context, h HistoryPager, key InstanceKey) ([]statemodel.Transition, error) {
	var all []statemodel.Transition
	token := ""
	for {
		page, next, err := h.History(ctx, key, 0, token)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}
