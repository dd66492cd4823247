package protocol

import (
	"errors"
	"net/http"

	"github.com/runledger/runledger/shared/fault"

	"github.com/runledger/runledger/statemodel"
)

// Code is an API error code: the "code" of every error answer
// {"code", "message"} (docs/api.md, "Errors"). The API answers only these;
// the typed client, the worker SDK and jobspec name them from here.
type Code string

// The API's error codes, each with the one HTTP status it is answered with.
const (
	// CodeInvalidJSON: the body does not parse as JSON, is empty where one
	// is needed, or holds more than one JSON value. 400.
	CodeInvalidJSON Code = "invalid_json"
	// CodeUnauthorized: no valid API key; on a worker route, no bearer
	// token. 401.
	CodeUnauthorized Code = "unauthorized"
	// CodeInvalidToken: worker routes: the attempt token does not match
	// the run, task and attempt, or they are unknown. 401.
	CodeInvalidToken Code = "invalid_token"
	// CodeNotFound: the job, run, task or backfill does not exist, or no
	// route matches. 404.
	CodeNotFound Code = "not_found"
	// CodeConflict: a job of that name exists; deleting a job with
	// unfinished runs; an Idempotency-Key reused with another body. 409.
	CodeConflict Code = "conflict"
	// CodeIllegalTransition: the task's, run's or backfill's state does not
	// allow the action. 409.
	CodeIllegalTransition Code = "illegal_transition"
	// CodeAlreadyClaimed: worker routes: another claim of the attempt
	// won. 409.
	CodeAlreadyClaimed Code = "already_claimed"
	// CodeStaleAttempt: worker routes: a newer attempt of the task
	// exists. 409.
	CodeStaleAttempt Code = "stale_attempt"
	// CodeVersionConflict: an If-Match that is not the job's version. 412.
	CodeVersionConflict Code = "version_conflict"
	// CodePayloadTooLarge: a payload or params over 64 KiB, a body over
	// 1 MiB, a definition or an item over its limit. 413.
	CodePayloadTooLarge Code = "payload_too_large"
	// CodeMisdirectedRequest: the local stack only: the Host header is not
	// its loopback address and port. 421.
	CodeMisdirectedRequest Code = "misdirected_request"
	// CodeInvalidField: a field is unknown, missing, of the wrong type or
	// out of range; an unknown pool; a bad dependency. 422.
	CodeInvalidField Code = "invalid_field"
	// CodeInvalidCron: schedule.cron is not a cron expression runledger
	// accepts, or never fires. 422.
	CodeInvalidCron Code = "invalid_cron"
	// CodeInvalidTimezone: schedule.timezone is not an IANA time zone. 422.
	CodeInvalidTimezone Code = "invalid_timezone"
	// CodeDependencyCycle: the tasks' depends_on form a cycle. 422.
	CodeDependencyCycle Code = "dependency_cycle"
	// CodeLimitQueueFull: the run's limiter already has 10,000 runs
	// waiting; nothing was written. 429.
	CodeLimitQueueFull Code = "limit_queue_full"
	// CodeInternal: anything else; the detail is logged, never answered.
	// Safe to retry. 500.
	CodeInternal Code = "internal"
	// CodeUnavailable: a claim of an attempt whose dispatch is not recorded
	// yet; claim again after Retry-After. 503.
	CodeUnavailable Code = "unavailable"
)

// The one table from errors to HTTP: an error the API answers carries a
// class and a code (package fault); the answer's status is its class's
// (classStatus) unless its code is one of the special cases (codeStatus).
// codeClass gives each code its class, for the answers built from a code
// alone (a refused field, a refused definition).
var (
	classStatus = map[fault.Class]int{
		fault.Internal:    http.StatusInternalServerError,
		fault.Invalid:     http.StatusUnprocessableEntity,
		fault.Forbidden:   http.StatusUnauthorized, // every refusal is of a credential: the API answers no 403
		fault.NotFound:    http.StatusNotFound,
		fault.Conflict:    http.StatusConflict,
		fault.TooLarge:    http.StatusRequestEntityTooLarge,
		fault.Throttled:   http.StatusTooManyRequests,
		fault.Unavailable: http.StatusServiceUnavailable,
	}
	codeStatus = map[Code]int{
		CodeInvalidJSON:        http.StatusBadRequest,         // Invalid, before any field is read
		CodeVersionConflict:    http.StatusPreconditionFailed, // Conflict with an If-Match
		CodeMisdirectedRequest: http.StatusMisdirectedRequest, // Invalid: the Host is not the local stack's
	}
	codeClass = map[Code]fault.Class{
		CodeInvalidJSON:        fault.Invalid,
		CodeUnauthorized:       fault.Forbidden,
		CodeInvalidToken:       fault.Forbidden,
		CodeNotFound:           fault.NotFound,
		CodeConflict:           fault.Conflict,
		CodeIllegalTransition:  fault.Conflict,
		CodeAlreadyClaimed:     fault.Conflict,
		CodeStaleAttempt:       fault.Conflict,
		CodeVersionConflict:    fault.Conflict,
		CodePayloadTooLarge:    fault.TooLarge,
		CodeMisdirectedRequest: fault.Invalid,
		CodeInvalidField:       fault.Invalid,
		CodeInvalidCron:        fault.Invalid,
		CodeInvalidTimezone:    fault.Invalid,
		CodeDependencyCycle:    fault.Invalid,
		CodeLimitQueueFull:     fault.Throttled,
		CodeInternal:           fault.Internal,
		CodeUnavailable:        fault.Unavailable,
	}
)

// Codes lists every error code the API answers, in the order of their
// HTTP status.
func Codes() []Code {
	return []Code{
		CodeInvalidJSON, CodeUnauthorized, CodeInvalidToken, CodeNotFound,
		CodeConflict, CodeIllegalTransition, CodeAlreadyClaimed, CodeStaleAttempt,
		CodeVersionConflict, CodePayloadTooLarge, CodeMisdirectedRequest,
		CodeInvalidField, CodeInvalidCron, CodeInvalidTimezone, CodeDependencyCycle,
		CodeLimitQueueFull, CodeInternal, CodeUnavailable,
	}
}

// Class is code's class; Internal for a code the API does not answer.
func (c Code) Class() fault.Class { return codeClass[c] }

// Status is the HTTP status the API answers code with: its class's, or
// its own where the table says so; 500 for a code it does not answer.
func (c Code) Status() int { return Status(c.Class(), c) }

// Status is the HTTP status of an answer of class with code: the code's
// own where it has one (the special cases), else the class's.
func Status(class fault.Class, code Code) int {
	if s, ok := codeStatus[code]; ok {
		return s
	}
	if s, ok := classStatus[class]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Answer is the error the API answers err with: the first in err's chain
// that carries a code (package fault), else the state model's refusal
// (illegalTransition) when err is one; ok is false for an error the API
// answers 500 internal.
func Answer(err error) (answer *fault.Error, ok bool) {
	if f, ok := fault.Answered(err); ok {
		return f, true
	}
	if errors.Is(err, ErrIllegalTransition) {
		return illegalTransition, true
	}
	return nil, false
}

// NewError returns a sentinel error with text for logs, of code's class,
// that the API answers with code and message.
func NewError(code Code, text, message string) *fault.Error {
	return fault.New(code.Class(), text).Answer(string(code), message)
}

// The refusals of the worker routes (claim, heartbeat, complete), declared
// once: the service returns them and the API answers each with its code;
// the worker SDK returns them for those answers. Test with errors.Is.
var (
	// ErrStaleAttempt: a newer attempt of the task exists (stale_attempt).
	ErrStaleAttempt = NewError(CodeStaleAttempt, "stale attempt", "A newer attempt of this task exists.")
	// ErrAlreadyClaimed: another claim of the attempt won (already_claimed).
	ErrAlreadyClaimed = NewError(CodeAlreadyClaimed, "attempt already claimed", "Another worker holds this attempt.")
	// ErrInvalidAttemptToken: the attempt token (the fencing token) does
	// not match the run, task and attempt, or they are unknown
	// (invalid_token).
	ErrInvalidAttemptToken = NewError(CodeInvalidToken, "invalid attempt token", "The attempt token does not match this run, task and attempt.")
	// ErrIllegalTransition: the state refuses the event: the state
	// model's own refusal (illegal_transition). The pure state model
	// knows nothing of the API; Answer gives it its class and code.
	ErrIllegalTransition = statemodel.ErrIllegalTransition
)

// illegalTransition is the answer to ErrIllegalTransition.
var illegalTransition = NewError(CodeIllegalTransition, "illegal transition", "The task's current state does not allow this.")
