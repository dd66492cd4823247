package jobspec

import (
	"fmt"
	"net/http"
)

// Code is an API error code (docs/api.md, "Errors").
type Code string

// The codes a definition can be refused with.
const (
	// CodeInvalidJSON: the body does not parse as JSON, or is not a JSON
	// object. 400.
	CodeInvalidJSON Code = "invalid_json"
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
	// CodePayloadTooLarge: a payload over MaxPayloadBytes, a body over
	// MaxBodyBytes or a definition over MaxDefinitionBytes. 413.
	CodePayloadTooLarge Code = "payload_too_large"
)

// Error is a refused definition. Message is one human sentence naming the
// field and the problem, safe to send to the client as is; Field is the JSON
// path of the offending value ("tasks[2].retry.max_interval"), empty when
// the problem is the body as a whole.
type Error struct {
	Code    Code
	Field   string
	Message string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("%s %s: %s", e.Code, e.Field, e.Message)
}

// HTTPStatus is the status the API answers with (docs/api.md,
// "Errors"): 400 for invalid_json, 413 for payload_too_large, 422 for the
// other codes.
func (e *Error) HTTPStatus() int {
	switch e.Code {
	case CodeInvalidJSON:
		return http.StatusBadRequest
	case CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusUnprocessableEntity
}

// fieldError builds an invalid_field error. The message starts with the
// field, so it reads as a sentence on its own.
func fieldError(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidField, Field: field, Message: sentence(field, format, args...)}
}

func sentence(field, format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + " " + msg
	}
	return msg + "."
}
