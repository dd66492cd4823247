package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// Outcome is how an attempt ended, as its worker reports it.
type Outcome string

// The outcomes a completion carries: the worker's subset of the attempt
// outcomes statemodel records.
const (
	OutcomeSucceeded = Outcome(statemodel.OutcomeSucceeded)
	OutcomeFailed    = Outcome(statemodel.OutcomeFailed)
	OutcomeCancelled = Outcome(statemodel.OutcomeCancelled)
)

// Valid reports whether o is one of the outcomes a worker may report.
func (o Outcome) Valid() bool {
	return o == OutcomeSucceeded || o == OutcomeFailed || o == OutcomeCancelled
}

// Error categories (docs/api.md, "Precise answers"): a completion's
// error_category is free snake_case; statemodel reserves lost, timeout,
// cancelled, never_started and dispatch_failed for the scheduler's own
// verdicts, and a worker reports timeout and cancelled in the same sense.
// The worker_* categories say that the worker process stopped the work,
// not the work itself.
const (
	CategoryError          = "error"                      // default for a handler error
	CategoryTimeout        = statemodel.CategoryTimeout   // the envelope's run timeout passed
	CategoryCancelled      = statemodel.CategoryCancelled // acknowledged cancel request
	CategoryPanic          = "panic"                      // the handler panicked
	CategoryWorkerShutdown = "worker_shutdown"            // graceful shutdown outlasted the grace period
	CategoryWorkerDeadline = "worker_deadline"            // the Lambda invocation deadline came first
)

// Completion is the report of how an attempt ended: the body of
// POST /v1/attempts/complete and, with Token, the completion message on the
// events queue.
type Completion struct {
	Run     string
	Task    string
	Attempt int
	// EventID identifies this fact; a retried report keeps it, so the
	// scheduler applies it once.
	EventID string
	Outcome Outcome
	// ExitCode is nil unless the handler set one.
	ExitCode      *int
	ErrorCategory string
	// Retryable is nil for the API's default (true).
	Retryable *bool
	OutputRef string
	// Output is the attempt's output: any JSON value, at most
	// MaxOutputBytes encoded; nil for none. A succeeded attempt keeps it,
	// and the direct downstream tasks get it in their claim's inputs.
	Output json.RawMessage
	// Reason says in words why the attempt ended as it did (for a failure,
	// the tail of the error output); at most MaxReasonBytes, recorded in
	// the transition's reason and shown in the instance's history.
	Reason string
	// EventTime is when the attempt ended, by the worker's clock; zero for
	// the API's default (the time the scheduler observed the report).
	EventTime time.Time
	// Token is set on the events queue (the HTTP route takes it as bearer
	// and ignores this field).
	Token string
}

// Ref is the attempt the completion reports on.
func (c Completion) Ref() AttemptRef {
	return AttemptRef{Run: c.Run, Task: c.Task, Attempt: c.Attempt}
}

// IsRetryable applies the API's default: a completion is retryable unless
// it says otherwise.
func (c Completion) IsRetryable() bool { return c.Retryable == nil || *c.Retryable }

type completionJSON struct {
	Kind          string          `json:"kind,omitempty"`
	Run           string          `json:"run"`
	Task          string          `json:"task"`
	Attempt       int             `json:"attempt"`
	EventID       string          `json:"event_id"`
	Outcome       Outcome         `json:"outcome"`
	ExitCode      *int            `json:"exit_code,omitempty"`
	ErrorCategory string          `json:"error_category,omitempty"`
	Retryable     *bool           `json:"retryable,omitempty"`
	OutputRef     string          `json:"output_ref,omitempty"`
	Output        json.RawMessage `json:"output,omitempty"`
	Reason        string          `json:"reason,omitempty"`
	EventTime     *string         `json:"event_time,omitempty"`
	Token         string          `json:"token,omitempty"`
}

// MarshalJSON writes the contract's shape.
func (c Completion) MarshalJSON() ([]byte, error) {
	return wire.Marshal(completionJSON{
		Run: c.Run, Task: c.Task, Attempt: c.Attempt, EventID: c.EventID, Outcome: c.Outcome,
		ExitCode: c.ExitCode, ErrorCategory: c.ErrorCategory, Retryable: c.Retryable,
		OutputRef: c.OutputRef, Output: c.Output, Reason: c.Reason, EventTime: NullTime(c.EventTime), Token: c.Token,
	})
}

// UnmarshalJSON reads the contract's shape, strictly as the API reads
// every request body: an unknown field is refused (the error names it, as
// encoding/json's "json: unknown field" error does), and an event_time
// that is not an RFC 3339 time is a *FieldError. It does not validate the
// values; Validate does.
func (c *Completion) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w completionJSON
	if err := dec.Decode(&w); err != nil {
		return err
	}
	if w.Kind != "" {
		return malformed("kind", fmt.Sprintf("a %q message is not a completion.", w.Kind))
	}
	t, err := parseOptionalTime("event_time", w.EventTime)
	if err != nil {
		return err
	}
	*c = Completion{
		Run: w.Run, Task: w.Task, Attempt: w.Attempt, EventID: w.EventID, Outcome: w.Outcome,
		ExitCode: w.ExitCode, ErrorCategory: w.ErrorCategory, Retryable: w.Retryable,
		OutputRef: w.OutputRef, Output: nullToNil(w.Output), Reason: w.Reason, EventTime: t, Token: w.Token,
	}
	return nil
}

// Validate checks a completion as the contract orders the checks of a
// body: the attempt, the event id, the outcome, then output_ref,
// error_category and reason against their limits. Its error wraps a
// *FieldError: TooLarge for a field over its limit (413), else malformed
// (422). The scheduler applies it to every completion, from the HTTP route
// and the events queue alike; the SDK applies it before sending.
func (c Completion) Validate() error {
	if err := c.Ref().Validate(); err != nil {
		return fmt.Errorf("completion: %w", err)
	}
	if err := CheckEventID(c.EventID); err != nil {
		return fmt.Errorf("completion %s: %w", c.Ref(), err)
	}
	if !c.Outcome.Valid() {
		return fmt.Errorf("completion %s: %w", c.Ref(), malformed("outcome", "outcome must be succeeded, failed or cancelled."))
	}
	if err := CheckReportFields(c.OutputRef, c.ErrorCategory, c.Reason); err != nil {
		return fmt.Errorf("completion %s: %w", c.Ref(), err)
	}
	if err := CheckOutput(c.Output); err != nil {
		return fmt.Errorf("completion %s: %w", c.Ref(), err)
	}
	return nil
}
