package protocol

import (
	"fmt"
	"strconv"
	"time"
)

// SignalType is the "type" of a Signal (and, on the EventBridge bus, its
// detail-type).
type SignalType string

// The signal types (docs/api.md, "Events").
const (
	SignalRunSucceeded      SignalType = "run.succeeded"
	SignalRunFailed         SignalType = "run.failed"
	SignalRunCancelled      SignalType = "run.cancelled"
	SignalTaskFailed        SignalType = "task.failed"
	SignalTaskLost          SignalType = "task.lost"
	SignalRunDeadlineMissed SignalType = "run.deadline_missed"
	// SignalTaskSignalRequested: a signal task's attempt started and
	// waits for its signal; the event carries the attempt's token.
	SignalTaskSignalRequested SignalType = "task.signal_requested"
	// SignalEventTriggerFailed: an event matched a job's on_event entry
	// and its params did not render, so no run was made.
	SignalEventTriggerFailed SignalType = "event.trigger_failed"
)

// SignalTypes lists every signal type.
func SignalTypes() []SignalType {
	return []SignalType{SignalRunSucceeded, SignalRunFailed, SignalRunCancelled, SignalTaskFailed, SignalTaskLost, SignalRunDeadlineMissed,
		SignalTaskSignalRequested, SignalEventTriggerFailed}
}

// SignalSource is the EventBridge source of every signal, what a rule's
// pattern matches on.
const SignalSource = "runledger"

// Signal is one event a person may act on: a run that ended, a task that
// failed or went LOST, a run past its deadline. It is the one shape of
// GET /v1/events' entries and of the detail of the EventBridge events.
// Task is "" (null on the wire) and Attempt 0 for a run's signal; State is
// the run's execution state or the task's state after the change.
type Signal struct {
	Type    SignalType `json:"type"`
	Time    time.Time  `json:"time"`
	Job     string     `json:"job"`
	Run     string     `json:"run" null:"zero"`
	Task    string     `json:"task" null:"zero"`
	Attempt int        `json:"attempt"`
	State   string     `json:"state"`
	Reason  string     `json:"reason"`
	// Token is a task.signal_requested's attempt token, which authorizes
	// that attempt's signal (and nothing else); absent on other events.
	Token string `json:"token,omitempty"`
	// EventID names the event of an event.trigger_failed (left out
	// otherwise).
	EventID string `json:"event_id,omitempty"`
}

// MarshalJSON writes the contract's shape.
func (s Signal) MarshalJSON() ([]byte, error) { return marshalView(s) }

// SignalPage is the answer of GET /v1/events: the kept events from
// `since`, oldest first.
type SignalPage struct {
	Events []Signal `json:"events"`
	// NextToken continues the listing; "" (null on the wire) when no more
	// events are kept yet.
	NextToken string `json:"next_token" null:"zero"`
}

// MarshalJSON writes the contract's shape.
func (p SignalPage) MarshalJSON() ([]byte, error) { return marshalView(p) }

// SignalToken is a page token of GET /v1/events: the position of the next
// event in the local stack's log.
func SignalToken(seq uint64) string { return strconv.FormatUint(seq, 10) }

// ParseSignalToken reads a SignalToken; its error is a *FieldError naming
// next_token.
func ParseSignalToken(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, &FieldError{Field: "next_token", Message: fmt.Sprintf("next_token %q is not a token this listing gave.", s)}
	}
	return n, nil
}
