package statemodel

import (
	"errors"
	"fmt"
)

// Sentinel errors; a *TransitionError wraps exactly one of them, so callers
// test with errors.Is and still get the state, event and actor in the text.
var (
	// ErrIllegalTransition: the table has no row for (state, event).
	ErrIllegalTransition = errors.New("illegal transition")
	// ErrWrongActor: the row exists but another actor owns the event.
	ErrWrongActor = errors.New("wrong actor")
	// ErrUnknownAttempt: the event names an attempt that does not exist.
	ErrUnknownAttempt = errors.New("unknown attempt")
	// ErrNotDue: a timer event arrived before its deadline (a lease that a
	// heartbeat refreshed, a retry_at not reached yet).
	ErrNotDue = errors.New("not due")
	// ErrGuard: the row exists but its guard does not hold.
	ErrGuard = errors.New("guard does not hold")
	// ErrOperatorRequired: an override without operator or reason.
	ErrOperatorRequired = errors.New("operator and reason required")
	// ErrInvalidEvent: the event itself is malformed (no id, unknown type).
	ErrInvalidEvent = errors.New("invalid event")
	// ErrTableViolation: a decision led outside its row's destinations.
	// Never expected: the model check proves it cannot happen.
	ErrTableViolation = errors.New("decision outside the transition table")
)

// TransitionError names the state, the event, the actor and the attempt a
// rejected event met.
type TransitionError struct {
	State   InstanceState
	Event   EventType
	Actor   Actor
	Attempt int
	Current int // the instance's current attempt
	Detail  string
	Err     error // one of the sentinels above
}

func (e *TransitionError) Error() string {
	from := string(e.State)
	if from == "" {
		from = "(none)"
	}
	msg := fmt.Sprintf("%v: %s by %s in %s (attempt %d, current %d)", e.Err, e.Event, e.Actor, from, e.Attempt, e.Current)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *TransitionError) Unwrap() error { return e.Err }

func reject(s Snapshot, ev Event, err error, detail string) Decision {
	return Decision{
		Outcome:  Rejected,
		Snapshot: s,
		Err: &TransitionError{
			State: s.State, Event: ev.Type, Actor: ev.Actor,
			Attempt: ev.Attempt, Current: s.Attempt, Detail: detail, Err: err,
		},
	}
}
