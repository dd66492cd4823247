package protocol

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/wire"
)

// TimerKind is the "kind" of a timer message: the scheduler's message to
// itself on the delay queue, whose messages the events handler reads.
const TimerKind = "timer"

// Timer asks the scheduler to look at one task instance (or, without Task,
// at the run) at At. A lost timer message costs precision, never
// correctness: the periodic scan is the backstop.
type Timer struct {
	Run  string
	Task string
	At   time.Time
	// Purpose is the instance timer the message was armed for (a
	// statemodel.TimerKind, such as "lease"); empty for a run's timer
	// and for messages armed before messages carried it.
	Purpose string
}

type timerJSON struct {
	Kind    string  `json:"kind"`
	Run     string  `json:"run"`
	Task    string  `json:"task,omitempty"`
	At      *string `json:"at"`
	Purpose string  `json:"purpose,omitempty"`
}

// MarshalJSON writes the timer with "kind": "timer".
func (t Timer) MarshalJSON() ([]byte, error) {
	return wire.Marshal(timerJSON{Kind: TimerKind, Run: t.Run, Task: t.Task, At: NullTime(t.At), Purpose: t.Purpose})
}

// UnmarshalJSON reads a timer and refuses any other kind of message.
func (t *Timer) UnmarshalJSON(b []byte) error {
	var w timerJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Kind != TimerKind {
		return malformed("kind", fmt.Sprintf("kind %q is not %q.", w.Kind, TimerKind))
	}
	at, err := parseOptionalTime("at", w.At)
	if err != nil {
		return err
	}
	*t = Timer{Run: w.Run, Task: w.Task, At: at, Purpose: w.Purpose}
	return nil
}

// Event is one message of the events queue (a worker's completion or
// process lease) or of the delay queue (a timer): exactly one field is
// set.
type Event struct {
	Completion *Completion
	Lease      *Lease
	Timer      *Timer
	// InvocationFailure is Lambda's on-failure record of a lambda
	// executor's invocation (it carries no kind: it is recognised by its
	// requestContext).
	InvocationFailure *InvocationFailure
}

// DecodeEvent reads one events-queue or delay-queue message body by its
// "kind" (none: a completion, or Lambda's invocation record when it has a
// requestContext; LeaseKind; TimerKind) and validates it as
// the scheduler requires. Any error means the message can never be
// applied; field errors wrap a *FieldError.
func DecodeEvent(body string) (Event, error) {
	var probe struct {
		Kind           string          `json:"kind"`
		RequestContext json.RawMessage `json:"requestContext"`
	}
	if err := json.Unmarshal([]byte(body), &probe); err != nil {
		return Event{}, fmt.Errorf("decode event: %w", err)
	}
	switch {
	case probe.Kind == "" && probe.RequestContext != nil:
		var f InvocationFailure
		if err := json.Unmarshal([]byte(body), &f); err != nil {
			return Event{}, err
		}
		if err := f.Validate(); err != nil {
			return Event{}, fmt.Errorf("invocation record: %w", err)
		}
		return Event{InvocationFailure: &f}, nil
	}
	switch probe.Kind {
	case "":
		var c Completion
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			return Event{}, fmt.Errorf("decode completion: %w", err)
		}
		if err := c.Validate(); err != nil {
			return Event{}, err
		}
		return Event{Completion: &c}, nil
	case LeaseKind:
		var l Lease
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			return Event{}, fmt.Errorf("decode worker lease: %w", err)
		}
		if err := l.Validate(); err != nil {
			return Event{}, fmt.Errorf("worker lease %s: %w", l.WorkerID(), err)
		}
		return Event{Lease: &l}, nil
	case TimerKind:
		var t Timer
		if err := json.Unmarshal([]byte(body), &t); err != nil {
			return Event{}, fmt.Errorf("decode timer: %w", err)
		}
		if t.Run == "" {
			return Event{}, fmt.Errorf("timer: %w", malformed("run", "run is required."))
		}
		return Event{Timer: &t}, nil
	}
	return Event{}, fmt.Errorf("decode event: %w", malformed("kind", fmt.Sprintf("kind %q is not a message the events queue carries.", probe.Kind)))
}
