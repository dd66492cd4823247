package protocol

import (
	"time"

	"github.com/runledger/runledger/statemodel"
)

// The bodies and answers of the worker routes (docs/api.md, "Workers"). A
// request is read strictly (unknown fields refused); an answer is read
// leniently, so an older worker understands a newer scheduler.

// ClaimRequest is the body of POST /v1/attempts/claim.
type ClaimRequest struct {
	Run      string `json:"run"`
	Task     string `json:"task"`
	Attempt  int    `json:"attempt"`
	WorkerID string `json:"worker_id"`
	EventID  string `json:"event_id"`
}

// Ref is the attempt the claim asks for.
func (r ClaimRequest) Ref() AttemptRef {
	return AttemptRef{Run: r.Run, Task: r.Task, Attempt: r.Attempt}
}

// Validate checks the claim in the contract's order: the attempt, the
// worker id, the event id. Its error is a *FieldError (422).
func (r ClaimRequest) Validate() error {
	if err := r.Ref().Validate(); err != nil {
		return err
	}
	if r.WorkerID == "" {
		return malformed("worker_id", "worker_id is required.")
	}
	return CheckEventID(r.EventID)
}

// ClaimAnswer is the 200 answer of a claim. Envelope is the attempt's
// envelope (docs/api.md, "Wave 2 additions"), so that an executor that
// starts a process with only run, task, attempt and token can learn its
// payload and params by claiming. The scheduler reads the run with the
// instance in one call to build it.
type ClaimAnswer struct {
	Claimed        bool      `json:"claimed"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	Envelope       *Envelope `json:"envelope,omitempty"`
}

// MaxInputsBytes bounds a claim answer's inputs, encoded, in total: the
// scheduler fails a task whose upstream outputs come to more (error
// category inputs_too_large) instead of answering its claim with them.
const MaxInputsBytes = 1 << 20

// MaxAnswerBytes is what a worker reads of an answer of the worker
// routes. The largest is a claim answer: inputs up to MaxInputsBytes, and
// besides them an envelope that fits a queue message (256 KiB) and a map
// child's item (at most 256 KiB); the second MiB holds those with room to
// spare, so no answer the scheduler gives is cut short.
const MaxAnswerBytes = MaxInputsBytes + 1<<20

// MarshalJSON writes the contract's shape.
func (a ClaimAnswer) MarshalJSON() ([]byte, error) { return marshalView(a) }

// HeartbeatRequest is the body of POST /v1/attempts/heartbeat.
type HeartbeatRequest struct {
	Run     string `json:"run"`
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
	EventID string `json:"event_id"`
}

// Ref is the attempt the heartbeat renews.
func (r HeartbeatRequest) Ref() AttemptRef {
	return AttemptRef{Run: r.Run, Task: r.Task, Attempt: r.Attempt}
}

// Validate checks the heartbeat in the contract's order: the attempt, the
// event id. Its error is a *FieldError (422).
func (r HeartbeatRequest) Validate() error {
	if err := r.Ref().Validate(); err != nil {
		return err
	}
	return CheckEventID(r.EventID)
}

// HeartbeatAnswer is the 200 answer of a heartbeat.
type HeartbeatAnswer struct {
	CancelRequested bool      `json:"cancel_requested"`
	LeaseExpiresAt  time.Time `json:"lease_expires_at"`
	// State is the instance's state after the call.
	State statemodel.InstanceState `json:"state,omitempty"`
}

// MarshalJSON writes the contract's shape.
func (a HeartbeatAnswer) MarshalJSON() ([]byte, error) { return marshalView(a) }

// The results of a completion.
const (
	ResultApplied   = string(statemodel.Applied)
	ResultDuplicate = string(statemodel.Duplicate)
	ResultStale     = string(statemodel.Stale)
)

// CompleteAnswer is the 200 answer of a completion: applied, duplicate
// (the same event id again; the first outcome stands) or stale (an older
// attempt's report, recorded as a late event), and the state that stands.
type CompleteAnswer struct {
	Result string `json:"result"`
	// State is the instance's state after the call.
	State statemodel.InstanceState `json:"state,omitempty"`
}
