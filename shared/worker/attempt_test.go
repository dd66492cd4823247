package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
)

// oneAttempt is a peer with attempt r1/main#2 QUEUED, whose claim answers
// with an envelope carrying a payload and a short heartbeat interval.
func oneAttempt(t *testing.T) (*peer, worker.AttemptConfig) {
	p, srv := newPeer(t)
	ref := worker.AttemptRef{Run: "r1", Task: "main", Attempt: 2}
	p.add(ref, "tok")
	p.setEnvelope(ref, map[string]any{"job": "j", "run": "r1", "task": "main", "attempt": 2, "token": "tok", "pool": "",
		"payload": map[string]any{"day": "2026-01-02"}, "heartbeat_interval": "50ms", "run_timeout": "1m"})
	return p, worker.AttemptConfig{APIURL: srv.URL, Ref: ref, Token: "tok", Name: "task-1", Logger: slog.New(slog.DiscardHandler)}
}

// A process with only the attempt's name and token claims it, runs the
// handler on the envelope the claim answered with, and completes over
// HTTP with the token as the bearer.
func TestRunAttemptClaimsRunsAndCompletes(t *testing.T) {
	p, cfg := oneAttempt(t)
	var payload struct{ Day string }
	err := worker.RunAttempt(context.Background(), cfg, func(ctx context.Context, tk worker.Task) error {
		if tk.Job != "j" || tk.Attempt != 2 || tk.Token != "tok" {
			t.Errorf("task %+v", tk)
		}
		return tk.DecodePayload(&payload)
	})
	if err != nil {
		t.Fatal(err)
	}
	if payload.Day != "2026-01-02" {
		t.Fatalf("payload day %q: the handler did not get the claim's envelope", payload.Day)
	}
	comps := p.callsOf("complete", cfg.Ref)
	if len(comps) != 1 || comps[0].Outcome != "succeeded" || comps[0].Auth != "Bearer tok" || comps[0].Status != 200 {
		t.Fatalf("completions %+v, want one succeeded with the token as bearer", comps)
	}
	claims := p.callsOf("claim", cfg.Ref)
	if len(claims) != 1 || !strings.HasPrefix(claims[0].WorkerID, "task-1@") {
		t.Fatalf("claims %+v, want one by task-1@<boot>", claims)
	}
}

// A failure is reported with its exit code and returned as an
// *AttemptError that carries it.
func TestRunAttemptReportsAFailureWithItsExitCode(t *testing.T) {
	p, cfg := oneAttempt(t)
	err := worker.RunAttempt(context.Background(), cfg, func(ctx context.Context, tk worker.Task) error {
		return worker.WithExitCode(errors.New("boom"), 3)
	})
	var ae *worker.AttemptError
	if !errors.As(err, &ae) || ae.Completion.ExitCode == nil || *ae.Completion.ExitCode != 3 || ae.State != "failed" {
		t.Fatalf("error %v, want an *AttemptError with exit code 3 and state failed", err)
	}
	comps := p.callsOf("complete", cfg.Ref)
	if len(comps) != 1 || comps[0].Outcome != "failed" || comps[0].ExitCode == nil || *comps[0].ExitCode != 3 {
		t.Fatalf("completions %+v, want one failed with exit code 3", comps)
	}
}

// A cancel request reaches the handler through its ctx (the heartbeat's
// answer), and its acknowledgement is reported.
func TestRunAttemptCancelReachesTheHandler(t *testing.T) {
	p, cfg := oneAttempt(t)
	// A heartbeat a second: the cancel comes with the first one, and a
	// loaded machine late to renew a 150 ms lease cannot end the handler
	// for the lease instead.
	p.setEnvelope(cfg.Ref, map[string]any{"job": "j", "run": "r1", "task": "main", "attempt": 2, "token": "tok", "pool": "",
		"payload": map[string]any{"day": "2026-01-02"}, "heartbeat_interval": "1s", "run_timeout": "1m"})
	started := make(chan struct{})
	go func() {
		<-started
		p.cancel(cfg.Ref)
	}()
	err := worker.RunAttempt(context.Background(), cfg, func(ctx context.Context, tk worker.Task) error {
		close(started)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(waitLimit):
			return errors.New("the cancel request never reached the handler")
		}
	})
	var ae *worker.AttemptError
	if !errors.As(err, &ae) || ae.Completion.Outcome != worker.OutcomeCancelled {
		t.Fatalf("error %v, want a reported cancellation", err)
	}
}

// A refused claim runs nothing.
func TestRunAttemptRefusedClaimRunsNothing(t *testing.T) {
	p, cfg := oneAttempt(t)
	p.cancel(cfg.Ref) // QUEUED: cancelled at once
	err := worker.RunAttempt(context.Background(), cfg, func(context.Context, worker.Task) error {
		t.Error("the handler ran")
		return nil
	})
	if !errors.Is(err, worker.ErrNotClaimed) || !errors.Is(err, worker.ErrIllegalTransition) {
		t.Fatalf("error %v, want ErrNotClaimed wrapping ErrIllegalTransition", err)
	}
	if n := len(p.callsOf("complete", cfg.Ref)); n != 0 {
		t.Fatalf("%d completions of an unclaimed attempt", n)
	}
}

// A process started with the attempt's claim nonce claims with it, and
// every call after the claim takes the token the claim answered with; an
// answer without a token is no claim to run on.
func TestRunAttemptClaimsWithTheNonce(t *testing.T) {
	p, cfg := oneAttempt(t)
	p.setNonce(cfg.Ref, "nonce")
	cfg.Token, cfg.ClaimNonce = "", "nonce"
	err := worker.RunAttempt(context.Background(), cfg, func(ctx context.Context, tk worker.Task) error {
		if tk.Token != "tok" {
			t.Errorf("the handler got token %q, want the claim answer's", tk.Token)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	claims, comps := p.callsOf("claim", cfg.Ref), p.callsOf("complete", cfg.Ref)
	if len(claims) != 1 || claims[0].Auth != "Bearer nonce" {
		t.Fatalf("claims %+v, want one with the nonce as bearer", claims)
	}
	if len(comps) != 1 || comps[0].Auth != "Bearer tok" || comps[0].Status != 200 {
		t.Fatalf("completions %+v, want one with the token as bearer", comps)
	}
	for _, hb := range p.callsOf("heartbeat", cfg.Ref) {
		if hb.Auth != "Bearer tok" {
			t.Fatalf("heartbeat with bearer %q, want the token", hb.Auth)
		}
	}

	p, cfg = oneAttempt(t)
	p.setNonce(cfg.Ref, "nonce")
	p.setEnvelope(cfg.Ref, map[string]any{"job": "j", "run": "r1", "task": "main", "attempt": 2, "token": "", "pool": ""})
	cfg.Token, cfg.ClaimNonce = "", "nonce"
	err = worker.RunAttempt(context.Background(), cfg, func(context.Context, worker.Task) error {
		t.Error("the handler ran without a token")
		return nil
	})
	if !errors.Is(err, worker.ErrNotClaimed) {
		t.Fatalf("error %v, want ErrNotClaimed", err)
	}
}

// RunFromEnv reads the start environment: the claim nonce, or for an
// attempt without one its token; a missing variable is named.
func TestParseStartEnv(t *testing.T) {
	ref := worker.AttemptRef{Run: "r", Task: "t", Attempt: 3}
	parse := func(cred protocol.ClaimCredential, drop string) (worker.AttemptRef, protocol.ClaimCredential, string, error) {
		env := map[string]string{}
		for _, v := range protocol.StartEnv(ref, cred, "http://api") {
			env[v.Name] = v.Value
		}
		delete(env, drop)
		return protocol.ParseStartEnv(func(k string) string { return env[k] })
	}
	for _, cred := range []protocol.ClaimCredential{{Nonce: "nonce"}, {Token: "tok"}} {
		got, gotCred, api, err := parse(cred, "")
		if err != nil || got != ref || gotCred != cred || api != "http://api" {
			t.Fatalf("parsed %v %+v %q %v, want %+v", got, gotCred, api, err, cred)
		}
	}
	env := protocol.StartEnv(ref, protocol.ClaimCredential{Nonce: "nonce", Token: "tok"}, "http://api")
	for _, v := range env {
		if v.Name == protocol.EnvToken || v.Value == "tok" {
			t.Fatalf("a start environment with a nonce holds the token: %v", env)
		}
	}
	for drop, named := range map[string]string{protocol.EnvClaimNonce: "RUNLEDGER_CLAIM_NONCE", protocol.EnvAttempt: "RUNLEDGER_ATTEMPT"} {
		if _, _, _, err := parse(protocol.ClaimCredential{Nonce: "nonce"}, drop); err == nil || !strings.Contains(err.Error(), named) {
			t.Fatalf("without %s: error %v, want one naming it", drop, err)
		}
	}
}

// A claim that fails transiently (the dispatch write has not landed: 503)
// is repeated with the same event id until it wins.
func TestRunAttemptClaimsThroughTransientFailures(t *testing.T) {
	p, cfg := oneAttempt(t)
	p.setUnavailable(cfg.Ref)
	go func() {
		deadline := time.Now().Add(waitLimit)
		for len(p.callsOf("claim", cfg.Ref)) < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // a poll interval
		}
		p.mu.Lock()
		delete(p.unavailable, cfg.Ref)
		p.mu.Unlock()
	}()
	if err := worker.RunAttempt(context.Background(), cfg, func(context.Context, worker.Task) error { return nil }); err != nil {
		t.Fatal(err)
	}
	claims := p.callsOf("claim", cfg.Ref)
	if len(claims) < 3 || claims[0].EventID != claims[len(claims)-1].EventID || claims[len(claims)-1].Status != 200 {
		t.Fatalf("claims %+v: want 503s then a 200, all with one event id", claims)
	}
}
