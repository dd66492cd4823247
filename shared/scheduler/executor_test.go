package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/scheduler/workers"
	"github.com/runledger/runledger/shared/store/memstore"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// executorDouble is an Executor of type lambda that records what the
// scheduler asks of it.
type executorDouble struct {
	mu       sync.Mutex
	started  []protocol.Envelope
	specs    []jobspec.Executor
	stopped  []string
	startErr error
	verdict  scheduler.Verdict
	checked  int
}

func (e *executorDouble) Type() string { return jobspec.ExecutorLambda }

func (e *executorDouble) Start(_ context.Context, env protocol.Envelope, spec jobspec.Executor) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.startErr != nil {
		return "", e.startErr
	}
	e.started = append(e.started, env)
	e.specs = append(e.specs, spec)
	return fmt.Sprintf("inv-%d", len(e.started)), nil
}

func (e *executorDouble) Stop(_ context.Context, id string, _ jobspec.Executor) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped = append(e.stopped, id)
	return nil
}

func (e *executorDouble) Check(_ context.Context, _ jobspec.Executor, _ ledger.Instance, a statemodel.AttemptRecord) (scheduler.Evidence, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.checked++
	v := e.verdict
	if v == "" {
		v = scheduler.VerdictUnknown
	}
	return scheduler.Evidence{Verdict: v, ErrorCategory: "invocation_failed", Detail: map[string]string{"executor_id": a.ExecutorID}}, nil
}

func (e *executorDouble) last(t *testing.T) protocol.Envelope {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.started) == 0 {
		t.Fatal("the executor started nothing")
	}
	return e.started[len(e.started)-1]
}

// executorFixture is the in-memory fixture with the double registered and
// the function "fn" allowed.
func executorFixture(t *testing.T) (*fixture, *executorDouble) {
	t.Helper()
	c := newClock()
	q := newMemQueue()
	n := seq.Add(1)
	pool := q.create(fmt.Sprintf("sched%d-pool", n))
	events := q.create(fmt.Sprintf("sched%d-events", n))
	st := memstore.New(memstore.WithClock(c.Now), memstore.WithTimerHorizon(ledger.IndexEveryTimer))
	ev := &evidenceDouble{}
	ev.verdict.Store(scheduler.VerdictSucceeded) // would win if it were asked
	ex := &executorDouble{}
	svc := mustNew(st, q, scheduler.Config{
		Pools: map[string]string{"default": pool}, EventsQueueURL: events, Now: c.Now, Evidence: []scheduler.EvidenceProvider{ev},
		Executors: []scheduler.Executor{ex}, Allowed: jobspec.Allowed{LambdaFunctions: []string{"fn"}},
	})
	return &fixture{svc: svc, st: st, q: q, pool: pool, events: events, clock: c, ev: ev}, ex
}

const lambdaJob = `{"name":"j","executor":{"type":"lambda","function":"fn"},"timeouts":{"heartbeat":"10s","queue":"1m","cancel":"30s"},` +
	`"evidence_window":"1m","retry":{"max_attempts":3,"initial_interval":"1s","jitter":"none"}}`

func (f *fixture) triggerJob(t *testing.T, spec string) string {
	t.Helper()
	ctx := context.Background()
	j, err := jobspec.Parse([]byte(spec), f.svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Jobs().CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	v, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: j.Name})
	if err != nil {
		t.Fatal(err)
	}
	return v.Run.ID
}

// A task whose executor is lambda is started by the executor, not sent to
// the pool's queue; the attempt records the executor and its id, and the
// envelope Start got is the one a claim accepts.
func TestExecutorStartsInsteadOfTheQueue(t *testing.T) {
	f, ex := executorFixture(t)
	run := f.triggerJob(t, lambdaJob)
	env := ex.last(t)
	if env.Run != run || env.Task != "main" || env.Attempt != 1 || env.Token == "" || env.Job != "j" {
		t.Fatalf("envelope %+v", env)
	}
	if s := ex.specs[0]; s.Type != "lambda" || s.Function != "fn" {
		t.Fatalf("spec %+v", ex.specs[0])
	}
	msgs, err := f.q.Receive(context.Background(), f.pool, queue.ReceiveOptions{MaxMessages: 1})
	if err != nil || len(msgs) != 0 {
		t.Fatalf("the pool's queue got %d messages (%v), want none", len(msgs), err)
	}
	inst := f.instance(t, run)
	cur, _ := inst.Snapshot.Current()
	if inst.Snapshot.State != statemodel.StateQueued || cur.Executor != "lambda" || cur.ExecutorID != "inv-1" {
		t.Fatalf("%s with attempt %+v, want QUEUED by lambda inv-1", inst.Snapshot.State, cur)
	}
	if _, err := f.svc.Workers().Claim(context.Background(), refOf(env), env.Token, "fn@req", "claim-1"); err != nil {
		t.Fatalf("claim with the started envelope: %v", err)
	}
}

// A Start error is a failed dispatch: the instance waits SCHEDULED, and
// past the queue timeout it fails with the error as its reason.
func TestExecutorStartErrorIsAFailedDispatch(t *testing.T) {
	f, ex := executorFixture(t)
	ex.startErr = errors.New("TooManyRequestsException: rate exceeded")
	run := f.triggerJob(t, lambdaJob)
	if s := f.instance(t, run).Snapshot.State; s != statemodel.StateScheduled {
		t.Fatalf("state %s after a failed start, want SCHEDULED", s)
	}
	f.clock.Advance(61 * time.Second)
	if _, err := f.svc.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	inst := f.instance(t, run)
	h, err := ledger.FullHistory(context.Background(), f.st, inst.Key)
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1]
	if inst.Snapshot.State != statemodel.StateFailed || last.Event != statemodel.EvDispatchFailed || !strings.Contains(last.Reason, "rate exceeded") ||
		!strings.Contains(last.Reason, "dispatched to lambda fn") {
		t.Fatalf("state %s, last %s %q; want FAILED by dispatch_failed naming the error", inst.Snapshot.State, last.Event, last.Reason)
	}
}

// A LOST attempt started by an executor is judged by that executor's
// evidence only: the configured providers (which would say succeeded) are
// not asked.
func TestExecutorEvidenceIsChosenByTheAttempt(t *testing.T) {
	f, ex := executorFixture(t)
	ex.verdict = scheduler.VerdictFailed
	run := f.triggerJob(t, lambdaJob)
	env := ex.last(t)
	if _, err := f.svc.Workers().Claim(context.Background(), refOf(env), env.Token, "fn@req", "claim-1"); err != nil {
		t.Fatal(err)
	}
	f.lose(t)
	snap := f.instance(t, run).Snapshot
	a1, _ := snap.AttemptN(1)
	if snap.State != statemodel.StateUpForRetry || a1.ErrorCategory != "invocation_failed" || ex.checked == 0 || f.ev.asked.Load() != 0 {
		t.Fatalf("state %s, attempt 1 %q, executor asked %d, queue evidence asked %d; want UP_FOR_RETRY from the executor's evidence alone",
			snap.State, a1.ErrorCategory, ex.checked, f.ev.asked.Load())
	}
}

// A cancel that reaches its timeout asks the attempt's executor to stop
// the work, with the attempt's executor id.
func TestCancelTimeoutStopsTheExecutorsWork(t *testing.T) {
	f, ex := executorFixture(t)
	run := f.triggerJob(t, lambdaJob)
	env := ex.last(t)
	ctx := context.Background()
	if _, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "fn@req", "claim-1"); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.CancelRun(ctx, run, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Workers().Heartbeat(ctx, refOf(env), env.Token, "hb-1"); err != nil {
		t.Fatal(err)
	}
	if s := f.instance(t, run).Snapshot.State; s != statemodel.StateCancelling || len(ex.stopped) != 0 {
		t.Fatalf("state %s, stopped %v; want CANCELLING and nothing stopped yet", s, ex.stopped)
	}
	f.clock.Advance(31 * time.Second)
	if _, err := f.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ex.stopped) != 1 || ex.stopped[0] != "inv-1" {
		t.Fatalf("stopped %v, want [inv-1]", ex.stopped)
	}
}

// failedInvocation is Lambda's on-failure record of the invocation that
// started env as id.
func failedInvocation(env protocol.Envelope, id string) protocol.InvocationFailure {
	return protocol.InvocationFailure{
		RequestID: id, FunctionARN: "arn:aws:lambda:eu-west-1:123456789012:function:fn", Condition: protocol.ConditionRetriesExhausted,
		ApproximateInvokeCount: 3, Envelope: env, FunctionError: "Unhandled", ErrorType: "Runtime.ExitError", ErrorMessage: "signal: killed",
	}
}

// A failed invocation of a LOST attempt is a confirmed failure: retried
// by policy at once, without waiting out the evidence window or the
// clock-skew fence.
func TestFailedInvocationResolvesALostAttempt(t *testing.T) {
	f, ex := executorFixture(t)
	run := f.triggerJob(t, lambdaJob)
	env := ex.last(t)
	if _, err := f.svc.Workers().Claim(context.Background(), refOf(env), env.Token, "fn@req", "claim-1"); err != nil {
		t.Fatal(err)
	}
	f.lose(t)
	if s := f.instance(t, run).Snapshot.State; s != statemodel.StateLost {
		t.Fatalf("state %s, want LOST (the lambda evidence knows nothing yet)", s)
	}
	f.deliver(t, failedInvocation(env, "inv-1"))
	inst := f.instance(t, run)
	a1, _ := inst.Snapshot.AttemptN(1)
	// The retry's backoff is 1 s from now, not the lease's end plus the
	// 30 s clock skew: the evidence proves the process gone.
	if inst.Snapshot.State != statemodel.StateUpForRetry || a1.ErrorCategory != workers.CategoryInvocationFailed ||
		a1.Outcome != statemodel.OutcomeFailed || !inst.Snapshot.RetryAt.Equal(f.clock.Now().Add(time.Second)) {
		t.Fatalf("state %s retry at %s, attempt 1 %s %q; want UP_FOR_RETRY 1 s from now after a confirmed failure",
			inst.Snapshot.State, inst.Snapshot.RetryAt, a1.Outcome, a1.ErrorCategory)
	}
	h, err := ledger.FullHistory(context.Background(), f.st, inst.Key)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, tr := range h {
		if tr.Event == statemodel.EvEvidenceFailed && tr.Evidence["request_id"] == "inv-1" && tr.Evidence["condition"] == "RetriesExhausted" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no evidence transition naming the invocation in %+v", h)
	}
}

// While the attempt still holds its lease the record waits on the events
// queue until the lease ends; delivered then, it resolves the attempt.
func TestFailedInvocationWaitsForTheLease(t *testing.T) {
	f, ex := executorFixture(t)
	run := f.triggerJob(t, lambdaJob)
	env := ex.last(t)
	if _, err := f.svc.Workers().Claim(context.Background(), refOf(env), env.Token, "fn@req", "claim-1"); err != nil {
		t.Fatal(err)
	}
	f.deliver(t, failedInvocation(env, "inv-1"))
	if s := f.instance(t, run).Snapshot.State; s != statemodel.StateRunning {
		t.Fatalf("state %s, want RUNNING until the lease ends", s)
	}
	mq := f.q.(*memQueue)
	mq.mu.Lock()
	held := mq.queues[f.events]
	mq.mu.Unlock()
	if len(held) != 1 || !strings.Contains(held[0].Body, `"requestId":"inv-1"`) {
		t.Fatalf("events queue holds %d messages, want the record once", len(held))
	}
	f.clock.Advance(11 * time.Second)
	f.deliver(t, failedInvocation(env, "inv-1"))
	snap := f.instance(t, run).Snapshot
	if a1, _ := snap.AttemptN(1); snap.State != statemodel.StateUpForRetry || a1.ErrorCategory != workers.CategoryInvocationFailed {
		t.Fatalf("state %s, attempt 1 %q; want UP_FOR_RETRY from the invocation's failure once the lease ended", snap.State, a1.ErrorCategory)
	}
}

// A record whose token or request id does not match the attempt is
// refused and changes nothing.
func TestFailedInvocationMustMatchTheAttempt(t *testing.T) {
	f, ex := executorFixture(t)
	run := f.triggerJob(t, lambdaJob)
	env := ex.last(t)
	if _, err := f.svc.Workers().Claim(context.Background(), refOf(env), env.Token, "fn@req", "claim-1"); err != nil {
		t.Fatal(err)
	}
	f.lose(t)
	forged := env
	forged.Token = "0123456789abcdef0123456789abcdef"
	f.deliver(t, failedInvocation(forged, "inv-1"), failedInvocation(env, "inv-other"))
	if snap := f.instance(t, run).Snapshot; snap.State != statemodel.StateLost || snap.Attempt != 1 {
		t.Fatalf("state %s attempt %d, want attempt 1 still LOST", snap.State, snap.Attempt)
	}
}

// An executor's Start gets the attempt's one-time claim nonce beside its
// token. The claim route takes the nonce as its bearer once: the claim
// answers with the token (and never the nonce); after it, the nonce claims
// nothing (the same worker's retry included), and it never heartbeats or
// completes, before the claim or after.
func TestClaimNonceIsGoodForOneClaim(t *testing.T) {
	f, ex := executorFixture(t)
	f.triggerJob(t, lambdaJob)
	ctx := context.Background()
	env := ex.last(t)
	ref := refOf(env)
	if env.ClaimNonce == "" || env.ClaimNonce == env.Token {
		t.Fatalf("Start got nonce %q, token %q: want a nonce that is not the token", env.ClaimNonce, env.Token)
	}
	nonceRefused := func(when string) {
		t.Helper()
		if _, err := f.svc.Workers().Heartbeat(ctx, ref, env.ClaimNonce, "beat-"+strings.ReplaceAll(when, " ", "-")); !errors.Is(err, protocol.ErrInvalidAttemptToken) {
			t.Fatalf("heartbeat with the nonce %s: %v, want invalid token", when, err)
		}
		comp := protocol.Completion{Run: env.Run, Task: env.Task, Attempt: env.Attempt, EventID: "done-" + strings.ReplaceAll(when, " ", "-"), Outcome: protocol.OutcomeSucceeded}
		if _, err := f.svc.Workers().Complete(ctx, comp, env.ClaimNonce); !errors.Is(err, protocol.ErrInvalidAttemptToken) {
			t.Fatalf("complete with the nonce %s: %v, want invalid token", when, err)
		}
	}
	nonceRefused("before the claim")

	ans, err := f.svc.Workers().Claim(ctx, ref, env.ClaimNonce, "box@boot", "claim")
	if err != nil || !ans.Claimed || ans.Envelope == nil || ans.Envelope.Token != env.Token {
		t.Fatalf("claim with the nonce: %+v, %v; want claimed, answering the token", ans, err)
	}
	if b, err := wire.Marshal(ans); err != nil || strings.Contains(string(b), env.ClaimNonce) {
		t.Fatalf("the claim's answer %s (%v) holds the nonce", b, err)
	}
	for _, worker := range []string{"box@boot", "thief@boot"} {
		if _, err := f.svc.Workers().Claim(ctx, ref, env.ClaimNonce, worker, "claim"); !errors.Is(err, protocol.ErrInvalidAttemptToken) {
			t.Fatalf("a second claim with the nonce by %s: %v, want invalid token", worker, err)
		}
	}
	nonceRefused("after the claim")

	// The token the claim answered is the attempt's.
	if again, err := f.svc.Workers().Claim(ctx, ref, env.Token, "box@boot", "claim"); err != nil || !again.Claimed {
		t.Fatalf("the claimer's retry with the token: %+v, %v; want its first answer", again, err)
	}
	if _, err := f.svc.Workers().Heartbeat(ctx, ref, env.Token, "beat"); err != nil {
		t.Fatalf("heartbeat with the token: %v", err)
	}
	comp := protocol.Completion{Run: env.Run, Task: env.Task, Attempt: env.Attempt, EventID: "done", Outcome: protocol.OutcomeSucceeded}
	if res, err := f.svc.Workers().Complete(ctx, comp, env.Token); err != nil || res.State != statemodel.StateSucceeded {
		t.Fatalf("complete with the token: %+v, %v", res, err)
	}
}
