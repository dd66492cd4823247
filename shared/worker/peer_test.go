package worker_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/runledger/runledger/shared/worker"
)

// peer is the protocol peer of these tests: an in-memory implementation of
// the worker routes of docs/api.md (claim, heartbeat, complete), in the order
// the contract fixes: bearer present, body (a valid event id included),
// token matches the attempt, then state.
// The real service is tested end to end elsewhere; this one lets the tests
// arrange any answer.
type peer struct {
	mu       sync.Mutex
	attempts map[worker.AttemptRef]*peerAttempt
	// latest is the current attempt number of each run/task.
	latest map[[2]string]int
	// unavailable answers 503 to claims of these attempts.
	unavailable map[worker.AttemptRef]bool
	calls       []peerCall
	completions map[string]string // event id -> result
	// completeFault, when set for an attempt, is the status and code its
	// completions are answered with instead of the contract's answer.
	completeFault map[worker.AttemptRef][2]string
}

type peerAttempt struct {
	token string
	// nonce, when set, is also a claim's bearer while the attempt is
	// queued (the claim nonce of a started process).
	nonce      string
	state      string // queued, running, cancelling, cancelled, succeeded, failed
	claimedBy  string
	claimEvent string
	// envelope, when set, is the claim answer's envelope.
	envelope map[string]any
}

type peerCall struct {
	Route    string // claim, heartbeat, complete
	Ref      worker.AttemptRef
	Auth     string
	WorkerID string
	EventID  string
	Status   int
	Code     string
	Outcome  string // complete
	ExitCode *int   // complete
}

func newPeer(t *testing.T) (*peer, *httptest.Server) {
	p := &peer{
		attempts:    map[worker.AttemptRef]*peerAttempt{},
		latest:      map[[2]string]int{},
		unavailable: map[worker.AttemptRef]bool{},
		completions: map[string]string{},

		completeFault: map[worker.AttemptRef][2]string{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/attempts/claim", p.claim)
	mux.HandleFunc("POST /v1/attempts/heartbeat", p.heartbeat)
	mux.HandleFunc("POST /v1/attempts/complete", p.complete)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return p, srv
}

// add makes attempt ref QUEUED with token and the current attempt.
func (p *peer) add(ref worker.AttemptRef, token string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts[ref] = &peerAttempt{token: token, state: "queued"}
	p.latest[[2]string{ref.Run, ref.Task}] = ref.Attempt
}

// store makes env's attempt QUEUED with env as its stored envelope, which
// the claim answers with, as the scheduler does.
func (p *peer) store(t *testing.T, env worker.Envelope) {
	t.Helper()
	raw, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	p.add(env.Ref(), env.Token)
	p.setEnvelope(env.Ref(), m)
}

// setEnvelope makes the claim answer of ref carry env (the claim of a
// process that has only the attempt's name and token).
func (p *peer) setEnvelope(ref worker.AttemptRef, env map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts[ref].envelope = env
}

// setNonce makes nonce a bearer of ref's claim while it is queued.
func (p *peer) setNonce(ref worker.AttemptRef, nonce string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts[ref].nonce = nonce
}

// set changes an attempt's state (and its claim, for "running").
func (p *peer) set(ref worker.AttemptRef, state, claimedBy string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.attempts[ref]
	a.state = state
	if claimedBy != "" {
		a.claimedBy, a.claimEvent = claimedBy, "other-event"
	}
}

// cancel requests cancel as the API does: queued becomes cancelled at
// once, running becomes cancelling.
func (p *peer) cancel(ref worker.AttemptRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.attempts[ref]
	switch a.state {
	case "queued":
		a.state = "cancelled"
	case "running":
		a.state = "cancelling"
	}
}

// supersede makes a newer attempt current, so ref becomes stale.
func (p *peer) supersede(ref worker.AttemptRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latest[[2]string{ref.Run, ref.Task}] = ref.Attempt + 1
}

// failCompletes makes the complete route answer status and code for ref.
func (p *peer) failCompletes(ref worker.AttemptRef, status int, code string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.completeFault[ref] = [2]string{strconv.Itoa(status), code}
}

func (p *peer) setUnavailable(ref worker.AttemptRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unavailable[ref] = true
}

// callsOf returns the calls of one route for one attempt.
func (p *peer) callsOf(route string, ref worker.AttemptRef) []peerCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []peerCall
	for _, c := range p.calls {
		if c.Route == route && c.Ref == ref {
			out = append(out, c)
		}
	}
	return out
}

type peerBody struct {
	Run      string `json:"run"`
	Task     string `json:"task"`
	Attempt  int    `json:"attempt"`
	WorkerID string `json:"worker_id"`
	EventID  string `json:"event_id"`
	Outcome  string `json:"outcome"`
	ExitCode *int   `json:"exit_code"`
	Token    string `json:"token"`
}

// begin decodes the body and runs the checks every route shares. It
// answers and returns nil when a check fails.
func (p *peer) begin(w http.ResponseWriter, r *http.Request, route string) (*peerCall, *peerAttempt, peerBody) {
	var b peerBody
	auth := r.Header.Get("Authorization")
	call := &peerCall{Route: route, Auth: auth}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		p.answerLocked(w, call, http.StatusBadRequest, "invalid_json", nil)
		return nil, nil, b
	}
	call.Ref = worker.AttemptRef{Run: b.Run, Task: b.Task, Attempt: b.Attempt}
	call.WorkerID, call.EventID = b.WorkerID, b.EventID
	call.Outcome, call.ExitCode = b.Outcome, b.ExitCode
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || token == "" {
		p.answerLocked(w, call, http.StatusUnauthorized, "unauthorized", nil)
		return nil, nil, b
	}
	if worker.CheckEventID(b.EventID) != nil {
		p.answerLocked(w, call, http.StatusUnprocessableEntity, "invalid_field", nil)
		return nil, nil, b
	}
	if b.Token != "" {
		// The token travels as the bearer, never in the body.
		p.answerLocked(w, call, http.StatusBadRequest, "invalid_field", nil)
		return nil, nil, b
	}
	a := p.attempts[call.Ref]
	byNonce := a != nil && route == "claim" && a.nonce != "" && token == a.nonce && a.state == "queued"
	if a == nil || (a.token != token && !byNonce) {
		p.answerLocked(w, call, http.StatusUnauthorized, "invalid_token", nil)
		return nil, nil, b
	}
	return call, a, b
}

func (p *peer) claim(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	call, a, b := p.begin(w, r, "claim")
	if call == nil {
		return
	}
	switch {
	case p.unavailable[call.Ref]:
		p.answerLocked(w, call, http.StatusServiceUnavailable, "unavailable", nil)
	case call.Ref.Attempt < p.latest[[2]string{call.Ref.Run, call.Ref.Task}]:
		p.answerLocked(w, call, http.StatusConflict, "stale_attempt", nil)
	case a.state == "queued":
		a.state, a.claimedBy, a.claimEvent = "running", b.WorkerID, b.EventID
		p.answerLocked(w, call, http.StatusOK, "", map[string]any{"claimed": true, "lease_expires_at": "2030-01-01T00:00:00.000Z", "envelope": a.envelope})
	case a.state == "running" && a.claimEvent == b.EventID:
		p.answerLocked(w, call, http.StatusOK, "", map[string]any{"claimed": true, "lease_expires_at": "2030-01-01T00:00:00.000Z", "envelope": a.envelope})
	case a.state == "running":
		p.answerLocked(w, call, http.StatusConflict, "already_claimed", nil)
	default:
		p.answerLocked(w, call, http.StatusConflict, "illegal_transition", nil)
	}
}

func (p *peer) heartbeat(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	call, a, _ := p.begin(w, r, "heartbeat")
	if call == nil {
		return
	}
	switch {
	case call.Ref.Attempt < p.latest[[2]string{call.Ref.Run, call.Ref.Task}]:
		p.answerLocked(w, call, http.StatusConflict, "stale_attempt", nil)
	case a.state == "running" || a.state == "cancelling":
		p.answerLocked(w, call, http.StatusOK, "", map[string]any{"cancel_requested": a.state == "cancelling", "lease_expires_at": "2030-01-01T00:00:00.000Z"})
	default:
		p.answerLocked(w, call, http.StatusConflict, "illegal_transition", nil)
	}
}

func (p *peer) complete(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	call, a, b := p.begin(w, r, "complete")
	if call == nil {
		return
	}
	if fault, ok := p.completeFault[call.Ref]; ok {
		status, _ := strconv.Atoi(fault[0])
		p.answerLocked(w, call, status, fault[1], nil)
		return
	}
	if _, ok := p.completions[b.EventID]; ok {
		p.answerLocked(w, call, http.StatusOK, "", map[string]any{"result": "duplicate", "state": a.state})
		return
	}
	switch {
	case call.Ref.Attempt < p.latest[[2]string{call.Ref.Run, call.Ref.Task}]:
		p.completions[b.EventID] = "stale"
		p.answerLocked(w, call, http.StatusOK, "", map[string]any{"result": "stale", "state": a.state})
	case a.state == "running" || a.state == "cancelling":
		a.state = b.Outcome
		p.completions[b.EventID] = "applied"
		p.answerLocked(w, call, http.StatusOK, "", map[string]any{"result": "applied", "state": a.state})
	default:
		p.answerLocked(w, call, http.StatusConflict, "illegal_transition", nil)
	}
}

func (p *peer) answerLocked(w http.ResponseWriter, call *peerCall, status int, code string, body map[string]any) {
	call.Status, call.Code = status, code
	p.calls = append(p.calls, *call)
	if body == nil {
		body = map[string]any{"code": code, "message": "The test peer refused the call."}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}
