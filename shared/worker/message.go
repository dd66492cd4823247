package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/runledger/runledger/shared/wire"
)

// timeLayout is the contract's time format: RFC 3339, UTC, milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z"

// LeaseKind is the "kind" of a worker lease message on the events queue. A
// message without "kind" is a completion.
const LeaseKind = "worker_lease"

// Outcome is how an attempt ended, as the worker reports it.
type Outcome string

// The outcomes a completion carries.
const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeCancelled Outcome = "cancelled"
)

// Error categories the worker SDK itself reports. "timeout" and "cancelled"
// are reserved by the API; the worker_* ones say that this process stopped
// the work, not the work itself.
const (
	CategoryError          = "error"           // default for a handler error
	CategoryTimeout        = "timeout"         // the envelope's run timeout passed
	CategoryCancelled      = "cancelled"       // acknowledged cancel request
	CategoryPanic          = "panic"           // the handler panicked
	CategoryWorkerShutdown = "worker_shutdown" // graceful shutdown outlasted the grace period
	CategoryWorkerDeadline = "worker_deadline" // the Lambda invocation deadline came first
)

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// Limits of a completion's free-form fields (docs/api.md, "Workers"). The
// scheduler applies them to every
// completion, through the HTTP route and the events queue alike, so that no
// report can push an attempt's records past DynamoDB's item limit; the SDK
// applies them before sending.
const (
	// MaxOutputRefBytes bounds an output_ref: a reference to the output,
	// not the output itself.
	MaxOutputRefBytes = 2048
	// MaxErrorCategoryLen bounds an error_category (snake_case, so bytes
	// and characters agree).
	MaxErrorCategoryLen = 64
	// MaxReasonBytes bounds a completion's reason: the tail of the error
	// output, shown in the instance's history.
	MaxReasonBytes = 4096
)

// MaxEventIDLen bounds a client's event id (docs/api.md, "Workers").
const MaxEventIDLen = 128

// eventIDChars is the alphabet of a client's event id. The scheduler's own
// ids all contain a colon (and the bare word "deps" was one), so no client
// id can take the place of a scheduler event.
var eventIDChars = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// CheckEventID checks an event id a worker sends on a worker route
// (claim, heartbeat, complete): 1 to MaxEventIDLen characters of
// [A-Za-z0-9._-], not the scheduler's reserved "deps". It returns a
// *FieldError (malformed: 422 invalid_field) or nil. The scheduler applies
// it to every worker event; the SDK's ids always pass it.
func CheckEventID(id string) error {
	switch {
	case id == "":
		return &FieldError{Field: "event_id", Message: "event_id is required on every worker route."}
	case len(id) > MaxEventIDLen || !eventIDChars.MatchString(id):
		return &FieldError{Field: "event_id", Message: fmt.Sprintf(
			"event_id must be 1 to %d characters of A-Z, a-z, 0-9, '.', '_' and '-' (ids with a colon are the scheduler's).", MaxEventIDLen)}
	case id == "deps":
		return &FieldError{Field: "event_id", Message: "event_id \"deps\" is reserved for the scheduler."}
	}
	return nil
}

// FieldError is a completion field the contract refuses: over its limit
// (TooLarge: the API answers 413 payload_too_large) or malformed (422
// invalid_field). Message is one sentence for the client.
type FieldError struct {
	Field    string
	TooLarge bool
	Message  string
}

func (e *FieldError) Error() string { return e.Message }

// CheckReportFields checks a completion's output_ref, error_category and
// reason against the contract's limits, in that order, and returns the
// first *FieldError. Empty values are always accepted.
func CheckReportFields(outputRef, errorCategory, reason string) error {
	tooLarge := func(field string, n, limit int, unit string) error {
		return &FieldError{Field: field, TooLarge: true, Message: fmt.Sprintf(
			"%s is %d %s, over the limit of %d.", field, n, unit, limit)}
	}
	malformed := func(field, rule string) error {
		return &FieldError{Field: field, Message: field + " " + rule + "."}
	}
	switch {
	case len(outputRef) > MaxOutputRefBytes:
		return tooLarge("output_ref", len(outputRef), MaxOutputRefBytes, "bytes")
	case !utf8.ValidString(outputRef) || strings.ContainsFunc(outputRef, unicode.IsControl):
		return malformed("output_ref", "must be printable UTF-8 without control characters")
	case len(errorCategory) > MaxErrorCategoryLen:
		return tooLarge("error_category", len(errorCategory), MaxErrorCategoryLen, "characters")
	case errorCategory != "" && !snakeCase.MatchString(errorCategory):
		return malformed("error_category", "must be snake_case (lower-case letters, digits and single underscores)")
	case len(reason) > MaxReasonBytes:
		return tooLarge("reason", len(reason), MaxReasonBytes, "bytes")
	case !utf8.ValidString(reason):
		return malformed("reason", "must be valid UTF-8")
	}
	return nil
}

// ClipReason returns at most the last MaxReasonBytes bytes of s, cut at a
// character boundary: the end of an error output says most.
func ClipReason(s string) string {
	if len(s) <= MaxReasonBytes {
		return s
	}
	s = s[len(s)-MaxReasonBytes:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}

// AttemptRef names one attempt of one task instance of a run.
type AttemptRef struct {
	Run     string `json:"run"`
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
}

func (a AttemptRef) String() string { return fmt.Sprintf("%s/%s#%d", a.Run, a.Task, a.Attempt) }

func (a AttemptRef) validate() error {
	switch {
	case a.Run == "":
		return errors.New("run is empty")
	case a.Task == "":
		return errors.New("task is empty")
	case a.Attempt < 1:
		return fmt.Errorf("attempt %d, want >= 1", a.Attempt)
	}
	return nil
}

// Envelope is the body of a dispatch message: one attempt handed to a pool.
type Envelope struct {
	// Job is the job the run belongs to.
	Job     string
	Run     string
	Task    string
	Attempt int
	// LogicalTime is the run's logical time: the schedule slot it stands
	// for, or the trigger time of a manual run. Zero when absent.
	LogicalTime time.Time
	// Token fences the attempt: the worker routes take it as the bearer,
	// and user code may key its own output writes on it.
	Token string
	Pool  string
	// Payload is the task's effective payload (task override, else the job's).
	Payload json.RawMessage
	// Params are the run's parameters (a JSON object, or absent).
	Params json.RawMessage
	// HeartbeatInterval is the suggested beat: a third of the heartbeat
	// timeout, the longest allowed gap between heartbeats.
	HeartbeatInterval time.Duration
	// RunTimeout bounds one attempt from claim to completion (start to
	// close); zero means none.
	RunTimeout time.Duration
	// ClaimBy is the queue deadline: a claim after it is refused.
	ClaimBy time.Time
}

// Ref is the attempt the envelope carries.
func (e Envelope) Ref() AttemptRef { return AttemptRef{Run: e.Run, Task: e.Task, Attempt: e.Attempt} }

type envelopeJSON struct {
	Job               string          `json:"job,omitempty"`
	Run               string          `json:"run"`
	Task              string          `json:"task"`
	Attempt           int             `json:"attempt"`
	Token             string          `json:"token"`
	Pool              string          `json:"pool"`
	LogicalTime       *string         `json:"logical_time,omitempty"`
	Payload           json.RawMessage `json:"payload,omitempty"`
	Params            json.RawMessage `json:"params,omitempty"`
	HeartbeatInterval string          `json:"heartbeat_interval,omitempty"`
	RunTimeout        string          `json:"run_timeout,omitempty"`
	ClaimBy           *string         `json:"claim_by,omitempty"`
}

// MarshalJSON writes the envelope in the contract's shape: durations as Go
// duration strings, claim_by as RFC 3339 UTC with milliseconds.
func (e Envelope) MarshalJSON() ([]byte, error) {
	w := envelopeJSON{
		Job: e.Job, Run: e.Run, Task: e.Task, Attempt: e.Attempt, Token: e.Token, Pool: e.Pool,
		LogicalTime: formatTime(e.LogicalTime),
		Payload:     e.Payload, Params: e.Params,
		ClaimBy: formatTime(e.ClaimBy),
	}
	if e.HeartbeatInterval != 0 {
		w.HeartbeatInterval = e.HeartbeatInterval.String()
	}
	if e.RunTimeout != 0 {
		w.RunTimeout = e.RunTimeout.String()
	}
	return wire.Marshal(w)
}

// UnmarshalJSON reads the contract's shape.
func (e *Envelope) UnmarshalJSON(b []byte) error {
	var w envelopeJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	hb, err := parseDuration("heartbeat_interval", w.HeartbeatInterval)
	if err != nil {
		return err
	}
	rt, err := parseDuration("run_timeout", w.RunTimeout)
	if err != nil {
		return err
	}
	claimBy, err := parseTime("claim_by", w.ClaimBy)
	if err != nil {
		return err
	}
	logical, err := parseTime("logical_time", w.LogicalTime)
	if err != nil {
		return err
	}
	*e = Envelope{
		Job: w.Job, Run: w.Run, Task: w.Task, Attempt: w.Attempt, Token: w.Token, Pool: w.Pool,
		LogicalTime: logical,
		Payload:     nullToNil(w.Payload), Params: nullToNil(w.Params),
		HeartbeatInterval: hb, RunTimeout: rt, ClaimBy: claimBy,
	}
	return nil
}

// ParseEnvelope decodes a dispatch message body and checks that it names an
// attempt and carries its token.
func ParseEnvelope(body string) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		return Envelope{}, fmt.Errorf("parse envelope: %w", err)
	}
	if err := e.Ref().validate(); err != nil {
		return Envelope{}, fmt.Errorf("parse envelope: %w", err)
	}
	switch {
	case e.Token == "":
		return Envelope{}, fmt.Errorf("parse envelope %s: token is empty", e.Ref())
	case e.HeartbeatInterval < 0:
		return Envelope{}, fmt.Errorf("parse envelope %s: heartbeat_interval %s is negative", e.Ref(), e.HeartbeatInterval)
	case e.RunTimeout < 0:
		return Envelope{}, fmt.Errorf("parse envelope %s: run_timeout %s is negative", e.Ref(), e.RunTimeout)
	}
	return e, nil
}

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
	// Reason says in words why the attempt ended as it did (for a failure,
	// the tail of the error output); at most MaxReasonBytes, recorded in
	// the transition's reason and shown in the instance's history.
	Reason string
	// EventTime is when the attempt ended, by the worker's clock.
	EventTime time.Time
	// Token is set on the events queue (the HTTP route takes it as bearer).
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
	Kind          string  `json:"kind,omitempty"`
	Run           string  `json:"run"`
	Task          string  `json:"task"`
	Attempt       int     `json:"attempt"`
	EventID       string  `json:"event_id"`
	Outcome       Outcome `json:"outcome"`
	ExitCode      *int    `json:"exit_code,omitempty"`
	ErrorCategory string  `json:"error_category,omitempty"`
	Retryable     *bool   `json:"retryable,omitempty"`
	OutputRef     string  `json:"output_ref,omitempty"`
	Reason        string  `json:"reason,omitempty"`
	EventTime     *string `json:"event_time,omitempty"`
	Token         string  `json:"token,omitempty"`
}

// MarshalJSON writes the contract's shape.
func (c Completion) MarshalJSON() ([]byte, error) {
	return wire.Marshal(completionJSON{
		Run: c.Run, Task: c.Task, Attempt: c.Attempt, EventID: c.EventID, Outcome: c.Outcome,
		ExitCode: c.ExitCode, ErrorCategory: c.ErrorCategory, Retryable: c.Retryable,
		OutputRef: c.OutputRef, Reason: c.Reason, EventTime: formatTime(c.EventTime), Token: c.Token,
	})
}

// UnmarshalJSON reads the contract's shape.
func (c *Completion) UnmarshalJSON(b []byte) error {
	var w completionJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Kind != "" {
		return fmt.Errorf("a %q message is not a completion", w.Kind)
	}
	t, err := parseTime("event_time", w.EventTime)
	if err != nil {
		return err
	}
	*c = Completion{
		Run: w.Run, Task: w.Task, Attempt: w.Attempt, EventID: w.EventID, Outcome: w.Outcome,
		ExitCode: w.ExitCode, ErrorCategory: w.ErrorCategory, Retryable: w.Retryable,
		OutputRef: w.OutputRef, Reason: w.Reason, EventTime: t, Token: w.Token,
	}
	return nil
}

// Validate checks what the scheduler requires of a completion.
func (c Completion) Validate() error {
	if err := c.Ref().validate(); err != nil {
		return fmt.Errorf("completion: %w", err)
	}
	if err := CheckEventID(c.EventID); err != nil {
		return fmt.Errorf("completion %s: %w", c.Ref(), err)
	}
	switch {
	case c.Outcome != OutcomeSucceeded && c.Outcome != OutcomeFailed && c.Outcome != OutcomeCancelled:
		return fmt.Errorf("completion %s: outcome %q, want succeeded, failed or cancelled", c.Ref(), c.Outcome)
	}
	if err := CheckReportFields(c.OutputRef, c.ErrorCategory, c.Reason); err != nil {
		return fmt.Errorf("completion %s: %w", c.Ref(), err)
	}
	return nil
}

// Lease is a worker process's lease message on the events queue: evidence
// for the reconciler of which attempts a process still runs. A process
// sends one at start, then periodically, and a last one with ExpiresAt =
// now when it shuts down gracefully. An attempt claimed by
// "<Worker>@<BootID>" that a live lease of that boot no longer lists, or
// whose boot's leases have expired, is gone.
type Lease struct {
	// Worker is the configured name; the claims' worker id is
	// Worker + "@" + BootID.
	Worker string
	// BootID is random per process start: a ULID whose time is the start
	// (BootStart), so the scheduler can tell the newer of two boots.
	BootID string
	// ExpiresAt: without a newer lease of the same boot by then, the
	// process is dead.
	ExpiresAt time.Time
	// Running lists the attempts the process runs or is still reporting.
	Running []AttemptRef
	// Seq increases with every lease of one boot, so a consumer can ignore
	// a lease that SQS delivers after a newer one (an extension of the
	// contract's shape).
	Seq int64
	// SentAt is the worker clock when the lease was made (an extension).
	SentAt time.Time
}

// BootStart is the start time a boot id carries. The SDK's boot ids are
// ULIDs made when the process starts, so their time part is that start by
// the worker's clock (to the millisecond); ok is false for an id of
// another form.
func BootStart(bootID string) (time.Time, bool) {
	id, err := ulid.ParseStrict(bootID)
	if err != nil {
		return time.Time{}, false
	}
	return ulid.Time(id.Time()).UTC(), true
}

// WorkerID is the id the process's claims carry.
func (l Lease) WorkerID() string { return l.Worker + "@" + l.BootID }

type leaseJSON struct {
	Kind      string       `json:"kind"`
	Worker    string       `json:"worker"`
	BootID    string       `json:"boot_id"`
	ExpiresAt *string      `json:"expires_at"`
	Running   []AttemptRef `json:"running"`
	Seq       int64        `json:"seq,omitempty"`
	SentAt    *string      `json:"sent_at,omitempty"`
}

// MarshalJSON writes the lease with "kind": "worker_lease".
func (l Lease) MarshalJSON() ([]byte, error) {
	running := l.Running
	if running == nil {
		running = []AttemptRef{}
	}
	return wire.Marshal(leaseJSON{
		Kind: LeaseKind, Worker: l.Worker, BootID: l.BootID, ExpiresAt: formatTime(l.ExpiresAt),
		Running: running, Seq: l.Seq, SentAt: formatTime(l.SentAt),
	})
}

// UnmarshalJSON reads a lease and refuses any other kind of message.
func (l *Lease) UnmarshalJSON(b []byte) error {
	var w leaseJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Kind != LeaseKind {
		return fmt.Errorf("kind %q, want %q", w.Kind, LeaseKind)
	}
	expires, err := parseTime("expires_at", w.ExpiresAt)
	if err != nil {
		return err
	}
	sent, err := parseTime("sent_at", w.SentAt)
	if err != nil {
		return err
	}
	*l = Lease{Worker: w.Worker, BootID: w.BootID, ExpiresAt: expires, Running: w.Running, Seq: w.Seq, SentAt: sent}
	return nil
}

// EventKind tells the two kinds of events-queue messages apart: LeaseKind,
// or "" for a completion.
func EventKind(body string) (string, error) {
	var probe struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal([]byte(body), &probe); err != nil {
		return "", fmt.Errorf("read event kind: %w", err)
	}
	return probe.Kind, nil
}

func formatTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(timeLayout)
	return &s
}

func parseTime(field string, s *string) (time.Time, error) {
	if s == nil || *s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: want an RFC 3339 time", field, *s)
	}
	return t.UTC(), nil
}

func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a Go duration string", field, s)
	}
	return d, nil
}

func nullToNil(m json.RawMessage) json.RawMessage {
	if string(m) == "null" {
		return nil
	}
	return m
}
