package protocol

import (
	"fmt"
	"strconv"
	"time"
)

// NoticeType is the "type" of a Notice (and, on the EventBridge bus, its
// detail-type).
type NoticeType string

// The notice types (docs/api.md, "Notices").
const (
	NoticeRunSucceeded      NoticeType = "run.succeeded"
	NoticeRunFailed         NoticeType = "run.failed"
	NoticeRunCancelled      NoticeType = "run.cancelled"
	NoticeTaskFailed        NoticeType = "task.failed"
	NoticeTaskLost          NoticeType = "task.lost"
	NoticeRunDeadlineMissed NoticeType = "run.deadline_missed"
	// NoticeTaskSignalRequested: a signal task's attempt started and
	// waits for its signal; the notice carries the attempt's token.
	NoticeTaskSignalRequested NoticeType = "task.signal_requested"
	// NoticeEventTriggerFailed: a trigger event matched a job's on_event
	// entry and its params did not render, so no run was made.
	NoticeEventTriggerFailed NoticeType = "event.trigger_failed"
)

// NoticeTypes lists every notice type.
func NoticeTypes() []NoticeType {
	return []NoticeType{NoticeRunSucceeded, NoticeRunFailed, NoticeRunCancelled, NoticeTaskFailed, NoticeTaskLost, NoticeRunDeadlineMissed,
		NoticeTaskSignalRequested, NoticeEventTriggerFailed}
}

// NoticeSource is the EventBridge source of every notice, what a rule's
// pattern matches on.
const NoticeSource = "runledger"

// Notice is a notification a person may act on: a run that ended, a task
// that failed or went LOST, a run past its deadline. It is the one shape
// of GET /v1/events' entries and of the detail of the EventBridge events
// the notice bus carries. Task is "" (null on the wire) and Attempt 0 for
// a run's notice; State is the run's execution state or the task's state
// after the change.
type Notice struct {
	Type    NoticeType `json:"type"`
	Time    time.Time  `json:"time"`
	Job     string     `json:"job"`
	Run     string     `json:"run" null:"zero"`
	Task    string     `json:"task" null:"zero"`
	Attempt int        `json:"attempt"`
	State   string     `json:"state"`
	Reason  string     `json:"reason"`
	// Token is a task.signal_requested's attempt token, which authorizes
	// that attempt's signal (and nothing else); absent on other notices.
	Token string `json:"token,omitempty"`
	// EventID names the trigger event of an event.trigger_failed (left
	// out otherwise).
	EventID string `json:"event_id,omitempty"`
}

// MarshalJSON writes the contract's shape.
func (n Notice) MarshalJSON() ([]byte, error) { return marshalView(n) }

// NoticePage is the answer of GET /v1/events: the kept notices from
// `since`, oldest first.
type NoticePage struct {
	Notices []Notice `json:"events"`
	// NextToken continues the listing; "" (null on the wire) when no more
	// notices are kept yet.
	NextToken string `json:"next_token" null:"zero"`
}

// MarshalJSON writes the contract's shape.
func (p NoticePage) MarshalJSON() ([]byte, error) { return marshalView(p) }

// NoticeToken is a page token of GET /v1/events: the position of the next
// notice in the local stack's ring.
func NoticeToken(seq uint64) string { return strconv.FormatUint(seq, 10) }

// ParseNoticeToken reads a NoticeToken; its error is a *FieldError naming
// next_token.
func ParseNoticeToken(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, &FieldError{Field: "next_token", Message: fmt.Sprintf("next_token %q is not a token this listing gave.", s)}
	}
	return n, nil
}
