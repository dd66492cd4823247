package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/worker"
)

func TestClaimRefusedSkipsHandlerAndDropsMessage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		arrange func(p *peer, ref worker.AttemptRef, env *worker.Envelope)
		code    string
	}{
		{"already claimed", func(p *peer, ref worker.AttemptRef, _ *worker.Envelope) { p.set(ref, "running", "other@boot") }, "already_claimed"},
		{"stale attempt", func(p *peer, ref worker.AttemptRef, _ *worker.Envelope) { p.supersede(ref) }, "stale_attempt"},
		{"cancelled", func(p *peer, ref worker.AttemptRef, _ *worker.Envelope) { p.cancel(ref) }, "illegal_transition"},
		{"invalid token", func(_ *peer, _ worker.AttemptRef, env *worker.Envelope) { env.Token = "forged" }, "invalid_token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			var runs counter
			w := f.newWorker(f.config("refused"), func(ctx context.Context, task worker.Task) error {
				runs.inc(task.Ref())
				return nil
			})
			ref := newAttempt(1)
			env := envelope(ref, "token-"+ref.Run)
			f.peer.store(t, env)
			tc.arrange(f.peer, ref, &env)
			f.send(env)
			f.start(w)

			waitFor(t, "the message to be deleted", func() bool { return f.q.count("delete", f.pool) == 1 })
			claims := f.peer.callsOf("claim", ref)
			if len(claims) != 1 || claims[0].Code != tc.code {
				t.Fatalf("claims = %+v, want one answered %s", claims, tc.code)
			}
			if n := runs.get(ref); n != 0 {
				t.Errorf("handler ran %d times after a refused claim", n)
			}
			if c := f.poolCounts(); c.Total() != 0 {
				t.Errorf("pool queue holds %+v after the refusal, want nothing", c)
			}
			if sends := f.q.completionSends(f.events); len(sends) != 0 {
				t.Errorf("completions sent for a refused claim: %+v", sends)
			}
		})
	}
}

func TestTransientClaimFailureLeavesMessage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var runs counter
	cfg := f.config("transient")
	cfg.VisibilityTimeout = time.Second
	w := f.newWorker(cfg, func(ctx context.Context, task worker.Task) error {
		runs.inc(task.Ref())
		return nil
	})
	ref := newAttempt(1)
	f.peer.store(t, envelope(ref, "token-"+ref.Run))
	f.peer.setUnavailable(ref)
	f.send(envelope(ref, "token-"+ref.Run))
	stop := f.start(w)

	// One delivery tries three times with the same event id, then gives up.
	waitFor(t, "three claims", func() bool { return len(f.peer.callsOf("claim", ref)) >= 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	claims := f.peer.callsOf("claim", ref)
	if claims[0].EventID == "" || claims[1].EventID != claims[0].EventID || claims[2].EventID != claims[0].EventID {
		t.Errorf("retried claims carry event ids %q %q %q, want one id", claims[0].EventID, claims[1].EventID, claims[2].EventID)
	}
	if n := f.q.count("delete", f.pool); n != 0 {
		t.Fatalf("message deleted %d times after a transient claim failure", n)
	}
	if n := runs.get(ref); n != 0 {
		t.Fatalf("handler ran %d times without a claim", n)
	}
	// The message comes back once its visibility timeout runs out.
	deadline := time.Now().Add(waitLimit)
	for {
		msgs, err := sqsClient.Receive(t.Context(), f.pool, queue.ReceiveOptions{Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 1 {
			env, err := worker.ParseEnvelope(msgs[0].Body)
			if err != nil || env.Ref() != ref {
				t.Fatalf("redelivered %q (%v), want the envelope of %s", msgs[0].Body, err, ref)
			}
			if msgs[0].ReceiveCount < 2 {
				t.Errorf("receive count %d, want a redelivery", msgs[0].ReceiveCount)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the message never became visible again")
		}
	}
}

func TestSuccessReportsThenDeletes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// The first two sends of the completion fail before reaching SQS.
	var failed int
	f.q.failSend = func(queueURL, body string) error {
		if ev, _ := protocol.DecodeEvent(body); queueURL == f.events && ev.Completion != nil && failed < 2 {
			failed++
			return errors.New("injected send failure")
		}
		return nil
	}
	var got struct {
		sync.Mutex
		task worker.Task
	}
	w := f.newWorker(f.config("ok"), func(ctx context.Context, task worker.Task) error {
		got.Lock()
		got.task = task
		got.Unlock()
		return task.SetOutputRef("s3://bucket/" + task.Run + "/" + task.Token)
	})
	env := f.dispatch(nil)
	f.start(w)

	c := f.completion(env.Ref())
	waitFor(t, "the message to be deleted", func() bool { return f.q.count("delete", f.pool) >= 1 })
	if c.Outcome != worker.OutcomeSucceeded || c.ErrorCategory != "" || c.Token != env.Token {
		t.Errorf("completion = %+v, want succeeded with the attempt's token", c)
	}
	if want := "s3://bucket/" + env.Run + "/" + env.Token; c.OutputRef != want {
		t.Errorf("output_ref = %q, want %q", c.OutputRef, want)
	}
	got.Lock()
	task := got.task
	got.Unlock()
	if task.Run != env.Run || task.Task != env.Task || task.Attempt != 1 || task.Token != env.Token ||
		string(task.Payload) != `{"n":1}` || string(task.Params) != `{"day":"2026-01-02"}` || task.WorkerID != w.ID() {
		t.Errorf("handler saw %+v, want the envelope's attempt", task)
	}

	// Ordering: every try of the report carries one event id, and the
	// delete of the dispatch message comes after the accepted send.
	ops := f.q.opsSnapshot()
	sent, deleted := -1, -1
	var eventIDs []string
	for i, o := range ops {
		switch {
		case o.Op == "send" && o.Queue == f.events:
			if ev, _ := protocol.DecodeEvent(o.Body); ev.Lease != nil {
				continue
			}
			var tried worker.Completion
			if err := json.Unmarshal([]byte(o.Body), &tried); err != nil {
				t.Fatal(err)
			}
			eventIDs = append(eventIDs, tried.EventID)
			if o.Err == nil && sent < 0 {
				sent = i
			}
		case o.Op == "delete" && o.Queue == f.pool && deleted < 0:
			deleted = i
		}
	}
	if len(eventIDs) != 3 || slices.ContainsFunc(eventIDs, func(id string) bool { return id != c.EventID }) {
		t.Errorf("report tries carried event ids %v, want three tries of %s", eventIDs, c.EventID)
	}
	if sent < 0 || deleted < 0 || deleted < sent {
		t.Errorf("accepted completion send at op %d, dispatch delete at op %d: want the send first", sent, deleted)
	}
	if n := f.q.count("delete", f.pool); n != 1 {
		t.Errorf("dispatch message deleted %d times, want once", n)
	}
	if cnt := f.poolCounts(); cnt.Total() != 0 {
		t.Errorf("pool queue holds %+v, want nothing", cnt)
	}
}

// TestConcurrentCompletionsShareRequests: ten attempts that finish
// together report and delete in fewer requests than attempts: the first
// completion goes alone (held here until every handler has returned), the
// ones finishing meanwhile gather behind it. Every attempt is still
// reported once and its message deleted.
func TestConcurrentCompletionsShareRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 10
	var started, returned atomic.Int32
	handler := func(ctx context.Context, task worker.Task) error {
		started.Add(1)
		for started.Load() < n { // finish together
			if !sleepCtx(ctx, 5*time.Millisecond) {
				return ctx.Err()
			}
		}
		returned.Add(1)
		return nil
	}
	var held atomic.Bool
	f.q.beforeBatch = func(op, queueURL string) {
		if op == "send" && queueURL == f.events && held.CompareAndSwap(false, true) {
			waitFor(t, "every handler to return", func() bool { return returned.Load() == n })
		}
	}
	cfg := f.config("together")
	cfg.Concurrency = n
	w := f.newWorker(cfg, handler)
	var envs []worker.Envelope
	for range n {
		envs = append(envs, f.dispatch(nil))
	}
	f.start(w)
	for _, env := range envs {
		if c := f.completion(env.Ref()); c.Outcome != worker.OutcomeSucceeded {
			t.Errorf("completion of %s = %+v", env.Ref(), c)
		}
	}
	waitFor(t, "every message deleted", func() bool { return f.q.count("delete", f.pool) == n })
	sends, deletes := f.q.batchCount("send", f.events), f.q.batchCount("delete", f.pool)
	t.Logf("%d completions in %d SendMessageBatch requests, %d deletes in %d DeleteMessageBatch requests", n, sends, n, deletes)
	if sends >= n || sends < 2 {
		t.Errorf("%d completions went in %d requests, want the first alone and the rest gathered", n, sends)
	}
	if got := len(f.q.completionSends(f.events)); got != n {
		t.Errorf("%d completions sent, want %d", got, n)
	}
}

func TestCancelRequestReportsCancelled(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	started := make(chan struct{})
	causes := make(chan error, 1)
	w := f.newWorker(f.config("cancel"), func(ctx context.Context, task worker.Task) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	env := f.dispatch(nil)
	f.start(w)
	<-started
	f.peer.cancel(env.Ref())

	c := f.completion(env.Ref())
	if c.Outcome != worker.OutcomeCancelled || c.ErrorCategory != worker.CategoryCancelled {
		t.Errorf("completion = %+v, want cancelled", c)
	}
	if cause := <-causes; cause == nil || cause.Error() != "cancel requested" {
		t.Errorf("handler ctx cause = %v, want the cancel request", cause)
	}
	if hbs := f.peer.callsOf("heartbeat", env.Ref()); len(hbs) == 0 || hbs[len(hbs)-1].Auth != "Bearer "+env.Token {
		t.Errorf("heartbeats = %+v, want some with the attempt's bearer", hbs)
	}
	waitFor(t, "the message to be deleted", func() bool { return f.q.count("delete", f.pool) == 1 })
}

func TestRunTimeoutReportsTimeout(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		handler func(release <-chan struct{}) worker.Handler
	}{
		{"handler returns ctx error", func(<-chan struct{}) worker.Handler {
			return func(ctx context.Context, task worker.Task) error {
				<-ctx.Done()
				return ctx.Err()
			}
		}},
		{"handler ignores ctx", func(release <-chan struct{}) worker.Handler {
			return func(ctx context.Context, task worker.Task) error {
				<-release // outlives the stop timeout: reported without it
				return nil
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			cfg := f.config("timeout")
			cfg.StopTimeout = 200 * time.Millisecond
			w := f.newWorker(cfg, tc.handler(release))
			// A slow heartbeat: what ends the handler is the run timeout,
			// never a lease a loaded machine was late to renew.
			env := f.dispatch(func(e *worker.Envelope) { e.RunTimeout, e.HeartbeatInterval = 300*time.Millisecond, time.Second })
			f.start(w)

			c := f.completion(env.Ref())
			if c.Outcome != worker.OutcomeFailed || c.ErrorCategory != worker.CategoryTimeout || !c.IsRetryable() {
				t.Errorf("completion = %+v, want failed, timeout, retryable", c)
			}
			if !strings.HasPrefix(c.Reason, "run timeout passed") {
				t.Errorf("reason = %q, want it to say the run timeout passed", c.Reason)
			}
			waitFor(t, "the message to be deleted", func() bool { return f.q.count("delete", f.pool) == 1 })
		})
	}
}

func TestStaleHeartbeatEndsHandlerWithoutReport(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	started := make(chan struct{})
	causes := make(chan error, 1)
	w := f.newWorker(f.config("stale"), func(ctx context.Context, task worker.Task) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil // even a success is not reported for a superseded attempt
	})
	env := f.dispatch(nil)
	f.start(w)
	<-started
	f.peer.supersede(env.Ref())

	if cause := <-causes; cause == nil || cause.Error() != "attempt no longer current" {
		t.Errorf("handler ctx cause = %v, want the superseded attempt", cause)
	}
	waitFor(t, "the message to be deleted", func() bool { return f.q.count("delete", f.pool) == 1 })
	if sends := f.q.completionSends(f.events); len(sends) != 0 {
		t.Errorf("completions sent for a superseded attempt: %+v", sends)
	}
	hbs := f.peer.callsOf("heartbeat", env.Ref())
	if len(hbs) == 0 || hbs[len(hbs)-1].Code != "stale_attempt" {
		t.Errorf("last heartbeat = %+v, want stale_attempt", hbs)
	}
}

func TestDuplicateEnvelopeRunsOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var runs counter
	ref := newAttempt(1)
	handler := func(ctx context.Context, task worker.Task) error {
		runs.inc(task.Ref())
		// Hold the attempt until the other delivery's claim was refused,
		// so both deliveries are processed at the same time.
		for len(f.peer.callsOf("claim", ref)) < 2 {
			if !sleepCtx(ctx, 5*time.Millisecond) {
				return ctx.Err()
			}
		}
		return nil
	}
	// Concurrency 1: a worker busy with one delivery cannot take the
	// other, so the two deliveries go to two workers.
	a := f.newWorker(f.config("twin-a"), handler)
	b := f.newWorker(f.config("twin-b"), handler)
	env := envelope(ref, "token-"+ref.Run)
	f.peer.store(t, env)
	f.send(env)
	f.send(env)
	f.start(a)
	f.start(b)

	c := f.completion(ref)
	waitFor(t, "both messages deleted", func() bool { return f.q.count("delete", f.pool) == 2 })
	if n := runs.get(ref); n != 1 {
		t.Errorf("handler ran %d times, want once", n)
	}
	claims := f.peer.callsOf("claim", ref)
	var won, refused []string
	for _, cl := range claims {
		if cl.Status == 200 {
			won = append(won, cl.WorkerID)
		} else if cl.Code == "already_claimed" {
			refused = append(refused, cl.WorkerID)
		}
	}
	if len(won) != 1 || len(refused) != 1 || won[0] == refused[0] {
		t.Errorf("claims won by %v, refused to %v; want one each from different workers", won, refused)
	}
	if c.Outcome != worker.OutcomeSucceeded {
		t.Errorf("completion = %+v, want succeeded", c)
	}
	if sends := f.q.completionSends(f.events); len(sends) != 1 {
		t.Errorf("%d completions sent, want 1", len(sends))
	}
	if cnt := f.poolCounts(); cnt.Total() != 0 {
		t.Errorf("pool queue holds %+v, want nothing", cnt)
	}
}

func TestLeaseMessages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// A fixed clock: lease times are exact.
	now := time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	cfg := f.config("leaser")
	cfg.Clock = func() time.Time { return now }
	cfg.LeaseInterval = 100 * time.Millisecond
	release := make(chan struct{})
	w := f.newWorker(cfg, func(ctx context.Context, task worker.Task) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	env := f.dispatch(nil)
	stop := f.start(w)

	// The lease lists the attempt with a proof made with its token, which
	// the scheduler checks against the token's hash. It is seq 1, though
	// leases listing nothing went before it (the one sent at start): those
	// are never kept, and use up no seq.
	running := f.lease("the attempt running, proven, seq 1", func(l worker.Lease) bool {
		return l.BootID == w.BootID() && l.Seq == 1 && slices.ContainsFunc(l.Running, func(a worker.LeasedAttempt) bool {
			return a.AttemptRef == env.Ref() && protocol.CheckLeaseProof(protocol.HashToken(env.Token), l, a.AttemptRef, a.Proof)
		})
	})
	if running.Worker != "leaser" || running.WorkerID() != w.ID() || w.ID() != "leaser@"+w.BootID() {
		t.Errorf("lease names worker %q (id %q), worker id %q", running.Worker, running.WorkerID(), w.ID())
	}
	if want := now.Add(worker.LeaseLifetime * cfg.LeaseInterval); !running.ExpiresAt.Equal(want) {
		t.Errorf("lease expires at %s, want %s", running.ExpiresAt, want)
	}
	claims := f.peer.callsOf("claim", env.Ref())
	if len(claims) != 1 || claims[0].WorkerID != w.ID() {
		t.Errorf("claims = %+v, want one from %s", claims, w.ID())
	}
	close(release)
	f.completion(env.Ref())
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	final := f.lease("the final lease", func(l worker.Lease) bool {
		return l.BootID == w.BootID() && l.ExpiresAt.Equal(now)
	})
	if len(final.Running) != 0 {
		t.Errorf("final lease lists %v, want nothing running", final.Running)
	}
	if final.Seq < running.Seq {
		t.Errorf("final lease seq %d before %d", final.Seq, running.Seq)
	}
	// Another process start gets another boot id.
	other := f.newWorker(cfg, func(context.Context, worker.Task) error { return nil })
	if other.BootID() == w.BootID() {
		t.Errorf("two workers share boot id %s", w.BootID())
	}
}

func TestShutdownGracePeriod(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config("shutdown")
	cfg.Concurrency = 2
	cfg.ShutdownGrace = 300 * time.Millisecond
	finish := make(chan struct{})
	var started sync.WaitGroup
	started.Add(2)
	w := f.newWorker(cfg, func(ctx context.Context, task worker.Task) error {
		started.Done()
		var p struct{ Mode string }
		if err := task.DecodePayload(&p); err != nil {
			return err
		}
		if p.Mode == "finish" {
			<-finish // finishes within the grace period, ctx or not
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	})
	// A slow heartbeat: what ends the handlers here is the shutdown, never
	// a lease a loaded machine was late to renew.
	finishing := f.dispatch(func(e *worker.Envelope) {
		e.Payload, e.HeartbeatInterval = json.RawMessage(`{"mode":"finish"}`), time.Second
	})
	waiting := f.dispatch(func(e *worker.Envelope) {
		e.Payload, e.HeartbeatInterval = json.RawMessage(`{"mode":"wait"}`), time.Second
	})
	stop := f.start(w)
	started.Wait()

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	close(finish)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if c := f.completion(finishing.Ref()); c.Outcome != worker.OutcomeSucceeded {
		t.Errorf("handler finishing in the grace period: %+v, want succeeded", c)
	}
	c := f.completion(waiting.Ref())
	if c.Outcome != worker.OutcomeFailed || c.ErrorCategory != worker.CategoryWorkerShutdown || !c.IsRetryable() {
		t.Errorf("handler outlasting the grace period: %+v, want failed, worker_shutdown, retryable", c)
	}
	if n := f.q.count("delete", f.pool); n != 2 {
		t.Errorf("%d messages deleted at shutdown, want 2 (both reported)", n)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// dropHeartbeats is a transport that loses heartbeat requests once drop is
// set, as a network partition would; other calls go through.
type dropHeartbeats struct {
	drop atomic.Bool
	sent atomic.Int32 // heartbeats dropped
}

func (d *dropHeartbeats) RoundTrip(r *http.Request) (*http.Response, error) {
	if d.drop.Load() && strings.HasSuffix(r.URL.Path, "/heartbeat") {
		d.sent.Add(1)
		return nil, errors.New("heartbeat dropped by the test's partition")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A worker whose heartbeats stop getting through ends its handler (cause
// ErrLeaseLost) before the attempt's lease ends, reports nothing, and lets
// the message go; while they got through, each renewal moved the fencing
// deadline on.
func TestLeaseLostEndsHandlerBeforeLeaseEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tr := &dropHeartbeats{}
	cfg := f.config("partitioned")
	cfg.HTTPClient = &http.Client{Transport: tr, Timeout: 5 * time.Second}
	type ending struct {
		cause    error
		at       time.Time
		deadline time.Time
		first    time.Time
	}
	ended := make(chan ending, 1)
	w := f.newWorker(cfg, func(ctx context.Context, task worker.Task) error {
		first := task.FencingDeadline()
		// Renewals get through: the deadline moves on.
		for !task.FencingDeadline().After(first) {
			if !sleepCtx(ctx, 20*time.Millisecond) {
				break
			}
		}
		tr.drop.Store(true)
		<-ctx.Done()
		ended <- ending{cause: context.Cause(ctx), at: time.Now(), deadline: task.FencingDeadline(), first: first}
		return nil // a success that must not be reported
	})
	// A 1 s beat: a 3 s heartbeat timeout, so a 1 s margin.
	env := f.dispatch(func(e *worker.Envelope) { e.HeartbeatInterval = time.Second })
	f.start(w)

	e := <-ended
	if !errors.Is(e.cause, worker.ErrLeaseLost) {
		t.Fatalf("handler ctx cause = %v, want ErrLeaseLost", e.cause)
	}
	if !e.deadline.After(e.first) {
		t.Errorf("fencing deadline %s never moved on from %s while heartbeats got through", e.deadline, e.first)
	}
	// The lease ends a margin (one beat) after the fencing deadline.
	if leaseEnd := e.deadline.Add(time.Second); e.at.Before(e.deadline) || !e.at.Before(leaseEnd) {
		t.Errorf("handler ctx ended at %s, want within [deadline %s, lease end %s)", e.at, e.deadline, leaseEnd)
	}
	waitFor(t, "the message to be deleted", func() bool { return f.q.count("delete", f.pool) == 1 })
	if sends := f.q.completionSends(f.events); len(sends) != 0 {
		t.Errorf("completions sent for an attempt whose lease was lost: %+v", sends)
	}
	if tr.sent.Load() == 0 {
		t.Error("no heartbeat was dropped")
	}
	hbs := f.peer.callsOf("heartbeat", env.Ref())
	if len(hbs) == 0 {
		t.Error("no heartbeat got through before the partition")
	}
}

// The SDK sends a valid event id with every claim, heartbeat and report
// (the peer refuses an invalid one with 422, as the API does), and each
// heartbeat is a fact of its own with an id of its own.
func TestEveryCallCarriesAValidEventID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var ref worker.AttemptRef
	beats := func() int { return len(f.peer.callsOf("heartbeat", ref)) }
	w := f.newWorker(f.config("ids"), func(ctx context.Context, task worker.Task) error {
		for beats() < 2 {
			if !sleepCtx(ctx, 10*time.Millisecond) {
				return ctx.Err()
			}
		}
		return nil
	})
	// A 500 ms beat: a lease long enough that a loaded machine does not
	// fence the attempt before its beats are counted.
	env := f.dispatch(func(e *worker.Envelope) { e.HeartbeatInterval = 500 * time.Millisecond })
	ref = env.Ref()
	f.start(w)

	c := f.completion(ref)
	if err := worker.CheckEventID(c.EventID); err != nil {
		t.Errorf("completion event id %q: %v", c.EventID, err)
	}
	calls := append(f.peer.callsOf("claim", ref), f.peer.callsOf("heartbeat", ref)...)
	seen := map[string]bool{}
	for _, call := range calls {
		if err := worker.CheckEventID(call.EventID); err != nil || call.Status != http.StatusOK {
			t.Errorf("%s with event id %q answered %d %s (%v), want 200 and a valid id", call.Route, call.EventID, call.Status, call.Code, err)
		}
		if call.Route == "heartbeat" && seen[call.EventID] {
			t.Errorf("heartbeat event id %q sent twice, want one per beat", call.EventID)
		}
		seen[call.EventID] = true
	}
	if len(calls) < 3 {
		t.Errorf("%d calls, want a claim and at least two heartbeats", len(calls))
	}
}

// The handler runs the attempt as the scheduler stored it, from the claim
// answer, whatever the message says: a message altered on the queue (its
// payload, params, job, logical time or run timeout) cannot change what
// runs. A claim answer whose envelope is another attempt's runs nothing.
func TestWorkerRunsTheClaimedEnvelope(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var got struct {
		sync.Mutex
		tasks []worker.Task
	}
	w := f.newWorker(f.config("trusting"), func(ctx context.Context, task worker.Task) error {
		got.Lock()
		got.tasks = append(got.tasks, task)
		got.Unlock()
		return nil
	})
	logical := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	ref := newAttempt(1)
	stored := envelope(ref, "token-"+ref.Run)
	stored.Job, stored.LogicalTime = "etl", logical
	f.peer.store(t, stored)
	// The message names the same attempt with its token, and the rest
	// forged: only the claim answer may say what runs.
	forged := stored
	forged.Job, forged.LogicalTime = "other", logical.AddDate(1, 0, 0)
	forged.Payload, forged.Params = json.RawMessage(`{"command":["rm","-rf","/"]}`), json.RawMessage(`{"day":"1999-01-01"}`)
	forged.RunTimeout = time.Nanosecond
	f.send(forged)
	// An attempt whose claim answer is another attempt's envelope.
	mismatched := envelope(newAttempt(1), "")
	mismatched.Token = "token-" + mismatched.Run
	f.peer.store(t, mismatched)
	other := stored
	f.peer.setEnvelope(mismatched.Ref(), map[string]any{"run": other.Run, "task": other.Task, "attempt": other.Attempt,
		"token": mismatched.Token, "pool": "default", "payload": map[string]any{"n": 2}})
	f.send(mismatched)
	f.start(w)

	c := f.completion(stored.Ref())
	if c.Outcome != worker.OutcomeSucceeded {
		t.Fatalf("completion %+v, want succeeded (the stored run timeout, not the forged 1ns)", c)
	}
	waitFor(t, "both messages to be deleted", func() bool { return f.q.count("delete", f.pool) == 2 })
	got.Lock()
	defer got.Unlock()
	if len(got.tasks) != 1 {
		t.Fatalf("handler ran %d times, want once (not for the mismatched claim answer): %+v", len(got.tasks), got.tasks)
	}
	task := got.tasks[0]
	if string(task.Payload) != string(stored.Payload) || string(task.Params) != string(stored.Params) ||
		task.Job != "etl" || !task.LogicalTime.Equal(logical) {
		t.Errorf("handler saw job %q, logical time %s, payload %s, params %s; want the stored %q, %s, %s, %s",
			task.Job, task.LogicalTime, task.Payload, task.Params, "etl", logical, stored.Payload, stored.Params)
	}
	if claims := f.peer.callsOf("claim", mismatched.Ref()); len(claims) != 1 || claims[0].Status != 200 {
		t.Errorf("claims of the mismatched attempt: %+v, want one that succeeded", claims)
	}
	if comps := f.peer.callsOf("complete", mismatched.Ref()); len(comps) != 0 {
		t.Errorf("the mismatched attempt was reported: %+v", comps)
	}
}
