package protocol

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Trace context (W3C Trace Context, version 00), written once for the
// server, the worker SDK and the span exporter: a run's trace id, and
// the span ids of the run and of each of its attempts.
//
// The span ids are derived from the names of what they stand for, never
// stored: the process that claims an attempt answers the attempt's span
// id, and the process that records the attempt's end (another one, often)
// exports its span under the same id, so every delivery of a claim and
// every exporter agree without a write.

// TraceParentHeader is the HTTP header (and, upper-cased, the variable
// `worker exec` sets) that carries a traceparent.
const TraceParentHeader = "traceparent"

// EnvTraceParent is the variable `worker exec` gives its command: the
// attempt's traceparent.
const EnvTraceParent = "TRACEPARENT"

// TraceIDLen and SpanIDLen are the lengths of a trace id and a span id in
// hex digits.
const (
	TraceIDLen = 32
	SpanIDLen  = 16
)

// NewTraceID is a random trace id: 32 lower-case hex digits, never all
// zeros.
func NewTraceID() string {
	var b [16]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		if b != [16]byte{} {
			return hex.EncodeToString(b[:])
		}
	}
}

// ParseTraceParent reads a traceparent header's trace id and parent span
// id. ok is false for a value that is not one: as the W3C rules say, the
// receiver then starts a trace of its own rather than refusing the
// request, since the header is set by infrastructure the caller may not
// control. A version other than 00 is read by its first four fields, as
// the rules ask of a future version.
func ParseTraceParent(v string) (traceID, spanID string, ok bool) {
	v = strings.TrimSpace(v)
	if len(v) < 55 {
		return "", "", false
	}
	parts := strings.SplitN(v, "-", 5)
	if len(parts) < 4 {
		return "", "", false
	}
	version, trace, span, flags := parts[0], parts[1], parts[2], parts[3]
	switch {
	case len(version) != 2 || !lowerHex(version) || version == "ff":
		return "", "", false
	case version == "00" && len(parts) != 4:
		return "", "", false
	case len(trace) != TraceIDLen || !lowerHex(trace) || allZero(trace):
		return "", "", false
	case len(span) != SpanIDLen || !lowerHex(span) || allZero(span):
		return "", "", false
	case len(flags) != 2 || !lowerHex(flags):
		return "", "", false
	}
	return trace, span, true
}

// CheckTraceID reports whether id is a trace id as this package writes
// them: 32 lower-case hex digits, not all zeros.
func CheckTraceID(id string) bool {
	return len(id) == TraceIDLen && lowerHex(id) && !allZero(id)
}

// FormatTraceParent is the traceparent of span spanID in trace traceID,
// sampled; "" when traceID is not a trace id (a run stored before runs
// kept one).
func FormatTraceParent(traceID, spanID string) string {
	if !CheckTraceID(traceID) {
		return ""
	}
	return "00-" + traceID + "-" + spanID + "-01"
}

// RunSpanID is the span id of a run's own span.
func RunSpanID(run string) string { return derivedSpanID("run\x00" + run) }

// AttemptSpanID is the span id of an attempt's span: a child of its run's
// span, and a sibling of the task's other attempts.
func AttemptSpanID(a AttemptRef) string {
	return derivedSpanID("attempt\x00" + a.Run + "\x00" + a.Task + "\x00" + strconv.Itoa(a.Attempt))
}

// AttemptTraceParent is the traceparent a claim answer's envelope
// carries: the attempt's span in its run's trace ("" without a trace id).
func AttemptTraceParent(traceID string, a AttemptRef) string {
	return FormatTraceParent(traceID, AttemptSpanID(a))
}

// derivedSpanID is the first 8 bytes of name's SHA-256, never all zeros.
func derivedSpanID(name string) string {
	sum := sha256.Sum256([]byte(name))
	id := sum[:8]
	if [8]byte(id) == [8]byte{} {
		id[7] = 1
	}
	return hex.EncodeToString(id)
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool { return strings.Trim(s, "0") == "" }
