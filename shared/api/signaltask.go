package api

import (
	"crypto/subtle"
	"net/http"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/signals"
)

// signalTask settles a waiting signal task (docs/api.md, "Signal tasks").
// Its bearer is the API key (the operator) or the waiting attempt's token,
// which authorizes this route for that task only: the gateway lets it
// through unauthorized (as it does the worker routes) and the service
// checks the token. Order: the bearer (401), the body (400, 422, 413),
// the token against the task's attempts (401 invalid_token), then the
// state (409 stale_attempt, illegal_transition); then the run's answer.
func (h *Handler) signalTask(w http.ResponseWriter, r *http.Request) error {
	tok, ok := bearer(r)
	if !ok {
		return errf(protocol.CodeUnauthorized, "A bearer is required: send Authorization: Bearer <API key or the attempt token of task.signal_requested>.")
	}
	var body protocol.SignalRequest
	if err := decode(r, &body, false); err != nil {
		return err
	}
	if err := body.Validate(); err != nil {
		return fieldError(err)
	}
	auth := signals.Auth{Token: tok}
	if h.cfg.Auth == AuthAPIKey && subtle.ConstantTimeCompare([]byte(tok), []byte(h.cfg.APIKey)) == 1 {
		auth.Token = ""
	}
	if err := h.svc.Signals().SignalTask(r.Context(), taskKey(r), body, auth); err != nil {
		return err
	}
	return h.getRun(w, r)
}
