package protocol

import (
	"errors"
	"net/http"

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

var codeStatus = map[Code]int{
	CodeInvalidJSON:        http.StatusBadRequest,
	CodeUnauthorized:       http.StatusUnauthorized,
	CodeInvalidToken:       http.StatusUnauthorized,
	CodeNotFound:           http.StatusNotFound,
	CodeConflict:           http.StatusConflict,
	CodeIllegalTransition:  http.StatusConflict,
	CodeAlreadyClaimed:     http.StatusConflict,
	CodeStaleAttempt:       http.StatusConflict,
	CodeVersionConflict:    http.StatusPreconditionFailed,
	CodePayloadTooLarge:    http.StatusRequestEntityTooLarge,
	CodeMisdirectedRequest: http.StatusMisdirectedRequest,
	CodeInvalidField:       http.StatusUnprocessableEntity,
	CodeInvalidCron:        http.StatusUnprocessableEntity,
	CodeInvalidTimezone:    http.StatusUnprocessableEntity,
	CodeDependencyCycle:    http.StatusUnprocessableEntity,
	CodeLimitQueueFull:     http.StatusTooManyRequests,
	CodeInternal:           http.StatusInternalServerError,
	CodeUnavailable:        http.StatusServiceUnavailable,
}

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

// Status is the HTTP status the API answers code with; 500 for a code it
// does not answer.
func (c Code) Status() int {
	if s, ok := codeStatus[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// The refusals of the worker routes (claim, heartbeat, complete), declared
// once: the service returns them and the API answers each with its code;
// the worker SDK returns them for those answers. Test with errors.Is.
var (
	// ErrStaleAttempt: a newer attempt of the task exists (stale_attempt).
	ErrStaleAttempt = errors.New("stale attempt")
	// ErrAlreadyClaimed: another claim of the attempt won (already_claimed).
	ErrAlreadyClaimed = errors.New("attempt already claimed")
	// ErrInvalidAttemptToken: the attempt token (the fencing token) does
	// not match the run, task and attempt, or they are unknown
	// (invalid_token).
	ErrInvalidAttemptToken = errors.New("invalid attempt token")
	// ErrIllegalTransition: the state refuses the event: the state
	// model's own refusal (illegal_transition).
	ErrIllegalTransition = statemodel.ErrIllegalTransition
)
