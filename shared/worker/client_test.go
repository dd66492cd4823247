package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
)

func TestClientErrorMapping(t *testing.T) {
	t.Parallel()
	sentinels := []error{worker.ErrAlreadyClaimed, worker.ErrStaleAttempt, worker.ErrIllegalTransition, worker.ErrInvalidToken, worker.ErrTransient}
	cases := []struct {
		name   string
		status int
		body   string
		want   error // the one sentinel it matches; nil: none (permanent)
	}{
		{"already claimed", 409, `{"code":"already_claimed","message":"m"}`, worker.ErrAlreadyClaimed},
		{"stale attempt", 409, `{"code":"stale_attempt","message":"m"}`, worker.ErrStaleAttempt},
		{"illegal transition", 409, `{"code":"illegal_transition","message":"m"}`, worker.ErrIllegalTransition},
		{"invalid token", 401, `{"code":"invalid_token","message":"m"}`, worker.ErrInvalidToken},
		{"unauthorized is permanent", 401, `{"code":"unauthorized","message":"m"}`, nil},
		{"other conflict is permanent", 409, `{"code":"conflict","message":"m"}`, nil},
		{"bad request is permanent", 400, `{"code":"invalid_json","message":"m"}`, nil},
		{"not found is permanent", 404, `{"code":"not_found","message":"m"}`, nil},
		{"server error", 500, `{"code":"internal","message":"m"}`, worker.ErrTransient},
		{"gateway page", 502, `<html>bad gateway</html>`, worker.ErrTransient},
		{"throttled", 429, `{"code":"throttled","message":"m"}`, worker.ErrTransient},
		{"unreadable 200", 200, `{"claimed":`, worker.ErrTransient},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			c := worker.NewClient(srv.URL, srv.Client())
			_, err := c.Claim(t.Context(), "tok", worker.ClaimRequest{Run: "r", Task: "t", Attempt: 2, WorkerID: "w@b", EventID: "e"})
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range sentinels {
				if got := errors.Is(err, s); got != (s == tc.want) {
					t.Errorf("errors.Is(%v, %v) = %v", err, s, got)
				}
			}
			if worker.IsTransient(err) != (tc.want == worker.ErrTransient) {
				t.Errorf("IsTransient(%v) = %v", err, !(tc.want == worker.ErrTransient))
			}
			var apiErr *worker.APIError
			if tc.status != 200 {
				if !errors.As(err, &apiErr) || apiErr.Status != tc.status || apiErr.Op != "claim" || apiErr.Ref.String() != "r/t#2" {
					t.Errorf("error %v: want an *APIError for claim r/t#2 with status %d", err, tc.status)
				}
			}
		})
	}
}

func TestClientNetworkAndContextErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens any more

	c := worker.NewClient(url, &http.Client{Timeout: 5 * time.Second})
	_, err := c.Heartbeat(t.Context(), "tok", worker.HeartbeatRequest{Run: "r", Task: "t", Attempt: 1, EventID: "h1"})
	if !worker.IsTransient(err) {
		t.Errorf("connection refused: %v, want transient", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c.Heartbeat(ctx, "tok", worker.HeartbeatRequest{Run: "r", Task: "t", Attempt: 1, EventID: "h1"})
	if !errors.Is(err, context.Canceled) || worker.IsTransient(err) {
		t.Errorf("cancelled call: %v, want context.Canceled, not transient", err)
	}
}

func TestClientAgainstPeer(t *testing.T) {
	t.Parallel()
	p, srv := newPeer(t)
	c := worker.NewClient(srv.URL+"/", srv.Client()) // a trailing slash is fine
	ref := worker.AttemptRef{Run: "run-client", Task: "main", Attempt: 1}
	p.add(ref, "secret")

	if _, err := c.Claim(t.Context(), "", worker.ClaimRequest{Run: ref.Run, Task: ref.Task, Attempt: 1, WorkerID: "a@1", EventID: "e1"}); err == nil || errors.Is(err, worker.ErrInvalidToken) {
		t.Errorf("claim without bearer: %v, want unauthorized (not invalid_token)", err)
	}
	if _, err := c.Claim(t.Context(), "wrong", worker.ClaimRequest{Run: ref.Run, Task: ref.Task, Attempt: 1, WorkerID: "a@1", EventID: "e1"}); !errors.Is(err, worker.ErrInvalidToken) {
		t.Errorf("claim with a wrong token: %v, want invalid_token", err)
	}
	got, err := c.Claim(t.Context(), "secret", worker.ClaimRequest{Run: ref.Run, Task: ref.Task, Attempt: 1, WorkerID: "a@1", EventID: "e1"})
	if err != nil || !got.Claimed || got.LeaseExpiresAt.IsZero() {
		t.Fatalf("claim = %+v, %v", got, err)
	}
	if _, err := c.Claim(t.Context(), "secret", worker.ClaimRequest{Run: ref.Run, Task: ref.Task, Attempt: 1, WorkerID: "a@1", EventID: "e1"}); err != nil {
		t.Errorf("the winner repeating its claim: %v, want 200 again", err)
	}
	if _, err := c.Claim(t.Context(), "secret", worker.ClaimRequest{Run: ref.Run, Task: ref.Task, Attempt: 1, WorkerID: "b@2", EventID: "e2"}); !errors.Is(err, worker.ErrAlreadyClaimed) {
		t.Errorf("a second claim: %v, want already_claimed", err)
	}
	hb, err := c.Heartbeat(t.Context(), "secret", worker.HeartbeatRequest{Run: ref.Run, Task: ref.Task, Attempt: 1, EventID: "h1"})
	if err != nil || hb.CancelRequested {
		t.Errorf("heartbeat = %+v, %v", hb, err)
	}
	p.cancel(ref)
	hb, err = c.Heartbeat(t.Context(), "secret", worker.HeartbeatRequest{Run: ref.Run, Task: ref.Task, Attempt: 1, EventID: "h2"})
	if err != nil || !hb.CancelRequested {
		t.Errorf("heartbeat while cancelling = %+v, %v; want cancel_requested", hb, err)
	}

	comp := worker.Completion{Run: ref.Run, Task: ref.Task, Attempt: 1, EventID: "c1", Outcome: worker.OutcomeCancelled,
		EventTime: time.Now(), Token: "secret"}
	res, err := c.Complete(t.Context(), "secret", comp)
	if err != nil || res.Result != worker.ResultApplied || res.State != "cancelled" {
		t.Errorf("complete = %+v, %v; want applied, cancelled", res, err)
	}
	res, err = c.Complete(t.Context(), "secret", comp)
	if err != nil || res.Result != worker.ResultDuplicate {
		t.Errorf("complete again = %+v, %v; want duplicate", res, err)
	}
	calls := p.callsOf("complete", ref)
	if len(calls) != 2 || calls[0].Auth != "Bearer secret" {
		t.Errorf("complete calls = %+v, want two with the bearer (and no token in the body: the peer refuses that)", calls)
	}
}

func TestClientSendsJSON(t *testing.T) {
	t.Parallel()
	type request struct {
		path, contentType string
		body              map[string]any
	}
	requests := make(chan request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := request{path: r.URL.Path, contentType: r.Header.Get("Content-Type")}
		json.NewDecoder(r.Body).Decode(&req.body)
		requests <- req
		io.WriteString(w, `{"result":"stale","state":"RUNNING"}`)
	}))
	defer srv.Close()
	c := worker.NewClient(srv.URL+"/prefix", nil)
	exit := 0
	no := false
	_, err := c.Complete(t.Context(), "tok", worker.Completion{Run: "r", Task: "t", Attempt: 1, EventID: "e", Outcome: worker.OutcomeFailed,
		ExitCode: &exit, ErrorCategory: "timeout", Retryable: &no, OutputRef: "s3://x",
		EventTime: time.Date(2026, 1, 2, 3, 4, 5, 678_900_000, time.FixedZone("x", 3600)), Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	req := <-requests
	got := req.body
	if req.path != "/prefix/v1/attempts/complete" {
		t.Errorf("path = %q, want the prefix kept", req.path)
	}
	want := map[string]any{"run": "r", "task": "t", "attempt": 1.0, "event_id": "e", "outcome": "failed", "exit_code": 0.0,
		"error_category": "timeout", "retryable": false, "output_ref": "s3://x", "event_time": "2026-01-02T02:04:05.678Z"}
	if len(got) != len(want) {
		t.Errorf("body = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("body[%q] = %v, want %v", k, got[k], v)
		}
	}
	if req.contentType != "application/json" {
		t.Errorf("Content-Type = %q", req.contentType)
	}
}

// The client refuses an event id, or any body, the API would refuse,
// before sending.
func TestClientRefusesInvalidEventID(t *testing.T) {
	t.Parallel()
	p, srv := newPeer(t)
	c := worker.NewClient(srv.URL, nil)
	ref := worker.AttemptRef{Run: "r", Task: "t", Attempt: 1}
	for _, id := range []string{"", "dispatch:2", "deps", strings.Repeat("a", worker.MaxEventIDLen+1), "sp ace"} {
		var fe *worker.FieldError
		if _, err := c.Heartbeat(t.Context(), "tok", worker.HeartbeatRequest{Run: ref.Run, Task: ref.Task, Attempt: 1, EventID: id}); !errors.As(err, &fe) || worker.IsTransient(err) {
			t.Errorf("heartbeat with event id %q: %v, want a permanent *FieldError", id, err)
		}
		if _, err := c.Claim(t.Context(), "tok", worker.ClaimRequest{Run: ref.Run, Task: ref.Task, Attempt: 1, WorkerID: "w@b", EventID: id}); !errors.As(err, &fe) {
			t.Errorf("claim with event id %q: %v, want a *FieldError", id, err)
		}
		comp := worker.Completion{Run: ref.Run, Task: ref.Task, Attempt: 1, EventID: id, Outcome: worker.OutcomeSucceeded}
		if _, err := c.Complete(t.Context(), "tok", comp); !errors.As(err, &fe) {
			t.Errorf("complete with event id %q: %v, want a *FieldError", id, err)
		}
	}
	// The rest of the body is checked as the API checks it, too.
	var fe *worker.FieldError
	if _, err := c.Claim(t.Context(), "tok", worker.ClaimRequest{Run: ref.Run, Task: ref.Task, Attempt: 1, EventID: "c1"}); !errors.As(err, &fe) || fe.Field != "worker_id" {
		t.Errorf("claim without a worker id: %v, want a worker_id *FieldError", err)
	}
	big := worker.Completion{Run: ref.Run, Task: ref.Task, Attempt: 1, EventID: "c2", Outcome: worker.OutcomeFailed,
		Reason: strings.Repeat("x", worker.MaxReasonBytes+1)}
	if _, err := c.Complete(t.Context(), "tok", big); !errors.As(err, &fe) || fe.Field != "reason" || !fe.TooLarge {
		t.Errorf("complete with a reason over its limit: %v, want a too-large reason *FieldError", err)
	}
	if n := len(p.callsOf("claim", ref)) + len(p.callsOf("heartbeat", ref)) + len(p.callsOf("complete", ref)); n != 0 {
		t.Errorf("%d calls reached the API, want none", n)
	}
}

// The largest claim answer the scheduler gives is read whole: inputs at
// protocol.MaxInputsBytes, a map child's item and a payload near the
// queue message's limit. Cut short, it would be a decode error, transient,
// and the claim retried for ever.
func TestClientReadsTheLargestClaimAnswer(t *testing.T) {
	t.Parallel()
	str := func(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`) }
	inputs := map[string]json.RawMessage{"up": str(protocol.MaxInputsBytes - len(`{"up":}`))}
	idx := 0
	env := protocol.Envelope{Run: "r", Task: "t[0]", Attempt: 1, Token: "tok", Pool: "p", Payload: str(250 << 10),
		Inputs: inputs, Item: str(250 << 10), Index: &idx}
	body, err := json.Marshal(protocol.ClaimAnswer{Claimed: true, LeaseExpiresAt: time.Now(), Envelope: &env})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c := worker.NewClient(srv.URL, srv.Client())
	ans, err := c.Claim(t.Context(), "tok", worker.ClaimRequest{Run: "r", Task: "t[0]", Attempt: 1, WorkerID: "w@b", EventID: "e"})
	if err != nil {
		t.Fatalf("a claim answer of %d bytes: %v", len(body), err)
	}
	if ans.Envelope == nil || len(ans.Envelope.Inputs["up"]) != len(inputs["up"]) || len(ans.Envelope.Item) != 250<<10 {
		t.Fatalf("the answer read back differs: %+v", ans.Envelope != nil)
	}
}
