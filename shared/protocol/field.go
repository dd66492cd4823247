package protocol

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// FieldError is a field of a message the contract refuses: over its limit
// (TooLarge: the API answers 413 payload_too_large) or malformed (422
// invalid_field). Message is one sentence for the client, naming the
// field.
type FieldError struct {
	Field    string
	TooLarge bool
	Message  string
}

func (e *FieldError) Error() string { return e.Message }

func malformed(field, message string) *FieldError {
	return &FieldError{Field: field, Message: message}
}

func tooLarge(field string, n, limit int, unit string) *FieldError {
	return &FieldError{Field: field, TooLarge: true, Message: fmt.Sprintf(
		"%s is %d %s, over the limit of %d.", field, n, unit, limit)}
}

// Limits of a completion's free-form fields (docs/api.md, "Workers"). The
// scheduler applies them to every completion, through the HTTP route and
// the events queue alike, so that no report can push an attempt's records
// past DynamoDB's item limit; the SDK applies them before sending.
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

var (
	// eventIDChars is the alphabet of a client's event id. The scheduler's
	// own ids all contain a colon (and the bare word "deps" was one), so
	// no client id can take the place of a scheduler event.
	eventIDChars = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	snakeCase    = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
)

// CheckEventID checks an event id a worker sends on a worker route
// (claim, heartbeat, complete): 1 to MaxEventIDLen characters of
// [A-Za-z0-9._-], not the scheduler's reserved "deps". It returns a
// *FieldError (malformed: 422 invalid_field) or nil. The scheduler applies
// it to every worker event; the SDK's ids always pass it.
func CheckEventID(id string) error {
	switch {
	case id == "":
		return malformed("event_id", "event_id is required on every worker route.")
	case len(id) > MaxEventIDLen || !eventIDChars.MatchString(id):
		return malformed("event_id", fmt.Sprintf(
			"event_id must be 1 to %d characters of A-Z, a-z, 0-9, '.', '_' and '-' (ids with a colon are the scheduler's).", MaxEventIDLen))
	case id == "deps":
		return malformed("event_id", "event_id \"deps\" is reserved for the scheduler.")
	}
	return nil
}

// CheckReportFields checks a completion's output_ref, error_category and
// reason against the contract's limits, in that order, and returns the
// first *FieldError. Empty values are always accepted.
func CheckReportFields(outputRef, errorCategory, reason string) error {
	switch {
	case len(outputRef) > MaxOutputRefBytes:
		return tooLarge("output_ref", len(outputRef), MaxOutputRefBytes, "bytes")
	case !utf8.ValidString(outputRef) || strings.ContainsFunc(outputRef, unicode.IsControl):
		return malformed("output_ref", "output_ref must be printable UTF-8 without control characters.")
	case len(errorCategory) > MaxErrorCategoryLen:
		return tooLarge("error_category", len(errorCategory), MaxErrorCategoryLen, "characters")
	case errorCategory != "" && !snakeCase.MatchString(errorCategory):
		return malformed("error_category", "error_category must be snake_case (lower-case letters, digits and single underscores).")
	case len(reason) > MaxReasonBytes:
		return tooLarge("reason", len(reason), MaxReasonBytes, "bytes")
	case !utf8.ValidString(reason):
		return malformed("reason", "reason must be valid UTF-8.")
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
