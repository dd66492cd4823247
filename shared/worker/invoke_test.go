package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/runledger/runledger/shared/worker"
)

// A function invoked by the lambda executor gets the envelope as its
// event: HandleInvoke claims that attempt, runs the handler and completes
// it, and fails the invocation only when the claim could not be made for a
// transient reason (then Lambda's on-failure record tells the scheduler).
func TestHandleInvoke(t *testing.T) {
	for _, c := range []struct {
		name      string
		prepare   func(p *peer, ref worker.AttemptRef)
		handler   error
		wantErr   bool
		wantRan   bool
		completes string
	}{
		{"succeeds", nil, nil, false, true, "succeeded"},
		{"reports a failure", nil, errors.New("boom"), false, true, "failed"},
		{"refused claim", func(p *peer, ref worker.AttemptRef) { p.cancel(ref) }, nil, false, false, ""},
		{"unavailable claim", func(p *peer, ref worker.AttemptRef) { p.setUnavailable(ref) }, nil, true, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, cfg := oneAttempt(t)
			if c.prepare != nil {
				c.prepare(p, cfg.Ref)
			}
			ran := false
			h := worker.HandleInvoke(worker.InvokeConfig{APIURL: cfg.APIURL, Name: "etl-fn", Logger: slog.New(slog.DiscardHandler)},
				func(ctx context.Context, tk worker.Task) error { ran = true; return c.handler })
			env := worker.Envelope{Run: cfg.Ref.Run, Task: cfg.Ref.Task, Attempt: cfg.Ref.Attempt, Token: cfg.Token}
			ctx, cancel := context.WithTimeout(context.Background(), worker.DefaultReportTimeout)
			defer cancel()
			err := h(ctx, env)
			if (err != nil) != c.wantErr || ran != c.wantRan {
				t.Fatalf("err %v, handler ran %t; want error %t, ran %t", err, ran, c.wantErr, c.wantRan)
			}
			comps := p.callsOf("complete", cfg.Ref)
			if c.completes == "" && len(comps) != 0 || c.completes != "" && (len(comps) != 1 || comps[0].Outcome != c.completes) {
				t.Fatalf("completions %+v, want %q", comps, c.completes)
			}
		})
	}
}

// The lambda executor's event names the attempt; what runs is the
// envelope the claim answers with, so an altered event cannot change it.
func TestHandleInvokeRunsTheClaimedEnvelope(t *testing.T) {
	p, cfg := oneAttempt(t)
	var seen worker.Task
	h := worker.HandleInvoke(worker.InvokeConfig{APIURL: cfg.APIURL, Name: "etl-fn", Logger: slog.New(slog.DiscardHandler)},
		func(ctx context.Context, tk worker.Task) error { seen = tk; return nil })
	env := worker.Envelope{Run: cfg.Ref.Run, Task: cfg.Ref.Task, Attempt: cfg.Ref.Attempt, Token: cfg.Token, Job: "forged",
		Payload: json.RawMessage(`{"day":"1999-01-01"}`), Params: json.RawMessage(`{"x":1}`)}
	if err := h(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	if seen.Job != "j" || string(seen.Payload) != `{"day":"2026-01-02"}` || seen.Params != nil {
		t.Fatalf("handler saw job %q, payload %s, params %s; want the claim's j, {\"day\":\"2026-01-02\"}, none", seen.Job, seen.Payload, seen.Params)
	}
	if comps := p.callsOf("complete", cfg.Ref); len(comps) != 1 || comps[0].Outcome != "succeeded" {
		t.Fatalf("completions %+v, want one succeeded", comps)
	}
}
