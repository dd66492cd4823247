package protocol

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Outcomes a signal may report for a signal task.
const (
	SignalSucceeded = "succeeded"
	SignalFailed    = "failed"
)

// MaxSignalByLen bounds a signal's "by": who decided (a person, a
// partner's system), in characters.
const MaxSignalByLen = 128

// SignalRequest is the body of POST /v1/runs/{run}/tasks/{task}/signal,
// which settles a waiting signal task's attempt (docs/api.md, "Signal
// tasks").
type SignalRequest struct {
	Outcome   string `json:"outcome"`
	By        string `json:"by"`
	Reason    string `json:"reason,omitempty"`
	OutputRef string `json:"output_ref,omitempty"`
	// EventID, when given, makes the signal idempotent: the same id
	// again is answered with the first outcome.
	EventID string `json:"event_id,omitempty"`
	// Output is the task's output, as a completion's: any JSON value, at
	// most MaxOutputBytes encoded (CheckOutput). A succeeding signal's is
	// kept with the attempt and handed to the direct downstream tasks as
	// their inputs.
	Output json.RawMessage `json:"output,omitempty"`
}

// Validate checks the request against the contract's limits and returns
// the first *FieldError.
func (r SignalRequest) Validate() error {
	switch {
	case r.Outcome != SignalSucceeded && r.Outcome != SignalFailed:
		return malformed("outcome", fmt.Sprintf("outcome must be %q or %q, not %q.", SignalSucceeded, SignalFailed, r.Outcome))
	case r.By == "":
		return malformed("by", "by is required: who decided (1 to 128 characters).")
	case utf8.RuneCountInString(r.By) > MaxSignalByLen:
		return tooLarge("by", utf8.RuneCountInString(r.By), MaxSignalByLen, "characters")
	case !utf8.ValidString(r.By) || strings.ContainsFunc(r.By, unicode.IsControl) || strings.TrimSpace(r.By) == "":
		return malformed("by", "by must be printable UTF-8 without control characters.")
	}
	if err := CheckReportFields(r.OutputRef, "", r.Reason); err != nil {
		return err
	}
	if err := CheckOutput(r.Output); err != nil {
		return err
	}
	if r.EventID != "" {
		return CheckEventID(r.EventID)
	}
	return nil
}
