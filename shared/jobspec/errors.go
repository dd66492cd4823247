package jobspec

import (
	"fmt"

	"github.com/runledger/runledger/shared/protocol"
)

// Error is a refused definition. Message is one human sentence naming the
// field and the problem, safe to send to the client as is; Field is the JSON
// path of the offending value ("tasks[2].retry.max_interval"), empty when
// the problem is the body as a whole.
type Error struct {
	Code    protocol.Code
	Field   string
	Message string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("%s %s: %s", e.Code, e.Field, e.Message)
}

// HTTPStatus is the status the API answers with: the code's
// (protocol.Code.Status).
func (e *Error) HTTPStatus() int { return e.Code.Status() }

// fieldError builds an invalid_field error. The message starts with the
// field, so it reads as a sentence on its own.
func fieldError(field, format string, args ...any) *Error {
	return &Error{Code: protocol.CodeInvalidField, Field: field, Message: sentence(field, format, args...)}
}

func sentence(field, format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + " " + msg
	}
	return msg + "."
}
