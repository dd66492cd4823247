package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/triggers"
	"github.com/runledger/runledger/statemodel"
)

// The backfill routes (docs/api.md, "Backfill").

type backfillBody struct {
	From      *string         `json:"from"`
	To        *string         `json:"to"`
	MaxActive *int            `json:"max_active"`
	Params    json.RawMessage `json:"params"`
	Priority  *int            `json:"priority"`
}

// createBackfill answers 201 with the new backfill at once: its first
// runs are released before the answer, the rest as runs end.
func (h *Handler) createBackfill(w http.ResponseWriter, r *http.Request) error {
	var b backfillBody
	if err := decode(r, &b, false); err != nil {
		return err
	}
	req := triggers.BackfillRequest{Job: r.PathValue("job"), MaxActive: triggers.DefaultBackfillMaxActive}
	var err error
	if req.From, err = requiredTime("from", b.From); err != nil {
		return err
	}
	if req.To, err = requiredTime("to", b.To); err != nil {
		return err
	}
	if b.MaxActive != nil {
		// An explicit 0 is refused as every value outside 1..100 is (the
		// service reads a zero MaxActive as "absent").
		if err := triggers.CheckBackfillMaxActive(*b.MaxActive); err != nil {
			return err
		}
		req.MaxActive = *b.MaxActive
	}
	params, err := checkParams(b.Params)
	if err != nil {
		return err
	}
	req.Params = params
	if req.Priority, err = bodyPriority(b.Priority); err != nil {
		return err
	}
	bf, err := h.svc.Triggers().CreateBackfill(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, protocol.BackfillAnswer{Backfill: renderBackfill(bf)})
	return nil
}

// requiredTime reads a required RFC 3339 time field.
func requiredTime(name string, v *string) (time.Time, error) {
	if v == nil {
		return time.Time{}, errf(protocol.CodeInvalidField, "%s is required: an RFC 3339 time.", name)
	}
	t, err := protocol.ParseTime(*v)
	if err != nil {
		return time.Time{}, errf(protocol.CodeInvalidField, "%s must be an RFC 3339 time.", name)
	}
	return t, nil
}

func (h *Handler) getBackfill(w http.ResponseWriter, r *http.Request) error {
	bf, err := h.svc.Triggers().GetBackfill(r.Context(), r.PathValue("backfill"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, protocol.BackfillAnswer{Backfill: renderBackfill(bf)})
	return nil
}

func (h *Handler) listBackfills(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r, ledger.DefaultListLimit, ledger.MaxListLimit)
	if err != nil {
		return err
	}
	list, next, err := h.svc.Triggers().ListBackfills(r.Context(), r.PathValue("job"), limit, r.URL.Query().Get("next_token"))
	if err != nil {
		return err
	}
	page := protocol.BackfillPage{Backfills: make([]protocol.Backfill, len(list)), NextToken: next}
	for i, bf := range list {
		page.Backfills[i] = renderBackfill(bf)
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

func (h *Handler) cancelBackfill(w http.ResponseWriter, r *http.Request) error {
	var body reasonBody
	if err := decode(r, &body, true); err != nil {
		return err
	}
	bf, err := h.svc.Triggers().CancelBackfill(r.Context(), r.PathValue("backfill"), body.Reason)
	if errors.Is(err, statemodel.ErrIllegalTransition) {
		return errf(protocol.CodeIllegalTransition, "The backfill has ended; there is nothing left to cancel.")
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, protocol.BackfillAnswer{Backfill: renderBackfill(bf)})
	return nil
}

func renderBackfill(b ledger.Backfill) protocol.Backfill {
	params := json.RawMessage(b.Params)
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	return protocol.Backfill{
		ID: b.ID, Job: b.Job, From: b.From, To: b.To, MaxActive: b.MaxActive, Params: params,
		Slots: b.Slots, Created: b.Created(), Existing: b.Existing, State: b.State,
		CreatedAt: b.CreatedAt, EndedAt: b.EndedAt,
		Counts: protocol.BackfillCounts{
			Pending: len(b.Pending), Running: len(b.Active),
			Succeeded: b.Succeeded, Failed: b.Failed, Cancelled: b.Cancelled,
		},
	}
}
