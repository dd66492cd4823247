package scheduler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// syncBuffer is a log sink safe for HandleMessages' concurrent messages.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A completion on the events queue meets the worker route's limits: one
// over them is dropped with a log line (never redelivered) and changes
// nothing; within them, its reason becomes the transition's reason.
func TestEventsQueueCompletionLimits(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	run, env := f.running(t, "w@boot")
	logs := &syncBuffer{}
	svc := mustNew(f.st, f.q, scheduler.Config{
		Pools: map[string]string{"default": f.pool}, Now: f.clock.Now,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	key := ledger.InstanceKey{Run: run, Task: "main"}

	message := func(id string, mutate func(*protocol.Completion)) scheduler.QueueMessage {
		c := protocol.Completion{Run: run, Task: "main", Attempt: 1, EventID: id, Outcome: protocol.OutcomeFailed,
			ErrorCategory: "boom", Token: env.Token}
		mutate(&c)
		body, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return scheduler.QueueMessage{ID: id, Body: string(body)}
	}
	bad := []scheduler.QueueMessage{
		message("big-ref", func(c *protocol.Completion) { c.OutputRef = strings.Repeat("r", 200_000) }),
		message("long-category", func(c *protocol.Completion) { c.ErrorCategory = strings.Repeat("a", 65) }),
		message("bad-category", func(c *protocol.Completion) { c.ErrorCategory = "Not Snake" }),
		message("big-reason", func(c *protocol.Completion) { c.Reason = strings.Repeat("x", protocol.MaxReasonBytes+1) }),
	}
	if again := svc.HandleMessages(ctx, bad); len(again) != 0 {
		t.Errorf("%d bad completions were handed back for redelivery", len(again))
	}
	for _, m := range bad {
		if !strings.Contains(logs.String(), `"message_id":"`+m.ID+`"`) {
			t.Errorf("no log line for the dropped message %s:\n%s", m.ID, logs.String())
		}
	}
	if inst := f.instance(t, run); inst.Snapshot.State != statemodel.StateRunning || inst.Snapshot.Version != 4 {
		t.Fatalf("after refused completions the instance is %s v%d, want RUNNING v4", inst.Snapshot.State, inst.Snapshot.Version)
	}

	tail := "exit status 2: disk <full> & more"
	if again := svc.HandleMessages(ctx, []scheduler.QueueMessage{
		message("good", func(c *protocol.Completion) { c.Reason = tail }),
	}); len(again) != 0 {
		t.Fatalf("good completion handed back for redelivery: %v", again)
	}
	h, err := ledger.FullHistory(ctx, f.st, key)
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1]
	if last.Event != statemodel.EvFailed || last.Reason != tail {
		t.Errorf("last transition %s with reason %q, want %s with %q", last.Event, last.Reason, statemodel.EvFailed, tail)
	}
}

// A run whose dispatch message the queue would refuse is refused when it
// is triggered, and nothing is written: it could only wait SCHEDULED.
func TestTriggerChecksTheEnvelope(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j, err := jobspec.Parse([]byte(`{"name":"j","payload":{"text":"`+strings.Repeat("<&>", 20_000)+`"}}`), f.svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Jobs().CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	params := func(s string) json.RawMessage { return json.RawMessage(`{"p":"` + s + `"}`) }
	for _, c := range []struct {
		name     string
		params   json.RawMessage
		tooLarge bool
	}{
		{"over SQS's 256 KiB", params(strings.Repeat("x", 210_000)), true},
		{"a character SQS refuses", params("\uffff"), false},
	} {
		_, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "j", Params: c.params})
		var ee *scheduler.EnvelopeError
		if !errors.As(err, &ee) || ee.TooLarge != c.tooLarge || ee.Task != "main" {
			t.Errorf("%s: %v, want an *EnvelopeError for main, too large %v", c.name, err, c.tooLarge)
		}
	}
	if runs, _, err := f.st.ListRuns(ctx, ledger.RunFilter{Job: "j"}); err != nil || len(runs) != 0 {
		t.Fatalf("refused triggers left %d runs (%v)", len(runs), err)
	}

	// 60 KB of HTML characters in the payload and 60 KB in the params
	// travel as they are: the envelope is their size, not six times it.
	v, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "j", Params: params(strings.Repeat("<", 60_000))})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := f.q.Receive(ctx, f.pool, queue.ReceiveOptions{MaxMessages: 1, Wait: 5 * time.Second})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("no envelope: %v %d", err, len(msgs))
	}
	if n := len(msgs[0].Body); n > 125_000 {
		t.Errorf("the envelope of 120 KB of payload and params is %d bytes", n)
	}
	env, err := protocol.ParseEnvelope(msgs[0].Body)
	if err != nil || env.Run != v.Run.ID || !bytes.Contains(env.Payload, []byte("<&><&>")) || !bytes.Contains(env.Params, []byte("<<<")) {
		t.Errorf("envelope %v: run %s, payload %.40s, params %.40s", err, env.Run, env.Payload, env.Params)
	}
}

// A SCHEDULED instance whose envelope the queue never takes is retried by
// each pass until the queue timeout since it became SCHEDULED, then fails
// with dispatch_failed (no retry) and the error in the transition's reason.
func TestUndispatchableFailsAfterTheQueueTimeout(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// The pool's queue is gone: every send fails.
	svc := mustNew(f.st, f.q, scheduler.Config{
		Pools: map[string]string{"default": f.pool + "-deleted"}, Now: f.clock.Now,
	})
	j, err := jobspec.Parse([]byte(`{"name":"j","timeouts":{"queue":"5m"},"retry":{"max_attempts":3}}`), svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Jobs().CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	v, _, err := svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "j"})
	if err != nil {
		t.Fatal(err)
	}
	key := ledger.InstanceKey{Run: v.Run.ID, Task: "main"}
	state := func() statemodel.InstanceState { return f.instance(t, v.Run.ID).Snapshot.State }
	for _, d := range []time.Duration{time.Minute, 3 * time.Minute} {
		f.clock.Advance(d)
		// Within the timeout the failed send is an error of the pass.
		if _, err := svc.Tick(ctx); err == nil {
			t.Fatal("a pass whose dispatch failed reported no error")
		}
		if s := state(); s != statemodel.StateScheduled {
			t.Fatalf("within the queue timeout the instance is %s, want SCHEDULED", s)
		}
	}
	f.clock.Advance(time.Minute + time.Second)
	if _, err := svc.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	inst := f.instance(t, v.Run.ID)
	if inst.Snapshot.State != statemodel.StateFailed || inst.Snapshot.Attempt != 0 {
		t.Fatalf("after the queue timeout the instance is %s with attempt %d, want FAILED with none", inst.Snapshot.State, inst.Snapshot.Attempt)
	}
	h, err := ledger.FullHistory(ctx, f.st, key)
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1]
	if last.Event != statemodel.EvDispatchFailed || last.Evidence["error_category"] != statemodel.CategoryDispatchFailed ||
		!strings.Contains(last.Reason, "send") {
		t.Fatalf("last transition %s, evidence %v, reason %q", last.Event, last.Evidence, last.Reason)
	}
	run, err := f.st.GetRun(ctx, v.Run.ID)
	if err != nil || run.ExecutionState != statemodel.RunFailed {
		t.Fatalf("run is %s (%v), want FAILED", run.ExecutionState, err)
	}
}

// A late report from an attempt older than the instance holds is still
// authorised by its token (read from its attempt item) and answered stale;
// a wrong token for it is still invalid_token.
func TestLateReportOfAnEvictedAttempt(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j, err := jobspec.Parse([]byte(`{"name":"j","retry":{"max_attempts":1}}`), f.svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Jobs().CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	v, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "j"})
	if err != nil {
		t.Fatal(err)
	}
	key := ledger.InstanceKey{Run: v.Run.ID, Task: "main"}
	var first protocol.Envelope
	const total = statemodel.MaxInlineAttempts + 2
	for n := 1; n <= total; n++ {
		msgs, err := f.q.Receive(ctx, f.pool, queue.ReceiveOptions{MaxMessages: 1, Wait: 5 * time.Second})
		if err != nil || len(msgs) != 1 {
			t.Fatalf("attempt %d: no envelope (%v)", n, err)
		}
		// Taken for good: a slow loop must not see it again once its
		// visibility timeout ends.
		if err := f.q.Delete(ctx, f.pool, msgs[0].ReceiptHandle); err != nil {
			t.Fatal(err)
		}
		env, err := protocol.ParseEnvelope(msgs[0].Body)
		if err != nil || env.Attempt != n {
			t.Fatalf("attempt %d: envelope of attempt %d (%v)", n, env.Attempt, err)
		}
		if n == 1 {
			first = env
		}
		ref := protocol.AttemptRef{Run: env.Run, Task: env.Task, Attempt: n}
		if _, err := f.svc.Workers().Claim(ctx, ref, env.Token, "w", "claim-"+env.Token); err != nil {
			t.Fatal(err)
		}
		c := protocol.Completion{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, EventID: "fail-" + env.Token, Outcome: "failed", ErrorCategory: "boom"}
		if _, err := f.svc.Workers().Complete(ctx, c, env.Token); err != nil {
			t.Fatal(err)
		}
		if n < total {
			if err := f.svc.RetryTask(ctx, key, scheduler.Retry{Operator: "ana", Reason: "again"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, ok := f.instance(t, v.Run.ID).Snapshot.AttemptN(1); ok {
		t.Fatal("attempt 1 is still held by the instance; the test needs it evicted")
	}
	ref := protocol.AttemptRef{Run: v.Run.ID, Task: "main", Attempt: 1}
	late := protocol.Completion{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, EventID: "late-ok", Outcome: "succeeded"}
	res, err := f.svc.Workers().Complete(ctx, late, first.Token)
	if err != nil || res.Result != "stale" || res.State != statemodel.StateFailed {
		t.Fatalf("attempt 1's late success: %+v, %v; want stale with FAILED", res, err)
	}
	if _, err := f.svc.Workers().Complete(ctx, late, "0123456789abcdef0123456789abcdef"); !errors.Is(err, protocol.ErrInvalidAttemptToken) {
		t.Fatalf("a forged token for attempt 1: %v, want ErrInvalidToken", err)
	}
}
