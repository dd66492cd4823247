package protocol

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/wire"
)

// InvocationFailure is the record Lambda's on-failure destination sends to
// the events queue when an asynchronous invocation of a lambda executor's
// function failed for good (its retries exhausted, or its event too old):
// the invocation record Lambda documents, whose requestPayload is the
// envelope the scheduler invoked the function with. The local stack sends
// the same record when an in-process function fails its invocation.
type InvocationFailure struct {
	// Timestamp is when Lambda gave up.
	Timestamp time.Time
	// RequestID is the invocation's request id: the attempt's executor id.
	RequestID   string
	FunctionARN string
	// Condition is Lambda's reason: "RetriesExhausted",
	// "EventAgeExceeded".
	Condition              string
	ApproximateInvokeCount int
	// Envelope is the request payload: the attempt the invocation was for.
	Envelope Envelope
	// FunctionError is "Unhandled" (a crash, a timeout) or "Handled"
	// (the handler returned an error); ErrorType and ErrorMessage are the
	// response payload's.
	FunctionError string
	ErrorType     string
	ErrorMessage  string
}

// ConditionRetriesExhausted is the condition of a failed invocation whose
// retries are spent.
const ConditionRetriesExhausted = "RetriesExhausted"

type invocationFailureJSON struct {
	Version        string `json:"version"`
	Timestamp      string `json:"timestamp"`
	RequestContext struct {
		RequestID              string `json:"requestId"`
		FunctionARN            string `json:"functionArn"`
		Condition              string `json:"condition"`
		ApproximateInvokeCount int    `json:"approximateInvokeCount"`
	} `json:"requestContext"`
	RequestPayload  json.RawMessage `json:"requestPayload"`
	ResponseContext struct {
		StatusCode      int    `json:"statusCode"`
		ExecutedVersion string `json:"executedVersion"`
		FunctionError   string `json:"functionError,omitempty"`
	} `json:"responseContext"`
	ResponsePayload *struct {
		ErrorMessage string `json:"errorMessage,omitempty"`
		ErrorType    string `json:"errorType,omitempty"`
	} `json:"responsePayload,omitempty"`
}

// MarshalJSON writes Lambda's invocation record.
func (f InvocationFailure) MarshalJSON() ([]byte, error) {
	env, err := wire.Marshal(f.Envelope)
	if err != nil {
		return nil, err
	}
	var w invocationFailureJSON
	w.Version, w.Timestamp = "1.0", FormatTime(f.Timestamp)
	w.RequestContext.RequestID, w.RequestContext.FunctionARN = f.RequestID, f.FunctionARN
	w.RequestContext.Condition, w.RequestContext.ApproximateInvokeCount = f.Condition, f.ApproximateInvokeCount
	w.RequestPayload = env
	w.ResponseContext.StatusCode, w.ResponseContext.ExecutedVersion = 200, "$LATEST"
	w.ResponseContext.FunctionError = f.FunctionError
	if f.ErrorMessage != "" || f.ErrorType != "" {
		w.ResponsePayload = &struct {
			ErrorMessage string `json:"errorMessage,omitempty"`
			ErrorType    string `json:"errorType,omitempty"`
		}{f.ErrorMessage, f.ErrorType}
	}
	return wire.Marshal(w)
}

// UnmarshalJSON reads Lambda's invocation record; Validate checks it.
func (f *InvocationFailure) UnmarshalJSON(b []byte) error {
	var w invocationFailureJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("decode invocation record: %w", err)
	}
	out := InvocationFailure{
		RequestID: w.RequestContext.RequestID, FunctionARN: w.RequestContext.FunctionARN,
		Condition: w.RequestContext.Condition, ApproximateInvokeCount: w.RequestContext.ApproximateInvokeCount,
		FunctionError: w.ResponseContext.FunctionError,
	}
	if w.Timestamp != "" {
		t, err := ParseTime(w.Timestamp)
		if err != nil {
			return malformed("timestamp", fmt.Sprintf("timestamp %q is not a time.", w.Timestamp))
		}
		out.Timestamp = t
	}
	if w.ResponsePayload != nil {
		out.ErrorMessage, out.ErrorType = w.ResponsePayload.ErrorMessage, w.ResponsePayload.ErrorType
	}
	if len(w.RequestPayload) > 0 {
		if err := json.Unmarshal(w.RequestPayload, &out.Envelope); err != nil {
			return fmt.Errorf("invocation record's request payload: %w", err)
		}
	}
	*f = out
	return nil
}

// Validate checks that the record names an invocation and the attempt it
// was for, with its token.
func (f InvocationFailure) Validate() error {
	switch {
	case f.RequestID == "":
		return malformed("requestContext.requestId", "requestContext.requestId is required.")
	case f.Envelope.Token == "":
		return malformed("requestPayload.token", "requestPayload.token is required.")
	}
	if err := (AttemptRef{Run: f.Envelope.Run, Task: f.Envelope.Task, Attempt: f.Envelope.Attempt}).Validate(); err != nil {
		return fmt.Errorf("invocation record's request payload: %w", err)
	}
	return nil
}

// Ref is the attempt the failed invocation was for.
func (f InvocationFailure) Ref() AttemptRef {
	return AttemptRef{Run: f.Envelope.Run, Task: f.Envelope.Task, Attempt: f.Envelope.Attempt}
}
