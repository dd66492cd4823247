package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/runledger/runledger/shared/worker"
)

// record is a Lambda SQS record carrying env.
func record(t *testing.T, id string, env worker.Envelope) events.SQSMessage {
	t.Helper()
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return events.SQSMessage{MessageId: id, ReceiptHandle: "receipt-" + id, Body: string(body),
		Attributes: map[string]string{"ApproximateReceiveCount": "1"}, EventSource: "aws:sqs"}
}

// attempt registers a fresh attempt with the peer and returns its envelope.
func (f *fixture) attempt(mutate func(*worker.Envelope)) worker.Envelope {
	ref := newAttempt(1)
	env := envelope(ref, "token-"+ref.Run)
	if mutate != nil {
		mutate(&env)
	}
	f.peer.store(f.t, env)
	return env
}

func TestHandleSQSBatchFailuresOnlyForTransient(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config("lambda")
	cfg.PoolQueueURL = "" // the event source mapping owns the messages
	cfg.Concurrency = 4
	var runs counter
	w := f.newWorker(cfg, func(ctx context.Context, task worker.Task) error {
		runs.inc(task.Ref())
		return nil
	})
	ok := f.attempt(nil)
	refused := f.attempt(nil)
	f.peer.set(refused.Ref(), "running", "other@boot")
	transient := f.attempt(nil)
	f.peer.setUnavailable(transient.Ref())

	resp, err := w.HandleSQS(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		record(t, "m-ok", ok), record(t, "m-refused", refused), record(t, "m-transient", transient),
		{MessageId: "m-garbage", Body: `{"not":"an envelope"}`},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m-transient" {
		t.Errorf("batch item failures = %+v, want only m-transient", resp.BatchItemFailures)
	}
	if c := f.completion(ok.Ref()); c.Outcome != worker.OutcomeSucceeded {
		t.Errorf("completion = %+v, want succeeded", c)
	}
	if runs.get(ok.Ref()) != 1 || runs.get(refused.Ref()) != 0 || runs.get(transient.Ref()) != 0 {
		t.Errorf("handler runs: ok %d, refused %d, transient %d; want 1, 0, 0",
			runs.get(ok.Ref()), runs.get(refused.Ref()), runs.get(transient.Ref()))
	}
	for _, o := range f.q.opsSnapshot() {
		if o.Op == "delete" || o.Op == "change_visibility" {
			t.Errorf("HandleSQS called %s on %s; the event source mapping owns the messages", o.Op, o.Queue)
		}
	}
	f.lease("the worker's lease", func(l worker.Lease) bool { return l.BootID == w.BootID() })
}

func TestHandleSQSDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config("lambda-deadline")
	cfg.PoolQueueURL = ""
	cfg.DeadlineReserve = time.Second
	w := f.newWorker(cfg, func(ctx context.Context, task worker.Task) error {
		<-ctx.Done()
		return fmt.Errorf("stopped: %w", ctx.Err())
	})

	t.Run("handler ended before the deadline", func(t *testing.T) {
		// A slow heartbeat: what ends the handler is the invocation's
		// deadline, never a lease a loaded machine was late to renew.
		env := f.attempt(func(e *worker.Envelope) { e.HeartbeatInterval = time.Second })
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
		defer cancel()
		resp, err := w.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{record(t, "m1", env)}})
		if err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Error("HandleSQS returned after the invocation deadline")
		}
		if len(resp.BatchItemFailures) != 0 {
			t.Errorf("batch item failures = %+v, want none (the attempt was reported)", resp.BatchItemFailures)
		}
		c := f.completion(env.Ref())
		if c.Outcome != worker.OutcomeFailed || c.ErrorCategory != worker.CategoryWorkerDeadline || !c.IsRetryable() {
			t.Errorf("completion = %+v, want failed, worker_deadline, retryable", c)
		}
	})
	t.Run("too late to start", func(t *testing.T) {
		env := f.attempt(nil)
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond) // inside the reserve
		defer cancel()
		resp, err := w.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{record(t, "m2", env)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m2" {
			t.Errorf("batch item failures = %+v, want m2 back for another invocation", resp.BatchItemFailures)
		}
		if claims := f.peer.callsOf("claim", env.Ref()); len(claims) != 0 {
			t.Errorf("claimed %+v with no time left to run", claims)
		}
	})
}

// TestHandlerResults checks how a handler's return becomes the completion,
// through the Lambda path (it needs no pool queue).
func TestHandlerResults(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config("results")
	cfg.PoolQueueURL = ""
	cases := []struct {
		name      string
		handler   worker.Handler
		payload   string
		outcome   worker.Outcome
		category  string
		retryable bool
		exitCode  *int
		outputRef string
	}{
		{name: "success", handler: func(context.Context, worker.Task) error { return nil },
			outcome: worker.OutcomeSucceeded, retryable: true},
		{name: "plain error is retryable", handler: func(context.Context, worker.Task) error { return errors.New("boom") },
			outcome: worker.OutcomeFailed, category: "error", retryable: true},
		{name: "permanent", handler: func(context.Context, worker.Task) error { return worker.Permanent(errors.New("bad input")) },
			outcome: worker.OutcomeFailed, category: "error", retryable: false},
		{name: "category and exit code", handler: func(context.Context, worker.Task) error {
			return fmt.Errorf("wrapped: %w", worker.WithExitCode(worker.WithCategory(worker.Permanent(errors.New("x")), "quota_exceeded"), 3))
		}, outcome: worker.OutcomeFailed, category: "quota_exceeded", retryable: false, exitCode: ptr(3)},
		{name: "category not snake_case", handler: func(context.Context, worker.Task) error {
			return worker.WithCategory(errors.New("x"), "Not Snake")
		}, outcome: worker.OutcomeFailed, category: "error", retryable: true},
		{name: "panic", handler: func(context.Context, worker.Task) error { panic("handler bug") },
			outcome: worker.OutcomeFailed, category: worker.CategoryPanic, retryable: true},
		{name: "demo success", handler: worker.DemoHandler, payload: `{"hello":"world"}`,
			outcome: worker.OutcomeSucceeded, retryable: true, outputRef: "demo://"},
		{name: "demo fail", handler: worker.DemoHandler, payload: `{"fail":true}`,
			outcome: worker.OutcomeFailed, category: "demo_failure", retryable: true, exitCode: ptr(1)},
		{name: "demo permanent fail", handler: worker.DemoHandler, payload: `{"fail":true,"permanent":true}`,
			outcome: worker.OutcomeFailed, category: "demo_failure", retryable: false, exitCode: ptr(1)},
		{name: "demo non-object payload", handler: worker.DemoHandler, payload: `[1,2]`,
			outcome: worker.OutcomeSucceeded, retryable: true, outputRef: "demo://"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := f.newWorker(cfg, tc.handler)
			env := f.attempt(func(e *worker.Envelope) {
				if tc.payload != "" {
					e.Payload = json.RawMessage(tc.payload)
				}
			})
			resp, err := w.HandleSQS(t.Context(), events.SQSEvent{Records: []events.SQSMessage{record(t, "m", env)}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("HandleSQS = %+v, %v", resp, err)
			}
			c := f.completion(env.Ref())
			if c.Outcome != tc.outcome || c.ErrorCategory != tc.category || c.IsRetryable() != tc.retryable {
				t.Errorf("completion = outcome %s, category %q, retryable %v; want %s, %q, %v",
					c.Outcome, c.ErrorCategory, c.IsRetryable(), tc.outcome, tc.category, tc.retryable)
			}
			if (c.ExitCode == nil) != (tc.exitCode == nil) || (c.ExitCode != nil && *c.ExitCode != *tc.exitCode) {
				t.Errorf("exit code = %v, want %v", deref(c.ExitCode), deref(tc.exitCode))
			}
			if tc.outputRef != "" && c.OutputRef != fmt.Sprintf("%s%s/%s/%d", tc.outputRef, env.Run, env.Task, env.Attempt) {
				t.Errorf("output_ref = %q", c.OutputRef)
			}
			if c.EventID == "" || c.EventTime.IsZero() || c.Token != env.Token {
				t.Errorf("completion lacks event id, event time or token: %+v", c)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
