package protocol

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/wire"
)

// AttemptRef names one attempt of one task instance of a run.
type AttemptRef struct {
	Run     string `json:"run"`
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
}

func (a AttemptRef) String() string { return fmt.Sprintf("%s/%s#%d", a.Run, a.Task, a.Attempt) }

// Validate checks that the reference names an attempt: a run, a task and
// an attempt number of 1 or more. Its error is a *FieldError (422).
func (a AttemptRef) Validate() error {
	switch {
	case a.Run == "":
		return malformed("run", "run is required.")
	case a.Task == "":
		return malformed("task", "task is required.")
	case a.Attempt < 1:
		return malformed("attempt", fmt.Sprintf("attempt must be 1 or more, not %d.", a.Attempt))
	}
	return nil
}

// Envelope is the body of a dispatch message: one attempt handed to a pool
// (docs/api.md, "Workers"). ClaimAnswer has room for it as well.
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
	// ClaimNonce is the attempt's one-time claim nonce (EnvClaimNonce),
	// set only on the envelope the scheduler hands an executor's Start in
	// its own process, for a process that must not get the token in its
	// start environment. It is never on the wire: no queue message, no
	// claim answer and no invocation carries it. Empty for an attempt
	// that has none.
	ClaimNonce string
	// Inputs are the outputs of the task's direct upstream tasks that
	// succeeded with one, by task. Only a claim answer's envelope carries
	// them (never a queue message).
	Inputs map[string]json.RawMessage
	// Item and Index are a map child's element of the rendered array and
	// its position; only a claim answer's envelope carries them.
	Item  json.RawMessage
	Index *int
	// Fence is the check a worker's own DynamoDB transaction adds to
	// commit only while this attempt owns its task; only a claim answer's
	// envelope carries it, and only from a DynamoDB ledger.
	Fence *Fence
	// TraceParent is the attempt's W3C traceparent: its run's trace and
	// the attempt's own span (AttemptSpanID), the parent of what the
	// handler does. Only a claim answer's envelope carries it; empty for a
	// run stored before runs kept a trace id.
	TraceParent string
}

// Ref is the attempt the envelope carries.
func (e Envelope) Ref() AttemptRef { return AttemptRef{Run: e.Run, Task: e.Task, Attempt: e.Attempt} }

type envelopeJSON struct {
	Job               string                     `json:"job,omitempty"`
	Run               string                     `json:"run"`
	Task              string                     `json:"task"`
	Attempt           int                        `json:"attempt"`
	Token             string                     `json:"token"`
	Pool              string                     `json:"pool"`
	LogicalTime       *string                    `json:"logical_time,omitempty"`
	Payload           json.RawMessage            `json:"payload,omitempty"`
	Params            json.RawMessage            `json:"params,omitempty"`
	HeartbeatInterval string                     `json:"heartbeat_interval,omitempty"`
	RunTimeout        string                     `json:"run_timeout,omitempty"`
	ClaimBy           *string                    `json:"claim_by,omitempty"`
	Inputs            map[string]json.RawMessage `json:"inputs,omitempty"`
	Item              json.RawMessage            `json:"item,omitempty"`
	Index             *int                       `json:"index,omitempty"`
	Fence             *Fence                     `json:"fence,omitempty"`
	TraceParent       string                     `json:"traceparent,omitempty"`
}

// MarshalJSON writes the envelope in the contract's shape: durations as Go
// duration strings, times in TimeLayout, absent ones left out.
func (e Envelope) MarshalJSON() ([]byte, error) {
	w := envelopeJSON{
		Job: e.Job, Run: e.Run, Task: e.Task, Attempt: e.Attempt, Token: e.Token, Pool: e.Pool,
		LogicalTime: NullTime(e.LogicalTime),
		Payload:     e.Payload, Params: e.Params,
		ClaimBy: NullTime(e.ClaimBy),
		Inputs:  e.Inputs, Item: e.Item, Index: e.Index, Fence: e.Fence, TraceParent: e.TraceParent,
	}
	if e.HeartbeatInterval != 0 {
		w.HeartbeatInterval = e.HeartbeatInterval.String()
	}
	if e.RunTimeout != 0 {
		w.RunTimeout = e.RunTimeout.String()
	}
	return wire.Marshal(w)
}

// UnmarshalJSON reads the contract's shape. A field of the wrong form is a
// *FieldError; unknown fields are ignored, so an older worker reads a newer
// scheduler's envelopes.
func (e *Envelope) UnmarshalJSON(b []byte) error {
	var w envelopeJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	hb, err := parseOptionalDuration("heartbeat_interval", w.HeartbeatInterval)
	if err != nil {
		return err
	}
	rt, err := parseOptionalDuration("run_timeout", w.RunTimeout)
	if err != nil {
		return err
	}
	claimBy, err := parseOptionalTime("claim_by", w.ClaimBy)
	if err != nil {
		return err
	}
	logical, err := parseOptionalTime("logical_time", w.LogicalTime)
	if err != nil {
		return err
	}
	*e = Envelope{
		Job: w.Job, Run: w.Run, Task: w.Task, Attempt: w.Attempt, Token: w.Token, Pool: w.Pool,
		LogicalTime: logical,
		Payload:     nullToNil(w.Payload), Params: nullToNil(w.Params),
		HeartbeatInterval: hb, RunTimeout: rt, ClaimBy: claimBy,
		Inputs: w.Inputs, Item: w.Item, Index: w.Index, Fence: w.Fence, TraceParent: w.TraceParent,
	}
	return nil
}

// Validate checks what a worker needs of an envelope: an attempt, its
// token, and durations that are not negative.
func (e Envelope) Validate() error {
	if err := e.Ref().Validate(); err != nil {
		return err
	}
	switch {
	case e.Token == "":
		return malformed("token", "token is required.")
	case e.HeartbeatInterval < 0:
		return malformed("heartbeat_interval", fmt.Sprintf("heartbeat_interval %s is negative.", e.HeartbeatInterval))
	case e.RunTimeout < 0:
		return malformed("run_timeout", fmt.Sprintf("run_timeout %s is negative.", e.RunTimeout))
	}
	return nil
}

// ParseEnvelope decodes a dispatch message body and validates it.
func ParseEnvelope(body string) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		return Envelope{}, fmt.Errorf("parse envelope: %w", err)
	}
	if err := e.Validate(); err != nil {
		return Envelope{}, fmt.Errorf("parse envelope %s: %w", e.Ref(), err)
	}
	return e, nil
}

func nullToNil(m json.RawMessage) json.RawMessage {
	if string(m) == "null" {
		return nil
	}
	return m
}
