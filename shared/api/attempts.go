package api

import (
	"errors"
	"net/http"

	"github.com/runledger/runledger/shared/protocol"
)

// attemptToken checks the order docs/api.md fixes: the bearer first (401
// unauthorized), then the body's shape and limits (400, 422, 413; the
// event id included), then the token against the attempt (401
// invalid_token, in the service), then the state (409).
func attemptToken(r *http.Request) (string, error) {
	tok, ok := bearer(r)
	if !ok {
		return "", errf(protocol.CodeUnauthorized, "The attempt token is required: send Authorization: Bearer <token> from the envelope.")
	}
	return tok, nil
}

// fieldError answers a *protocol.FieldError: 413 payload_too_large for a
// field over its limit, 422 invalid_field for a malformed one.
func fieldError(err error) error {
	var fe *protocol.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	if fe.TooLarge {
		return errf(protocol.CodePayloadTooLarge, "%s", fe.Message)
	}
	return errf(protocol.CodeInvalidField, "%s", fe.Message)
}

// The worker routes read their bodies with package protocol's types and
// check them with its Validate methods, the checks the SDK makes before
// sending and the events queue's reader makes too.

func (h *Handler) claim(w http.ResponseWriter, r *http.Request) error {
	tok, err := attemptToken(r)
	if err != nil {
		return err
	}
	var b protocol.ClaimRequest
	if err := decode(r, &b, false); err != nil {
		return err
	}
	if err := b.Validate(); err != nil {
		return fieldError(err)
	}
	res, err := h.svc.Workers().Claim(r.Context(), b.Ref(), tok, b.WorkerID, b.EventID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (h *Handler) heartbeat(w http.ResponseWriter, r *http.Request) error {
	tok, err := attemptToken(r)
	if err != nil {
		return err
	}
	var b protocol.HeartbeatRequest
	if err := decode(r, &b, false); err != nil {
		return err
	}
	if err := b.Validate(); err != nil {
		return fieldError(err)
	}
	res, err := h.svc.Workers().Heartbeat(r.Context(), b.Ref(), tok, b.EventID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// complete reads the completion; the body's token (the events-queue form
// carries one) is ignored: the bearer is the token here.
func (h *Handler) complete(w http.ResponseWriter, r *http.Request) error {
	tok, err := attemptToken(r)
	if err != nil {
		return err
	}
	var c protocol.Completion
	if err := decode(r, &c, false); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return fieldError(err)
	}
	res, err := h.svc.Workers().Complete(r.Context(), c, tok)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
