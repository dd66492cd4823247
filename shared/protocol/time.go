// Package protocol is runledger's one definition of what crosses the wire
// between the scheduler and its clients: the dispatch envelope, the worker
// routes' requests and answers, the completion and the worker process
// lease (on the HTTP routes and the events queue alike), the API's time
// format, and the HTTP views of runs, tasks, attempts and transitions.
//
// The server and the SDKs (shared/worker, client) decode and validate with
// the same functions, so a message one side accepts the other accepts too.
// The package knows nothing of AWS or of storage; it sits just above
// statemodel, whose states and outcomes its views carry.
package protocol

import (
	"fmt"
	"time"
)

// TimeLayout is the API's time format: RFC 3339 in UTC with milliseconds
// ("2026-01-02T03:04:05.000Z").
const TimeLayout = "2006-01-02T15:04:05.000Z"

// FormatTime writes t in TimeLayout. Digits past the millisecond are
// dropped.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// NullTime is FormatTime for a time that may be unset: nil (JSON null) for
// the zero time.
func NullTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := FormatTime(t)
	return &s
}

// ParseTime reads an RFC 3339 time with any offset and any fraction, and
// returns it in UTC truncated to the millisecond, the API's precision, so a
// time read and written back is unchanged.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse time %q: %w", s, err)
	}
	return t.UTC().Truncate(time.Millisecond), nil
}

// parseOptionalTime reads a time field that may be absent, null or "" (the
// zero time). Its error is a *FieldError naming the field.
func parseOptionalTime(field string, s *string) (time.Time, error) {
	if s == nil || *s == "" {
		return time.Time{}, nil
	}
	t, err := ParseTime(*s)
	if err != nil {
		return time.Time{}, &FieldError{Field: field, Message: field + " must be an RFC 3339 time."}
	}
	return t, nil
}

// parseOptionalDuration reads a Go duration string that may be "" (zero).
func parseOptionalDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &FieldError{Field: field, Message: field + " must be a Go duration string such as \"90s\"."}
	}
	return d, nil
}
