package tests

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/lambdaexec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
)

// The lambda executor end to end: the local stack runs functions in its
// process (app.LambdaFunctions), invoked by the same scheduler code that
// invokes Lambda in AWS, and a function that fails its invocation sends
// Lambda's on-failure record to the events queue, as the stack's
// destination does.

// lambdaStack starts a stack whose lambda executor has local's functions.
func lambdaStack(t *testing.T, local *lambdaexec.Local) *stack {
	t.Helper()
	return startStack(t, devstack.Options{Parts: []app.Part{app.LambdaFunctions{Local: local}.Part()}})
}

// lambdaJob is quickJob run by the function fn, with a lease and an
// evidence window long enough that a loaded machine never loses an
// attempt by accident (tests that want LOST set their own).
func lambdaJob(name, fn string, over map[string]any) map[string]any {
	def := quickJob(name, map[string]any{
		"timeouts":        map[string]any{"heartbeat": "10s", "queue": "30s", "cancel": "10s", "run": "1m"},
		"evidence_window": "1m",
	})
	for k, v := range over {
		def[k] = v
	}
	def["executor"] = map[string]any{"type": "lambda", "function": fn}
	return def
}

// executorOf reads attempt n's executor and executor id from the run's
// answer.
func (s *stack) executorOf(run, task string, n int) (executor, id string) {
	s.t.Helper()
	r := s.call("GET", "/v1/runs/"+run, nil).must(s.t, http.StatusOK)
	var d struct {
		Tasks []struct {
			Task     string `json:"task"`
			Attempts []struct {
				N          int     `json:"n"`
				Executor   string  `json:"executor"`
				ExecutorID *string `json:"executor_id"`
			} `json:"attempts"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(r.Raw, &d); err != nil {
		s.t.Fatal(err)
	}
	for _, tk := range d.Tasks {
		for _, a := range tk.Attempts {
			if tk.Task == task && a.N == n {
				return a.Executor, str(a.ExecutorID)
			}
		}
	}
	s.t.Fatalf("run %s has no attempt %s#%d", run, task, n)
	return "", ""
}

var requestIDForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// A function on the worker SDK gets the envelope, claims, runs and
// completes; the attempt records the executor and the request id.
func TestLambdaExecutorSucceeds(t *testing.T) {
	var payload atomic.Value
	local := &lambdaexec.Local{Handlers: map[string]worker.Handler{
		"ok-fn": func(ctx context.Context, tk worker.Task) error {
			payload.Store(string(tk.Payload))
			return nil
		},
	}}
	s := lambdaStack(t, local)
	s.createJob(lambdaJob("lam-ok", "ok-fn", nil))
	id := s.trigger("lam-ok", nil)
	d := s.waitRun(id, 30*time.Second, "SUCCEEDED", "FAILED")
	if d.Run.ExecutionState != "SUCCEEDED" {
		t.Fatalf("run %+v", d.Run)
	}
	if got, _ := payload.Load().(string); got != `{"job":"lam-ok"}` {
		t.Fatalf("the function got payload %q", got)
	}
	executor, reqID := s.executorOf(id, "main", 1)
	a1 := s.runDetail(id).task("main").attempt(t, 1)
	if executor != "lambda" || !requestIDForm.MatchString(reqID) || !strings.HasPrefix(str(a1.WorkerID), "ok-fn@") {
		t.Fatalf("attempt 1 by %s %q, worker %s; want lambda with a request id, claimed by ok-fn", executor, reqID, str(a1.WorkerID))
	}
	h := s.records(id, "main")
	expectStates(t, h, "CREATED", "SCHEDULED", "QUEUED", "RUNNING", "SUCCEEDED")
	if ev := h[2].Evidence; ev["executor"] != "lambda" || ev["executor_id"] != reqID {
		t.Fatalf("dispatch evidence %v, want the executor and its id", ev)
	}
}

// A failure the function reports is retried by the job's policy, with a
// new invocation; a function that always fails ends the run FAILED.
func TestLambdaExecutorFailsAndRetries(t *testing.T) {
	var calls atomic.Int32
	local := &lambdaexec.Local{Handlers: map[string]worker.Handler{
		"flaky-fn": func(ctx context.Context, tk worker.Task) error {
			if calls.Add(1) == 1 {
				return worker.WithCategory(errors.New("the upstream said no"), "upstream_refused")
			}
			return nil
		},
		"bad-fn": func(ctx context.Context, tk worker.Task) error {
			return worker.WithExitCode(errors.New("bad input"), 2)
		},
	}}
	s := lambdaStack(t, local)
	s.createJob(lambdaJob("lam-flaky", "flaky-fn", nil))
	s.createJob(lambdaJob("lam-bad", "bad-fn", map[string]any{"retry": map[string]any{"max_attempts": 1}}))
	flaky, bad := s.trigger("lam-flaky", nil), s.trigger("lam-bad", nil)

	if d := s.waitRun(flaky, 30*time.Second, "SUCCEEDED", "FAILED"); d.Run.ExecutionState != "SUCCEEDED" {
		t.Fatalf("flaky run %+v", d.Run)
	}
	main := s.runDetail(flaky).task("main")
	a1, a2 := main.attempt(t, 1), main.attempt(t, 2)
	if main.Attempt != 2 || a1.State != "FAILED" || str(a1.ErrorCategory) != "upstream_refused" || a2.State != "SUCCEEDED" {
		t.Fatalf("attempts %+v and %+v", a1, a2)
	}
	_, id1 := s.executorOf(flaky, "main", 1)
	_, id2 := s.executorOf(flaky, "main", 2)
	if id1 == "" || id1 == id2 {
		t.Fatalf("request ids %q and %q, want one invocation per attempt", id1, id2)
	}

	if d := s.waitRun(bad, 30*time.Second, "SUCCEEDED", "FAILED"); d.Run.ExecutionState != "FAILED" {
		t.Fatalf("bad run %+v", d.Run)
	}
	b1 := s.runDetail(bad).task("main").attempt(t, 1)
	if b1.State != "FAILED" || b1.ExitCode == nil || *b1.ExitCode != 2 {
		t.Fatalf("bad attempt %+v", b1)
	}
}

// A function that claims its attempt and then crashes (panics before
// reporting) fails its invocation: Lambda's on-failure record reaches the
// events queue, waits there until the attempt's lease has ended, and then
// resolves the LOST attempt as a confirmed failure at once (the evidence
// window is five minutes: only the executor's evidence can decide it within
// the test). The retry is a new invocation, which succeeds.
func TestLambdaExecutorLostResolvedByTheFailedInvocation(t *testing.T) {
	var apiURL atomic.Value
	var calls atomic.Int32
	ok := func(ctx context.Context, tk worker.Task) error { return nil }
	local := &lambdaexec.Local{Functions: map[string]lambdaexec.Function{
		"crash-fn": func(ctx context.Context, event json.RawMessage) error {
			var env protocol.Envelope
			if err := json.Unmarshal(event, &env); err != nil {
				return err
			}
			url := apiURL.Load().(string)
			if calls.Add(1) > 1 {
				return worker.HandleInvoke(worker.InvokeConfig{APIURL: url, Name: "crash-fn"}, ok)(ctx, env)
			}
			c := worker.NewClient(url, nil)
			if _, err := c.Claim(ctx, env.Token, worker.ClaimRequest{Run: env.Run, Task: env.Task, Attempt: env.Attempt,
				WorkerID: "crash-fn@once", EventID: "claim-1"}); err != nil {
				return err
			}
			panic("the function crashed after claiming")
		},
	}}
	s := lambdaStack(t, local)
	apiURL.Store(s.url)
	s.createJob(lambdaJob("lam-crash", "crash-fn", map[string]any{"evidence_window": "5m",
		"timeouts": map[string]any{"heartbeat": "2s", "queue": "30s", "cancel": "10s", "run": "1m"}}))
	id := s.trigger("lam-crash", nil)
	d := s.waitRun(id, 45*time.Second, "SUCCEEDED", "FAILED")
	if d.Run.ExecutionState != "SUCCEEDED" {
		t.Fatalf("run %+v", d.Run)
	}
	main := s.runDetail(id).task("main")
	a1 := main.attempt(t, 1)
	if main.Attempt != 2 || a1.State != "FAILED" || str(a1.ErrorCategory) != "invocation_failed" {
		t.Fatalf("attempt 1 %+v (category %s), want FAILED by invocation_failed", a1, str(a1.ErrorCategory))
	}
	_, reqID := s.executorOf(id, "main", 1)
	h := s.records(id, "main")
	expectStates(t, h, "CREATED", "SCHEDULED", "QUEUED", "RUNNING", "LOST", "UP_FOR_RETRY", "SCHEDULED", "QUEUED", "RUNNING", "SUCCEEDED")
	ev := h[5]
	if ev.Event != "evidence.failed" || ev.Evidence["provider"] != "lambda" || ev.Evidence["request_id"] != reqID ||
		ev.Evidence["function_error"] != "Unhandled" || !strings.Contains(ev.Reason, "crashed after claiming") {
		t.Fatalf("LOST was resolved by %s %v %q, want the failed invocation %s", ev.Event, ev.Evidence, ev.Reason, reqID)
	}
}

// A cancel reaches the running function through its heartbeat's answer:
// its handler's ctx ends, the SDK reports cancelled, and the run ends
// CANCELLED.
func TestLambdaExecutorCancel(t *testing.T) {
	started := make(chan struct{}, 1)
	local := &lambdaexec.Local{Handlers: map[string]worker.Handler{
		"slow-fn": func(ctx context.Context, tk worker.Task) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		},
	}}
	s := lambdaStack(t, local)
	s.createJob(lambdaJob("lam-slow", "slow-fn", map[string]any{"timeouts": map[string]any{"heartbeat": "3s", "queue": "30s", "cancel": "10s", "run": "1m"}}))
	id := s.trigger("lam-slow", nil)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the function never started")
	}
	s.waitDetail(id, "main", "RUNNING", 10*time.Second)
	s.cancelTask(id, "main", "operator changed their mind")
	d := s.waitRun(id, 30*time.Second, "CANCELLED", "FAILED", "SUCCEEDED")
	if d.Run.ExecutionState != "CANCELLED" {
		t.Fatalf("run %+v", d.Run)
	}
	if a1 := s.runDetail(id).task("main").attempt(t, 1); a1.State != "CANCELLED" {
		t.Fatalf("attempt 1 %+v, want CANCELLED by the function's acknowledgement", a1)
	}
	h := s.records(id, "main")
	expectStates(t, h, "CREATED", "SCHEDULED", "QUEUED", "RUNNING", "CANCELLING", "CANCELLED")
}

// A function the stack does not have is refused when the job is defined,
// and writes nothing.
func TestLambdaExecutorUnknownFunctionRefused(t *testing.T) {
	s := lambdaStack(t, &lambdaexec.Local{Handlers: map[string]worker.Handler{"ok-fn": func(context.Context, worker.Task) error { return nil }}})
	r := s.call("POST", "/v1/jobs", lambdaJob("lam-nope", "other-fn", nil)).must(t, http.StatusUnprocessableEntity)
	if r.code() != "invalid_field" || !strings.Contains(string(r.Raw), "executor.function") {
		t.Fatalf("answer %s", r.Raw)
	}
	s.call("GET", "/v1/jobs/lam-nope", nil).must(t, http.StatusNotFound)
}
