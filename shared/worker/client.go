package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
)

// Answers of the worker routes, as errors: the protocol package's, the
// ones the service refuses with. Test with errors.Is; the returned error
// is an *APIError (or wraps the network error) with the operation and the
// attempt in its text.
var (
	// ErrAlreadyClaimed: another claim of the attempt won (409).
	ErrAlreadyClaimed = protocol.ErrAlreadyClaimed
	// ErrStaleAttempt: the attempt is older than the instance's current one (409).
	ErrStaleAttempt = protocol.ErrStaleAttempt
	// ErrIllegalTransition: the instance's state refuses the call, for
	// example a cancelled or terminal instance (409).
	ErrIllegalTransition = protocol.ErrIllegalTransition
	// ErrInvalidToken: the token does not match the attempt, or the run,
	// task or attempt is unknown (401).
	ErrInvalidToken = protocol.ErrInvalidAttemptToken
	// ErrTransient: the call may succeed if repeated: a network failure, a
	// timeout, 429 or a 5xx answer.
	ErrTransient = fault.New(fault.Unavailable, "transient failure")
)

// APIError is an error answer of the API: {"code", "message"} and the
// HTTP status.
type APIError struct {
	Op      string // "claim", "heartbeat", "complete"
	Ref     AttemptRef
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Op, e.Ref, e.Status, e.Code, e.Message)
}

// Class is the class of the answer's code (fault.ClassOf reads it
// through wrapping); Internal when Code is not the API's.
func (e *APIError) Class() fault.Class { return protocol.Code(e.Code).Class() }

// Is maps the answer onto the package's errors.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrAlreadyClaimed:
		return e.Status == http.StatusConflict && e.Code == string(protocol.CodeAlreadyClaimed)
	case ErrStaleAttempt:
		return e.Status == http.StatusConflict && e.Code == string(protocol.CodeStaleAttempt)
	case ErrIllegalTransition:
		return e.Status == http.StatusConflict && e.Code == string(protocol.CodeIllegalTransition)
	case ErrInvalidToken:
		return e.Status == http.StatusUnauthorized && e.Code == string(protocol.CodeInvalidToken)
	case ErrTransient:
		return e.Status == http.StatusTooManyRequests || e.Status >= 500
	}
	return false
}

// IsTransient reports whether err may go away when the call is repeated.
// Every other error from the client is permanent for that request.
func IsTransient(err error) bool { return errors.Is(err, ErrTransient) }

// isRefusal reports the answers that end an attempt for this worker: the
// server has decided, and repeating the call cannot change that.
func isRefusal(err error) bool {
	return errors.Is(err, ErrAlreadyClaimed) || errors.Is(err, ErrStaleAttempt) ||
		errors.Is(err, ErrIllegalTransition) || errors.Is(err, ErrInvalidToken)
}

// transientError marks a failure below HTTP (connection, timeout) while
// keeping the cause for errors.Is / errors.As.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() []error {
	return []error{ErrTransient, e.err}
}

// Client calls the worker routes of the API.
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client for the API at baseURL (scheme, host and an
// optional path prefix). A nil hc uses a client with a 30 s timeout.
func NewClient(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), http: hc}
}

// Claim asks for the attempt. Exactly one claim of an attempt succeeds; the
// winner repeating its claim with the same EventID succeeds again. Every
// call of the client checks its body as the API does (the request's
// Validate: the attempt, an EventID that CheckEventID accepts, the
// completion's limits) and refuses a body the API would refuse with a
// *FieldError, before anything is sent.
func (c *Client) Claim(ctx context.Context, token string, req ClaimRequest) (ClaimResponse, error) {
	var out ClaimResponse
	ref := req.Ref()
	if err := req.Validate(); err != nil {
		return ClaimResponse{}, fmt.Errorf("claim %s: %w", ref, err)
	}
	if err := c.call(ctx, "claim", "/v1/attempts/claim", ref, token, req, &out); err != nil {
		return ClaimResponse{}, err
	}
	if !out.Claimed {
		return ClaimResponse{}, &APIError{Op: "claim", Ref: ref, Status: http.StatusOK, Code: "not_claimed", Message: "the answer says claimed: false"}
	}
	return out, nil
}

// Heartbeat proves the attempt alive and learns whether cancel was requested.
func (c *Client) Heartbeat(ctx context.Context, token string, req HeartbeatRequest) (HeartbeatResponse, error) {
	var out HeartbeatResponse
	ref := req.Ref()
	if err := req.Validate(); err != nil {
		return HeartbeatResponse{}, fmt.Errorf("heartbeat %s: %w", ref, err)
	}
	if err := c.call(ctx, "heartbeat", "/v1/attempts/heartbeat", ref, token, req, &out); err != nil {
		return HeartbeatResponse{}, err
	}
	return out, nil
}

// Complete reports the attempt's end over HTTP. The token travels as the
// bearer, not in the body.
func (c *Client) Complete(ctx context.Context, token string, comp Completion) (CompleteResponse, error) {
	comp.Token = ""
	var out CompleteResponse
	if err := comp.Validate(); err != nil {
		return CompleteResponse{}, err
	}
	if err := c.call(ctx, "complete", "/v1/attempts/complete", comp.Ref(), token, comp, &out); err != nil {
		return CompleteResponse{}, err
	}
	return out, nil
}

func (c *Client) call(ctx context.Context, op, route string, ref AttemptRef, token string, in, out any) error {
	body, err := wire.Marshal(in)
	if err != nil {
		return fmt.Errorf("%s %s: encode request: %w", op, ref, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+route, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, ref, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			// Our own caller gave up: not the server's fault, and not
			// worth a retry under the same context.
			return fmt.Errorf("%s %s: %w", op, ref, ctxErr)
		}
		return fmt.Errorf("%s %s: %w", op, ref, &transientError{err})
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, protocol.MaxAnswerBytes))
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("%s %s: read answer: %w", op, ref, ctxErr)
		}
		return fmt.Errorf("%s %s: read answer: %w", op, ref, &transientError{err})
	}
	if resp.StatusCode != http.StatusOK {
		apiErr := &APIError{Op: op, Ref: ref, Status: resp.StatusCode}
		var e struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Code != "" {
			apiErr.Code, apiErr.Message = e.Code, e.Message
		} else {
			// A proxy or gateway answered, not the API.
			apiErr.Code = "unexpected_answer"
			apiErr.Message = summarize(raw)
		}
		return apiErr
	}
	if err := json.Unmarshal(raw, out); err != nil {
		// A 200 we cannot read: the call may have taken effect, and
		// repeating it (same event id) is the safe way to learn the answer.
		return fmt.Errorf("%s %s: decode answer %q: %w", op, ref, summarize(raw), &transientError{err})
	}
	return nil
}

// summarize shortens a body for a log line or an error, its tokens
// redacted first.
func summarize(b []byte) string {
	s := redact(strings.TrimSpace(string(b)))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

var (
	// tokenMember matches a JSON "token" member's string value, closed or
	// cut off.
	tokenMember = regexp.MustCompile(`("token"\s*:\s*")(?:[^"\\]|\\.)*"?`)
	// bearerValue matches the credential of a bearer authorization.
	bearerValue = regexp.MustCompile(`(?i)(bearer\s+)[^\s",]+`)
)

// redact hides attempt tokens and bearer credentials in text that may be
// logged: an attempt's token is its credential on the worker routes.
func redact(s string) string {
	s = tokenMember.ReplaceAllString(s, `${1}[redacted]"`)
	return bearerValue.ReplaceAllString(s, `${1}[redacted]`)
}
