package worker

import "github.com/runledger/runledger/shared/protocol"

// The worker protocol's messages and limits are package protocol's, the
// one definition the scheduler reads too; the SDK names them here so that
// a worker needs only this package.
type (
	// AttemptRef names one attempt of one task instance of a run.
	AttemptRef = protocol.AttemptRef
	// Envelope is the body of a dispatch message: one attempt handed to a pool.
	Envelope = protocol.Envelope
	// Completion is the report of how an attempt ended.
	Completion = protocol.Completion
	// Outcome is how an attempt ended, as the worker reports it.
	Outcome = protocol.Outcome
	// Lease is a worker process's lease message on the events queue.
	Lease = protocol.Lease
	// LeasedAttempt is an attempt a lease lists, with its proof.
	LeasedAttempt = protocol.LeasedAttempt
	// FieldError is a field the contract refuses (413 or 422).
	FieldError = protocol.FieldError
	// ClaimRequest is the body of POST /v1/attempts/claim.
	ClaimRequest = protocol.ClaimRequest
	// ClaimResponse is the 200 answer of a claim.
	ClaimResponse = protocol.ClaimAnswer
	// HeartbeatRequest is the body of POST /v1/attempts/heartbeat.
	HeartbeatRequest = protocol.HeartbeatRequest
	// HeartbeatResponse is the 200 answer of a heartbeat.
	HeartbeatResponse = protocol.HeartbeatAnswer
	// CompleteResponse is the 200 answer of a completion.
	CompleteResponse = protocol.CompleteAnswer
)

// The outcomes a completion carries.
const (
	OutcomeSucceeded = protocol.OutcomeSucceeded
	OutcomeFailed    = protocol.OutcomeFailed
	OutcomeCancelled = protocol.OutcomeCancelled
)

// Error categories the worker SDK itself reports (protocol.CategoryError
// and the rest).
const (
	CategoryError          = protocol.CategoryError
	CategoryTimeout        = protocol.CategoryTimeout
	CategoryCancelled      = protocol.CategoryCancelled
	CategoryPanic          = protocol.CategoryPanic
	CategoryWorkerShutdown = protocol.CategoryWorkerShutdown
	CategoryWorkerDeadline = protocol.CategoryWorkerDeadline
)

// Complete results.
const (
	ResultApplied   = protocol.ResultApplied
	ResultDuplicate = protocol.ResultDuplicate
	ResultStale     = protocol.ResultStale
)

// Limits of a worker's reports (protocol.MaxOutputRefBytes and the rest).
const (
	MaxOutputRefBytes   = protocol.MaxOutputRefBytes
	MaxErrorCategoryLen = protocol.MaxErrorCategoryLen
	MaxReasonBytes      = protocol.MaxReasonBytes
	MaxEventIDLen       = protocol.MaxEventIDLen
)

// LeaseKind is the "kind" of a worker lease message on the events queue.
const LeaseKind = protocol.LeaseKind

// ParseEnvelope decodes a dispatch message body and validates it
// (protocol.ParseEnvelope).
func ParseEnvelope(body string) (Envelope, error) { return protocol.ParseEnvelope(body) }

// CheckEventID checks an event id a worker sends (protocol.CheckEventID).
func CheckEventID(id string) error { return protocol.CheckEventID(id) }

// CheckReportFields checks a completion's output_ref, error_category and
// reason against the contract's limits (protocol.CheckReportFields).
func CheckReportFields(outputRef, errorCategory, reason string) error {
	return protocol.CheckReportFields(outputRef, errorCategory, reason)
}

// ClipReason keeps the last MaxReasonBytes of s (protocol.ClipReason).
func ClipReason(s string) string { return protocol.ClipReason(s) }
