package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// renderJob is the job's definition plus id, version, paused, created_at,
// next_fire_time (null when nothing is scheduled) and missed_slots.
func renderJob(sj ledger.Job) (map[string]any, error) {
	out := map[string]any{}
	if err := json.Unmarshal(sj.Spec, &out); err != nil {
		return nil, err
	}
	out["id"] = sj.Name
	out["version"] = sj.Version
	out["paused"] = sj.Paused
	out["created_at"] = protocol.NullTime(sj.CreatedAt)
	out["updated_at"] = protocol.NullTime(sj.UpdatedAt)
	next := sj.NextFireAt
	if sj.Paused {
		next = time.Time{}
	}
	out["next_fire_time"] = protocol.NullTime(next)
	out["missed_slots"] = sj.MissedSlots
	return out, nil
}

func (h *Handler) writeJob(w http.ResponseWriter, status int, sj ledger.Job) error {
	v, err := renderJob(sj)
	if err != nil {
		return err
	}
	writeJSON(w, status, map[string]any{"job": v})
	return nil
}

func readBody(r *http.Request) ([]byte, error) {
	return io.ReadAll(r.Body)
}

func (h *Handler) createJob(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	dryRun, err := queryDryRun(r)
	if err != nil {
		return err
	}
	j, err := jobspec.Parse(body, h.svc.Jobs().ParseOptions())
	if err != nil {
		return err
	}
	if dryRun {
		// The definition as it would be stored, every default explicit;
		// nothing is written and the name may be taken (apply validates
		// updates this way too).
		writeJSON(w, http.StatusOK, map[string]any{"job": j})
		return nil
	}
	sj, err := h.svc.Jobs().CreateJob(r.Context(), j)
	if errors.Is(err, ledger.ErrAlreadyExists) {
		return errf(protocol.CodeConflict, "A job named %q exists already.", j.Name)
	}
	if err != nil {
		return err
	}
	return h.writeJob(w, http.StatusCreated, sj)
}

// queryDryRun reads ?dry_run=true|false (default false).
func queryDryRun(r *http.Request) (bool, error) {
	switch r.URL.Query().Get("dry_run") {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, errf(protocol.CodeInvalidField, "dry_run must be true or false.")
}

func (h *Handler) listJobs(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r, 50, 500)
	if err != nil {
		return err
	}
	jobs, next, err := h.svc.Jobs().ListJobs(r.Context(), limit, r.URL.Query().Get("next_token"))
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(jobs))
	for _, sj := range jobs {
		v, err := renderJob(sj)
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out, "next_token": strPtr(next)})
	return nil
}

func (h *Handler) getJob(w http.ResponseWriter, r *http.Request) error {
	sj, err := h.svc.Jobs().GetJob(r.Context(), r.PathValue("job"))
	if err != nil {
		return err
	}
	return h.writeJob(w, http.StatusOK, sj)
}

func (h *Handler) updateJob(w http.ResponseWriter, r *http.Request) error {
	match := strings.Trim(r.Header.Get("If-Match"), `" `)
	expected, err := strconv.ParseInt(match, 10, 64)
	if err != nil || expected < 1 {
		return errf(protocol.CodeInvalidField, "If-Match must carry the job's current version, a whole number.")
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	j, err := jobspec.ParseUpdate(r.PathValue("job"), body, h.svc.Jobs().ParseOptions())
	if err != nil {
		return err
	}
	sj, err := h.svc.Jobs().UpdateJob(r.Context(), j, expected)
	if err != nil {
		return err
	}
	return h.writeJob(w, http.StatusOK, sj)
}

func (h *Handler) deleteJob(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("job")
	err := h.svc.Jobs().DeleteJob(r.Context(), name)
	if errors.Is(err, ledger.ErrUnfinishedRuns) {
		return errf(protocol.CodeConflict, "Job %q has unfinished runs; cancel them first.", name)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) pauseJob(w http.ResponseWriter, r *http.Request) error {
	sj, err := h.svc.Jobs().PauseJob(r.Context(), r.PathValue("job"))
	if err != nil {
		return err
	}
	return h.writeJob(w, http.StatusOK, sj)
}

// resumeJob resumes the schedule; the slots that fell while the job was
// paused are caught up by its policy before the answer.
func (h *Handler) resumeJob(w http.ResponseWriter, r *http.Request) error {
	sj, err := h.svc.Triggers().ResumeJob(r.Context(), r.PathValue("job"))
	if errors.Is(err, ledger.ErrConflict) {
		return errf(protocol.CodeConflict, "Job %q kept changing while it was being resumed; resume it again.", r.PathValue("job"))
	}
	if err != nil {
		return err
	}
	return h.writeJob(w, http.StatusOK, sj)
}

// checkParams checks a run's params (a JSON object, at most 64 KiB
// compact) and returns them compact, as they are stored and queued.
func checkParams(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var obj map[string]any
	if json.Unmarshal(raw, &obj) != nil {
		return nil, errf(protocol.CodeInvalidField, "params must be a JSON object.")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, errf(protocol.CodeInvalidJSON, "params is not valid JSON.")
	}
	if compact.Len() > jobspec.MaxPayloadBytes {
		return nil, errf(protocol.CodePayloadTooLarge, "params is %d bytes of compact JSON, over the limit of %d (64 KiB).", compact.Len(), jobspec.MaxPayloadBytes)
	}
	return compact.Bytes(), nil
}

type triggerBody struct {
	Params      json.RawMessage `json:"params"`
	LogicalTime *string         `json:"logical_time"`
	Priority    *int            `json:"priority"`
}

// triggerRun answers 201 with a new run, or 200 with the run an earlier
// request with the same Idempotency-Key created (the key is scoped to the
// job and kept 24 h; another body with it is 409 conflict).
func (h *Handler) triggerRun(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b triggerBody
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	if err := decode(r, &b, true); err != nil {
		return err
	}
	params, err := checkParams(b.Params)
	if err != nil {
		return err
	}
	b.Params = params
	req := scheduler.TriggerRequest{Job: r.PathValue("job"), Params: b.Params, TraceID: traceIDOf(r)}
	if req.Priority, err = bodyPriority(b.Priority); err != nil {
		return err
	}
	if b.LogicalTime != nil {
		t, err := protocol.ParseTime(*b.LogicalTime)
		if err != nil {
			return errf(protocol.CodeInvalidField, "logical_time must be an RFC 3339 time.")
		}
		if !statemodel.LogicalTimeInRange(t) {
			return errf(protocol.CodeInvalidField, "logical_time must be in %s, not %s.", statemodel.LogicalTimeRange, protocol.FormatTime(t))
		}
		req.LogicalTime = t
	}
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		if len(key) > 255 {
			return errf(protocol.CodeInvalidField, "Idempotency-Key is at most 255 characters.")
		}
		sum := sha256.Sum256(body)
		req.IdempotencyKey, req.BodyHash = key, hex.EncodeToString(sum[:])
	}
	v, created, err := h.svc.Triggers().TriggerRun(r.Context(), req)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	return h.renderRunView(w, r, status, v)
}
