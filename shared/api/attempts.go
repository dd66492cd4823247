package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/worker"
)

// attemptToken checks the order docs/api.md fixes: the bearer first (401
// unauthorized), then the body's shape and limits (400, 422, 413; the
// event id included), then the token against the attempt (401
// invalid_token, in the service), then the state (409).
func attemptToken(r *http.Request) (string, error) {
	tok, ok := bearer(r)
	if !ok {
		return "", errf(http.StatusUnauthorized, "unauthorized", "The attempt token is required: send Authorization: Bearer <token> from the envelope.")
	}
	return tok, nil
}

func checkRef(ref scheduler.AttemptRef) error {
	if ref.Run == "" || ref.Task == "" || ref.Attempt < 1 {
		return errf(http.StatusUnprocessableEntity, "invalid_field", "run, task and attempt (1 or more) are required.")
	}
	return nil
}

// fieldError answers a *worker.FieldError: 413 payload_too_large for a
// field over its limit, 422 invalid_field for a malformed one.
func fieldError(err error) error {
	var fe *worker.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	if fe.TooLarge {
		return errf(http.StatusRequestEntityTooLarge, "payload_too_large", "%s", fe.Message)
	}
	return errf(http.StatusUnprocessableEntity, "invalid_field", "%s", fe.Message)
}

type claimBody struct {
	scheduler.AttemptRef
	WorkerID string `json:"worker_id"`
	EventID  string `json:"event_id"`
}

func (h *Handler) claim(w http.ResponseWriter, r *http.Request) error {
	tok, err := attemptToken(r)
	if err != nil {
		return err
	}
	var b claimBody
	if err := decode(r, &b, false); err != nil {
		return err
	}
	if err := checkRef(b.AttemptRef); err != nil {
		return err
	}
	if b.WorkerID == "" {
		return errf(http.StatusUnprocessableEntity, "invalid_field", "worker_id is required.")
	}
	if err := worker.CheckEventID(b.EventID); err != nil {
		return fieldError(err)
	}
	res, err := h.svc.Claim(r.Context(), b.AttemptRef, tok, b.WorkerID, b.EventID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"claimed": true, "lease_expires_at": scheduler.FormatTime(res.LeaseExpiresAt)})
	return nil
}

type heartbeatBody struct {
	scheduler.AttemptRef
	EventID string `json:"event_id"`
}

func (h *Handler) heartbeat(w http.ResponseWriter, r *http.Request) error {
	tok, err := attemptToken(r)
	if err != nil {
		return err
	}
	var b heartbeatBody
	if err := decode(r, &b, false); err != nil {
		return err
	}
	if err := checkRef(b.AttemptRef); err != nil {
		return err
	}
	if err := worker.CheckEventID(b.EventID); err != nil {
		return fieldError(err)
	}
	res, err := h.svc.Heartbeat(r.Context(), b.AttemptRef, tok, b.EventID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"cancel_requested": res.CancelRequested, "lease_expires_at": scheduler.FormatTime(res.LeaseExpiresAt), "state": res.State,
	})
	return nil
}

type completeBody struct {
	scheduler.AttemptRef
	EventID       string  `json:"event_id"`
	Outcome       string  `json:"outcome"`
	ExitCode      *int    `json:"exit_code"`
	ErrorCategory string  `json:"error_category"`
	Retryable     *bool   `json:"retryable"`
	OutputRef     string  `json:"output_ref"`
	Reason        string  `json:"reason"`
	EventTime     *string `json:"event_time"`
	Token         string  `json:"token"` // the events-queue form carries it; ignored here
}

func (h *Handler) complete(w http.ResponseWriter, r *http.Request) error {
	tok, err := attemptToken(r)
	if err != nil {
		return err
	}
	var b completeBody
	if err := decode(r, &b, false); err != nil {
		return err
	}
	if err := checkRef(b.AttemptRef); err != nil {
		return err
	}
	if err := worker.CheckEventID(b.EventID); err != nil {
		return fieldError(err)
	}
	switch b.Outcome {
	case "succeeded", "failed", "cancelled":
	default:
		return errf(http.StatusUnprocessableEntity, "invalid_field", "outcome must be succeeded, failed or cancelled.")
	}
	c := scheduler.Completion{AttemptRef: b.AttemptRef, EventID: b.EventID, Outcome: b.Outcome, ExitCode: b.ExitCode,
		ErrorCategory: b.ErrorCategory, Retryable: b.Retryable, OutputRef: b.OutputRef, Reason: b.Reason}
	if err := c.CheckFields(); err != nil {
		return fieldError(err)
	}
	if b.EventTime != nil {
		t, err := time.Parse(time.RFC3339Nano, *b.EventTime)
		if err != nil {
			return errf(http.StatusUnprocessableEntity, "invalid_field", "event_time must be an RFC 3339 time.")
		}
		c.EventTime = t
	}
	res, err := h.svc.Complete(r.Context(), c, tok)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": res.Result, "state": res.State})
	return nil
}
