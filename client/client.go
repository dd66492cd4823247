// Package client is a typed Go client of runledger's HTTP API (docs/api.md;
// the OpenAPI document the API serves at /v1/openapi.json): jobs, runs,
// their tasks' history and the operator actions.
//
// New finds the endpoint and the credentials by itself (see Options): the
// local stack that `make run` started (its .runledger/local.json, API key),
// or a deployed stack (RUNLEDGER_API_URL or the CDK stack's outputs, IAM
// with SigV4 and the AWS SDK's standard credential chain).
//
// Every error answer of the API is an *Error carrying the server's code and
// message; test it with ErrorCode or errors.As.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/protocol"
)

// Client calls one runledger API. It is safe for concurrent use.
type Client struct {
	base string
	http *http.Client
	auth authenticator
}

// Endpoint is the API's base URL the client calls, without a trailing
// slash ("http://127.0.0.1:8080").
func (c *Client) Endpoint() string { return c.base }

// Error is an error answer of the API: the HTTP status and the server's
// {"code", "message"}. Code is empty when the answer was not the API's own
// (API Gateway's 403 for an unsigned request, a proxy's 502).
type Error struct {
	// Op names the call and its key: "create job nightly", "get run 01J...".
	Op      string
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	code := e.Code
	if code == "" {
		code = strings.ToLower(strings.ReplaceAll(http.StatusText(e.Status), " ", "_"))
	}
	return fmt.Sprintf("%s: %d %s: %s", e.Op, e.Status, code, e.Message)
}

// Class is the class of the answer's code (fault.ClassOf reads it
// through wrapping); Internal when Code is empty.
func (e *Error) Class() fault.Class { return protocol.Code(e.Code).Class() }

// ErrorCode is the API's error code of err ("not_found",
// "version_conflict", ...), or "" when err is not an error answer of the
// API (a network failure, a bad option).
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// The error codes a caller of this client most often tests for, as the
// strings Error.Code and ErrorCode carry. Every code the API answers is
// declared once, in the protocol package (protocol.Codes).
const (
	CodeInvalidJSON       = string(protocol.CodeInvalidJSON)
	CodeInvalidField      = string(protocol.CodeInvalidField)
	CodeInvalidCron       = string(protocol.CodeInvalidCron)
	CodeInvalidTimezone   = string(protocol.CodeInvalidTimezone)
	CodeDependencyCycle   = string(protocol.CodeDependencyCycle)
	CodePayloadTooLarge   = string(protocol.CodePayloadTooLarge)
	CodeNotFound          = string(protocol.CodeNotFound)
	CodeUnauthorized      = string(protocol.CodeUnauthorized)
	CodeVersionConflict   = string(protocol.CodeVersionConflict)
	CodeConflict          = string(protocol.CodeConflict)
	CodeIllegalTransition = string(protocol.CodeIllegalTransition)
	CodeInternal          = string(protocol.CodeInternal)
	// CodeStaleAttempt: a signal with an older attempt's token.
	CodeStaleAttempt = string(protocol.CodeStaleAttempt)
	// CodeInvalidToken: a signal with a token that is no attempt's of the task.
	CodeInvalidToken = string(protocol.CodeInvalidToken)
)

// maxAnswerBytes bounds what the client reads of one answer.
const maxAnswerBytes = 8 << 20

// call is one request: the operation's name for errors, the method and
// path (already escaped), query, headers and a body to JSON-encode (nil:
// none).
type call struct {
	op     string
	method string
	path   string
	query  url.Values
	header http.Header
	body   any
}

// do sends the call and decodes a 2xx answer into out (nil: discard it).
// It answers the status, so callers can tell 200 from 201.
func (c *Client) do(ctx context.Context, cl call, out any) (int, error) {
	var body []byte
	if cl.body != nil {
		var err error
		if body, err = encodeBody(cl.body); err != nil {
			return 0, fmt.Errorf("%s: encode the body: %w", cl.op, err)
		}
	}
	u := c.base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", cl.op, err)
	}
	for k, vs := range cl.header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := c.auth.authorize(ctx, req, body); err != nil {
		return 0, fmt.Errorf("%s: %w", cl.op, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", cl.op, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s: read the answer: %w", cl.op, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, answerError(cl.op, resp.StatusCode, raw)
	}
	if out != nil && len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s: decode the answer: %w", cl.op, err)
		}
	}
	return resp.StatusCode, nil
}

// encodeBody encodes a request body: raw JSON ([]byte, json.RawMessage)
// is sent as it is, anything else is JSON-encoded.
func encodeBody(v any) ([]byte, error) {
	switch b := v.(type) {
	case json.RawMessage:
		return b, nil
	case []byte:
		return b, nil
	}
	return json.Marshal(v)
}

func answerError(op string, status int, raw []byte) *Error {
	e := &Error{Op: op, Status: status}
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &body) == nil {
		e.Code, e.Message = body.Code, body.Message
	}
	if e.Message == "" {
		e.Message = strings.TrimSpace(string(raw))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200] + "..."
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// seg escapes one path segment (a job name, run id or task id).
func seg(s string) string { return url.PathEscape(s) }
