package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/dashboard"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// routes is the one list of what the handler serves; the OpenAPI document
// is generated from it.
func (h *Handler) routes() []route {
	return []route{
		{"GET", "/healthz", "Liveness.", authNone, h.healthz},
		{"GET", "/v1/openapi.json", "This API's OpenAPI 3 document.", authNone, h.openapi},
		{"GET", "/ui", "Redirects to the dashboard's page, /ui/index.html.", authNone, h.dashboardEntry},
		{"GET", "/metrics", "Prometheus metrics of the local stack (loopback callers only).", authNone, h.metrics},
		{"GET", "/ui/", "The web dashboard: its page and static assets (no auth; the page's calls to /v1 carry the API key or a JWT).", authNone, h.dashboard},

		{"POST", "/v1/jobs", "Create a job.", authClient, h.createJob},
		{"GET", "/v1/jobs", "List jobs.", authClient, h.listJobs},
		{"GET", "/v1/jobs/{job}", "Get a job.", authClient, h.getJob},
		{"PUT", "/v1/jobs/{job}", "Replace a job's definition (If-Match: version).", authClient, h.updateJob},
		{"DELETE", "/v1/jobs/{job}", "Delete a job; its past runs stay readable.", authClient, h.deleteJob},
		{"POST", "/v1/jobs/{job}/pause", "Pause a job's schedule.", authClient, h.pauseJob},
		{"POST", "/v1/jobs/{job}/resume", "Resume a job's schedule.", authClient, h.resumeJob},
		{"POST", "/v1/jobs/{job}/runs", "Trigger a run (Idempotency-Key optional).", authClient, h.triggerRun},
		{"POST", "/v1/jobs/{job}/backfill", "Backfill a range of the job's schedule: one run per slot, at most max_active at once.", authClient, h.createBackfill},
		{"GET", "/v1/jobs/{job}/backfills", "List a job's backfills, newest first.", authClient, h.listBackfills},
		{"GET", "/v1/backfills/{backfill}", "Get a backfill with its counts.", authClient, h.getBackfill},
		{"POST", "/v1/backfills/{backfill}/cancel", "Cancel a backfill: unreleased slots are dropped, unfinished runs cancelled.", authClient, h.cancelBackfill},

		{"GET", "/v1/runs", "List runs, newest first.", authClient, h.listRuns},
		{"GET", "/v1/runs/{run}", "Get a run with its tasks and attempts.", authClient, h.getRun},
		{"GET", "/v1/runs/{run}/tasks/{task}/history", "A task's transition history.", authClient, h.history},
		{"GET", "/v1/runs/{run}/tasks/{task}/children", "A map task's children, in index order.", authClient, h.children},
		{"POST", "/v1/runs/{run}/cancel", "Cancel a run.", authClient, h.cancelRun},
		{"POST", "/v1/runs/{run}/pause", "Pause a run's waiting tasks.", authClient, h.pauseRun},
		{"POST", "/v1/runs/{run}/resume", "Resume a run's paused tasks.", authClient, h.resumeRun},
		{"POST", "/v1/runs/{run}/tasks/{task}/cancel", "Cancel a task.", authClient, h.cancelTask},
		{"POST", "/v1/runs/{run}/tasks/{task}/retry", "Give a failed task a new attempt.", authClient, h.retryTask},
		{"POST", "/v1/runs/{run}/tasks/{task}/mark-succeeded", "Operator override: succeeded.", authClient, h.markSucceeded},
		{"POST", "/v1/runs/{run}/tasks/{task}/mark-failed", "Operator override: failed.", authClient, h.markFailed},
		{"POST", "/v1/runs/{run}/tasks/{task}/signal", "Settle a waiting signal task (bearer: API key, or the attempt token of its task.signal_requested).", authSignal, h.signalTask},

		{"GET", "/v1/events", "Notices of the local stack (runs ended, tasks failed or lost, deadlines missed), oldest first.", authClient, h.notices},
		{"POST", "/v1/events/put", "Deliver trigger events (PutEvents' body): each job whose on_event matches gets a run.", authClient, h.putEvents},

		{"POST", "/v1/attempts/claim", "Claim an attempt (bearer: attempt token, or its one-time claim nonce).", authAttempt, h.claim},
		{"POST", "/v1/attempts/heartbeat", "Renew an attempt's lease (bearer: attempt token).", authAttempt, h.heartbeat},
		{"POST", "/v1/attempts/complete", "Report an attempt's outcome (bearer: attempt token).", authAttempt, h.complete},
	}
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	return nil
}

// dashboardEntry sends /ui to the page by its file name: behind API
// Gateway the public route /ui/{proxy+} matches /ui/index.html, and a bare
// /ui/ may not match it.
func (h *Handler) dashboardEntry(w http.ResponseWriter, r *http.Request) error {
	http.Redirect(w, r, dashboard.Prefix+"index.html", http.StatusFound)
	return nil
}

func (h *Handler) dashboard(w http.ResponseWriter, r *http.Request) error {
	h.dash.ServeHTTP(w, r)
	return nil
}

// runBody is a whole run's answer. A run whose root tasks wait on other
// jobs' runs carries waiting_for.
func (h *Handler) runBody(ctx context.Context, v ledger.RunView) (protocol.RunDetail, error) {
	waiting, err := h.svc.Jobs().WaitingFor(ctx, v)
	if err != nil {
		return protocol.RunDetail{}, err
	}
	tasks := make([]protocol.Task, len(v.Tasks))
	for i, t := range v.Tasks {
		tasks[i] = renderTask(t)
	}
	if err := h.addMaps(ctx, v, tasks); err != nil {
		return protocol.RunDetail{}, err
	}
	slots, err := h.svc.Flow().WaitingForSlot(ctx, v)
	if err != nil {
		return protocol.RunDetail{}, err
	}
	for i := range tasks {
		tasks[i].WaitingForSlot = slots[tasks[i].Task]
	}
	run := renderRun(v.Run)
	run.WaitingFor = waiting
	if run.Admission, err = h.svc.Flow().Admission(ctx, v); err != nil {
		return protocol.RunDetail{}, err
	}
	return protocol.RunDetail{Run: run, Tasks: tasks}, nil
}

func (h *Handler) renderRunView(w http.ResponseWriter, r *http.Request, status int, v ledger.RunView) error {
	body, err := h.runBody(r.Context(), v)
	if err != nil {
		return err
	}
	writeJSON(w, status, body)
	return nil
}

// getRun answers the run with an ETag (a hash of the answer), and 304 Not
// Modified with no body when a GET's If-None-Match carries it: a page that
// polls an unfinished run downloads it again only when it changed. The run
// is still read; what is saved is the transfer and the client's work.
func (h *Handler) getRun(w http.ResponseWriter, r *http.Request) error {
	v, err := h.svc.ReadRun(r.Context(), r.PathValue("run"))
	if err != nil {
		return err
	}
	body, err := h.runBody(r.Context(), v)
	if err != nil {
		return err
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	etag := `"` + hex.EncodeToString(sum[:12]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	if r.Method == http.MethodGet && etagMatches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
	return nil
}

// etagMatches reads an If-None-Match list (weak tags compare equal, as RFC
// 9110 says for If-None-Match).
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

func queryLimit(r *http.Request, def, most int) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > most {
		return 0, errf(protocol.CodeInvalidField, "limit must be a whole number from 1 to %d.", most)
	}
	return n, nil
}

func (h *Handler) listRuns(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r, 50, 500)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	status := statemodel.Status(q.Get("status"))
	if status != "" {
		ok := false
		for _, s := range statemodel.AllStatuses() {
			ok = ok || s == status
		}
		if !ok {
			return errf(protocol.CodeInvalidField, "status must be one of PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED.")
		}
	}
	runs, next, err := h.svc.ListRuns(r.Context(), ledger.RunFilter{Job: q.Get("job"), Status: status, Limit: limit, Token: q.Get("next_token")})
	if err != nil {
		return err
	}
	adms, err := h.svc.Flow().ListAdmissions(r.Context(), runs)
	if err != nil {
		return err
	}
	page := protocol.RunPage{Runs: make([]protocol.Run, len(runs)), NextToken: next}
	for i, run := range runs {
		page.Runs[i] = renderRun(run)
		page.Runs[i].Admission = adms[i]
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// metrics is GET /metrics where no page is mounted: the local stack
// mounts its Prometheus page over this route (metricspage); in AWS the
// same figures are CloudWatch embedded metrics.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) error {
	return errf(protocol.CodeNotFound, "GET /metrics is served by the local stack; this deployment writes CloudWatch embedded metrics.")
}

// notices lists the kept notices from since (inclusive), oldest first.
func (h *Handler) notices(w http.ResponseWriter, r *http.Request) error {
	if h.cfg.Notices == nil {
		return errf(protocol.CodeNotFound, "This deployment publishes its notices to its EventBridge bus; GET /v1/events serves the local stack's.")
	}
	limit, err := queryLimit(r, 100, 1000)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	var since time.Time
	if v := q.Get("since"); v != "" {
		if since, err = protocol.ParseTime(v); err != nil {
			return errf(protocol.CodeInvalidField, "since must be an RFC 3339 time.")
		}
	}
	notices, next, err := h.cfg.Notices.Since(since, limit, q.Get("next_token"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, protocol.NoticePage{Notices: notices, NextToken: next})
	return nil
}

func (h *Handler) history(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r, 100, 1000)
	if err != nil {
		return err
	}
	key := ledger.InstanceKey{Run: r.PathValue("run"), Task: r.PathValue("task")}
	trs, next, trace, err := h.svc.TaskHistory(r.Context(), key, limit, r.URL.Query().Get("next_token"))
	if err != nil {
		return err
	}
	page := protocol.HistoryPage{Transitions: make([]protocol.Transition, len(trs)), NextToken: next}
	for i, tr := range trs {
		page.Transitions[i] = renderTransition(tr)
		page.Transitions[i].TraceID = trace
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

type reasonBody struct {
	Reason   string `json:"reason"`
	Operator string `json:"operator"`
}

// runAction runs an operator action on a run, then answers the run.
func (h *Handler) runAction(act func(*scheduler.Service, *http.Request, reasonBody) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var body reasonBody
		if err := decode(r, &body, true); err != nil {
			return err
		}
		if err := act(h.svc, r, body); err != nil {
			return err
		}
		return h.getRun(w, r)
	}
}

func taskKey(r *http.Request) ledger.InstanceKey {
	return ledger.InstanceKey{Run: r.PathValue("run"), Task: r.PathValue("task")}
}

func (h *Handler) cancelRun(w http.ResponseWriter, r *http.Request) error {
	return h.runAction(func(s *scheduler.Service, r *http.Request, b reasonBody) error {
		return s.CancelRun(r.Context(), r.PathValue("run"), b.Reason)
	})(w, r)
}

func (h *Handler) pauseRun(w http.ResponseWriter, r *http.Request) error {
	return h.runAction(func(s *scheduler.Service, r *http.Request, b reasonBody) error {
		return s.PauseRun(r.Context(), r.PathValue("run"), b.Reason)
	})(w, r)
}

func (h *Handler) resumeRun(w http.ResponseWriter, r *http.Request) error {
	return h.runAction(func(s *scheduler.Service, r *http.Request, b reasonBody) error {
		return s.ResumeRun(r.Context(), r.PathValue("run"), b.Reason)
	})(w, r)
}

func (h *Handler) cancelTask(w http.ResponseWriter, r *http.Request) error {
	return h.runAction(func(s *scheduler.Service, r *http.Request, b reasonBody) error {
		return s.CancelTask(r.Context(), taskKey(r), b.Reason)
	})(w, r)
}

// retryTask is an action route whose body also takes "downstream".
func (h *Handler) retryTask(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		reasonBody
		Downstream bool `json:"downstream"`
	}
	if err := decode(r, &body, true); err != nil {
		return err
	}
	retry := scheduler.Retry{Operator: body.Operator, Reason: body.Reason, Downstream: body.Downstream}
	if err := h.svc.RetryTask(r.Context(), taskKey(r), retry); err != nil {
		return err
	}
	return h.getRun(w, r)
}

func (h *Handler) mark(succeeded bool) func(http.ResponseWriter, *http.Request) error {
	return h.runAction(func(s *scheduler.Service, r *http.Request, b reasonBody) error {
		if b.Operator == "" || b.Reason == "" {
			return errf(protocol.CodeInvalidField, "An override needs both operator and reason.")
		}
		return s.MarkTask(r.Context(), taskKey(r), succeeded, b.Operator, b.Reason)
	})
}

func (h *Handler) markSucceeded(w http.ResponseWriter, r *http.Request) error {
	return h.mark(true)(w, r)
}

func (h *Handler) markFailed(w http.ResponseWriter, r *http.Request) error {
	return h.mark(false)(w, r)
}
