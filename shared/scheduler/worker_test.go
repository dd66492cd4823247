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
	"github.com/runledger/runledger/statemodel"
)

// queued creates a one-task job (retried, 1 s apart), triggers it and
// returns the envelope of attempt 1, not yet claimed.
func (f *fixture) queued(t *testing.T) protocol.Envelope {
	t.Helper()
	ctx := context.Background()
	j, err := jobspec.Parse([]byte(`{"name":"j","timeouts":{"heartbeat":"10s"},"retry":{"max_attempts":3,"initial_interval":"1s","jitter":"none"}}`), f.svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Jobs().CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "j"}); err != nil {
		t.Fatal(err)
	}
	return f.nextEnvelope(t)
}

// nextEnvelope receives the next envelope from the pool queue.
func (f *fixture) nextEnvelope(t *testing.T) protocol.Envelope {
	t.Helper()
	msgs, err := f.q.Receive(context.Background(), f.pool, queue.ReceiveOptions{MaxMessages: 1, Wait: 5 * time.Second})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("no envelope: %v %d", err, len(msgs))
	}
	env, err := protocol.ParseEnvelope(msgs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func refOf(env protocol.Envelope) protocol.AttemptRef {
	return protocol.AttemptRef{Run: env.Run, Task: env.Task, Attempt: env.Attempt}
}

// A client's event id is scoped by attempt and route: the worker that
// claimed attempt 1 with an id claims attempt 2 with the same id, and a
// completion may reuse it too.
func TestEventIDScopedByAttemptAndRoute(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	env1 := f.queued(t)
	if _, err := f.svc.Workers().Claim(ctx, refOf(env1), env1.Token, "w@boot", "same-id"); err != nil {
		t.Fatalf("claim attempt 1: %v", err)
	}
	res, err := f.svc.Workers().Complete(ctx, protocol.Completion{Run: env1.Run, Task: env1.Task, Attempt: env1.Attempt, EventID: "same-id", Outcome: "failed", ErrorCategory: "boom"}, env1.Token)
	if err != nil || res.Result != "applied" || res.State != statemodel.StateUpForRetry {
		t.Fatalf("fail attempt 1 with the claim's id: %+v, %v; want applied, UP_FOR_RETRY", res, err)
	}
	f.clock.Advance(2 * time.Second)
	if err := f.svc.FireTimer(ctx, ledger.InstanceKey{Run: env1.Run, Task: env1.Task}); err != nil {
		t.Fatal(err)
	}
	env2 := f.nextEnvelope(t)
	if env2.Attempt != 2 {
		t.Fatalf("dispatched attempt %d, want 2", env2.Attempt)
	}
	if _, err := f.svc.Workers().Claim(ctx, refOf(env2), env2.Token, "w@boot", "same-id"); err != nil {
		t.Fatalf("claim attempt 2 with attempt 1's claim id: %v, want claimed", err)
	}
	inst := f.instance(t, env1.Run)
	if a, _ := inst.Snapshot.AttemptN(2); a.WorkerID != "w@boot" || inst.Snapshot.State != statemodel.StateRunning {
		t.Fatalf("attempt 2 = %+v in %s, want RUNNING for w@boot", a, inst.Snapshot.State)
	}
	// The scheduler's own ids all hold a colon; its dependency verdict too.
	hist, err := ledger.FullHistory(ctx, f.st, ledger.InstanceKey{Run: env1.Run, Task: env1.Task})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range hist {
		if tr.Actor != statemodel.ActorWorker && !strings.Contains(tr.EventID, ":") {
			t.Errorf("scheduler event %s has id %q, want one with a colon", tr.Event, tr.EventID)
		}
	}
}

// A duplicate claim id is the winner's retry only from the winner: the same
// id from another worker is already_claimed.
func TestDuplicateClaimIDFromAnotherWorker(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	env := f.queued(t)
	first, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "a@boot", "claim-1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "a@boot", "claim-1")
	if err != nil || !again.LeaseExpiresAt.Equal(first.LeaseExpiresAt) {
		t.Fatalf("the winner's retry: %+v, %v; want the same lease %s", again, err, first.LeaseExpiresAt)
	}
	if _, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "b@boot", "claim-1"); !errors.Is(err, protocol.ErrAlreadyClaimed) {
		t.Fatalf("another worker with the winner's id: %v, want ErrAlreadyClaimed", err)
	}
	if _, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "b@boot", "claim-2"); !errors.Is(err, protocol.ErrAlreadyClaimed) {
		t.Fatalf("another worker with its own id: %v, want ErrAlreadyClaimed", err)
	}
}

// Every worker route needs a client event id: present, 1-128 characters of
// [A-Za-z0-9._-], not one of the scheduler's. Nothing is written.
func TestWorkerRoutesRequireClientEventID(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	env := f.queued(t)
	ref := refOf(env)
	for _, id := range []string{"", "dispatch:2", "deps", "retry:1", strings.Repeat("x", 129)} {
		var fe *protocol.FieldError
		if _, err := f.svc.Workers().Claim(ctx, ref, env.Token, "w@boot", id); !errors.As(err, &fe) {
			t.Errorf("claim with event id %q: %v, want a *protocol.FieldError", id, err)
		}
	}
	before := f.instance(t, env.Run).Snapshot
	if before.State != statemodel.StateQueued {
		t.Fatalf("after refused claims: %s, want QUEUED", before.State)
	}
	if _, err := f.svc.Workers().Claim(ctx, ref, env.Token, "w@boot", "c1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "alive:1:5", "deps"} {
		var fe *protocol.FieldError
		if _, err := f.svc.Workers().Heartbeat(ctx, ref, env.Token, id); !errors.As(err, &fe) {
			t.Errorf("heartbeat with event id %q: %v, want a *protocol.FieldError", id, err)
		}
		c := protocol.Completion{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, EventID: id, Outcome: "succeeded"}
		if _, err := f.svc.Workers().Complete(ctx, c, env.Token); !errors.As(err, &fe) || !errors.Is(err, workers.ErrInvalidCompletion) {
			t.Errorf("complete with event id %q: %v, want an invalid completion with a *protocol.FieldError", id, err)
		}
	}
	if st := f.instance(t, env.Run).Snapshot.State; st != statemodel.StateRunning {
		t.Fatalf("after refused reports: %s, want RUNNING", st)
	}
}

// Concurrent deliveries of one claim (same worker, same id) all answer
// claimed with one lease, and of one completion all answer the state that
// stands after the race, whichever delivery won.
func TestDuplicateAnswersReportTheStateThatStands(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	env := f.queued(t)
	ref := refOf(env)
	const n = 8
	claims := make([]error, n)
	leases := make([]time.Time, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-gate
			res, err := f.svc.Workers().Claim(ctx, ref, env.Token, "w@boot", "claim-1")
			claims[i], leases[i] = err, res.LeaseExpiresAt
		})
	}
	close(gate)
	wg.Wait()
	for i, err := range claims {
		if err != nil || !leases[i].Equal(leases[0]) || leases[i].IsZero() {
			t.Errorf("claim delivery %d: lease %s, %v; want claimed with lease %s", i, leases[i], err, leases[0])
		}
	}

	results := make([]protocol.CompleteAnswer, n)
	errs := make([]error, n)
	gate = make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			c := protocol.Completion{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, EventID: "done-1", Outcome: "succeeded"}
			results[i], errs[i] = f.svc.Workers().Complete(ctx, c, env.Token)
		})
	}
	close(gate)
	wg.Wait()
	applied := 0
	for i, r := range results {
		if errs[i] != nil || r.State != statemodel.StateSucceeded {
			t.Errorf("completion delivery %d: %+v, %v; want state SUCCEEDED", i, r, errs[i])
		}
		if r.Result == "applied" {
			applied++
		}
	}
	if applied != 1 {
		t.Errorf("%d deliveries applied, want 1", applied)
	}
}

// A refused report names what refused it, not "already claimed" because
// the attempt happens to be claimed.
func TestRefusedReportAnswersItsRealCode(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	run, env := f.running(t, "w@boot")
	ref := refOf(env)
	// No cancel was requested: a "cancelled" report has no row while RUNNING.
	_, err := f.svc.Workers().Complete(ctx, protocol.Completion{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, EventID: "cancel-1", Outcome: "cancelled"}, env.Token)
	if !errors.Is(err, statemodel.ErrIllegalTransition) || errors.Is(err, protocol.ErrAlreadyClaimed) {
		t.Fatalf("cancelled report while RUNNING: %v, want ErrIllegalTransition", err)
	}
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateRunning {
		t.Fatalf("after the refused report: %s, want RUNNING", st)
	}
	// The claim route alone answers already_claimed for a claimed attempt.
	if _, err := f.svc.Workers().Claim(ctx, ref, env.Token, "other@boot", "claim-x"); !errors.Is(err, protocol.ErrAlreadyClaimed) {
		t.Fatalf("a second worker's claim: %v, want ErrAlreadyClaimed", err)
	}
	ok, err := f.svc.Workers().Complete(ctx, protocol.Completion{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, EventID: "done-1", Outcome: "succeeded"}, env.Token)
	if err != nil || ok.State != statemodel.StateSucceeded {
		t.Fatalf("succeeded report: %+v, %v", ok, err)
	}
	// Terminal: a heartbeat and another report are illegal transitions.
	if _, err := f.svc.Workers().Heartbeat(ctx, ref, env.Token, "beat-9"); !errors.Is(err, statemodel.ErrIllegalTransition) {
		t.Errorf("heartbeat after SUCCEEDED: %v, want ErrIllegalTransition", err)
	}
	if _, err := f.svc.Workers().Complete(ctx, protocol.Completion{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, EventID: "done-2", Outcome: "failed"}, env.Token); !errors.Is(err, statemodel.ErrIllegalTransition) {
		t.Errorf("a second report after SUCCEEDED: %v, want ErrIllegalTransition", err)
	}
}

// The claim answer carries the envelope its dispatch sent (docs/api.md),
// so an executor that starts a process with only run, task, attempt and
// token learns its payload and params by claiming; the winner's retry
// gets it again.
func TestClaimAnswersWithTheEnvelope(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j, err := jobspec.Parse([]byte(`{"name":"env","payload":{"n":7}}`), f.svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Jobs().CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "env", Params: []byte(`{"day":"mon"}`)}); err != nil {
		t.Fatal(err)
	}
	sent := f.nextEnvelope(t)
	for _, try := range []string{"first", "retry"} {
		ans, err := f.svc.Workers().Claim(ctx, refOf(sent), sent.Token, "w@boot", "c1")
		if err != nil || ans.Envelope == nil {
			t.Fatalf("%s claim: %+v, %v; want an envelope", try, ans, err)
		}
		got := *ans.Envelope
		if got.Ref() != sent.Ref() || got.Token != sent.Token || got.Job != "env" || got.Pool != sent.Pool ||
			string(got.Payload) != string(sent.Payload) || string(got.Params) != `{"day":"mon"}` ||
			!got.LogicalTime.Equal(sent.LogicalTime) || !got.ClaimBy.Equal(sent.ClaimBy) ||
			got.HeartbeatInterval != sent.HeartbeatInterval || got.RunTimeout != sent.RunTimeout {
			t.Fatalf("%s claim's envelope\n%+v\nthe dispatched one\n%+v", try, got, sent)
		}
	}
}

// downQueue refuses every send: a dispatch never gets its envelope out,
// so its task stays SCHEDULED.
type downQueue struct{ testQueue }

func (downQueue) Send(context.Context, string, string, map[string]string) (string, error) {
	return "", errors.New("queue down")
}

func (downQueue) SendBatch(context.Context, string, []queue.Entry) ([]queue.Result, error) {
	return nil, errors.New("queue down")
}

// A claim of the next attempt of a task whose dispatch write has not
// landed within the claim's wait is answered "not dispatched yet" (503),
// not invalid_token: a worker that got an envelope before its write keeps
// it and claims again, instead of dropping it and leaving the attempt to
// its queue timeout. A claim of any other attempt is still refused.
func TestClaimBeforeTheDispatchWriteIsNotARefusal(t *testing.T) {
	c := newClock()
	q := newMemQueue()
	pool := q.create(fmt.Sprintf("sched%d-pool", seq.Add(1)))
	svc := mustNew(memstore.New(memstore.WithClock(c.Now), memstore.WithTimerHorizon(ledger.IndexEveryTimer)), downQueue{q}, scheduler.Config{
		Pools: map[string]string{"default": pool}, Now: c.Now, ClaimWait: 20 * time.Millisecond,
	})
	ctx := context.Background()
	j, err := jobspec.Parse([]byte(`{"name":"early"}`), svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Jobs().CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	v, _, err := svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "early"})
	if err != nil {
		t.Fatal(err)
	}
	key := v.Tasks[0].Instance.Key
	if st := v.Tasks[0].Instance.Snapshot.State; st != statemodel.StateScheduled {
		t.Fatalf("task is %s, want SCHEDULED (its dispatch failed)", st)
	}
	next := protocol.AttemptRef{Run: key.Run, Task: key.Task, Attempt: 1}
	if _, err := svc.Workers().Claim(ctx, next, "any-token", "w@boot", "c1"); !errors.Is(err, scheduler.ErrNotDispatchedYet) {
		t.Fatalf("claim of the next attempt before its dispatch write: %v, want ErrNotDispatchedYet", err)
	}
	later := protocol.AttemptRef{Run: key.Run, Task: key.Task, Attempt: 2}
	if _, err := svc.Workers().Claim(ctx, later, "any-token", "w@boot", "c2"); !errors.Is(err, protocol.ErrInvalidAttemptToken) {
		t.Fatalf("claim of attempt 2: %v, want ErrInvalidToken", err)
	}
}

// A new run's root tasks are dispatched by the one runner that performs
// the run's first effects, as a fan-out is: their envelopes go in one
// batch, and the trigger's answer shows each task as its dispatch wrote it.
func TestNewRunDispatchesItsRootTasksInOneBatch(t *testing.T) {
	f := newFixture(t)
	mq := f.q.(*memQueue)
	ctx := context.Background()
	j, err := jobspec.Parse([]byte(`{"name":"roots","tasks":[{"id":"a"},{"id":"b"},{"id":"c"}]}`), f.svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Jobs().CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	before := len(mq.batchSizes())
	view, created, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "roots"})
	if err != nil || !created {
		t.Fatalf("trigger: created %v, %v", created, err)
	}
	if got := mq.batchSizes()[before:]; len(got) != 1 || got[0] != 3 {
		t.Fatalf("the new run's sends: batches of %v, want one of 3", got)
	}
	for _, tv := range view.Tasks {
		if tv.Instance.Snapshot.State != statemodel.StateQueued || len(tv.Attempts) != 1 {
			t.Errorf("answer's task %s: %s with %d attempts, want QUEUED with its first", tv.Instance.Key.Task, tv.Instance.Snapshot.State, len(tv.Attempts))
		}
	}
}

// The tasks a finish releases together (a fan-out) are dispatched with
// their envelopes in one batch, each then one write.
func TestFanOutDispatchesInOneBatch(t *testing.T) {
	f := newFixture(t)
	mq := f.q.(*memQueue)
	ctx := context.Background()
	j, err := jobspec.Parse([]byte(`{"name":"fan","tasks":[{"id":"a"},{"id":"b","depends_on":["a"]},{"id":"c","depends_on":["a"]},{"id":"d","depends_on":["a"]}]}`), f.svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Jobs().CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "fan"}); err != nil {
		t.Fatal(err)
	}
	a := f.nextEnvelope(t)
	if _, err := f.svc.Workers().Claim(ctx, refOf(a), a.Token, "w@boot", "c"); err != nil {
		t.Fatal(err)
	}
	before := len(mq.batchSizes())
	if _, err := f.svc.Workers().Complete(ctx, protocol.Completion{Run: a.Run, Task: a.Task, Attempt: 1, EventID: "done", Outcome: "succeeded"}, a.Token); err != nil {
		t.Fatal(err)
	}
	if got := mq.batchSizes()[before:]; len(got) != 1 || got[0] != 3 {
		t.Fatalf("the fan-out's sends: batches of %v, want one of 3", got)
	}
	seen := map[string]bool{}
	for range 3 {
		env := f.nextEnvelope(t)
		seen[env.Task] = true
		inst, err := f.st.GetInstance(ctx, ledger.InstanceKey{Run: env.Run, Task: env.Task})
		if err != nil || inst.Snapshot.State != statemodel.StateQueued || inst.Snapshot.Attempt != 1 {
			t.Fatalf("task %s after the fan-out: %s attempt %d, %v; want QUEUED attempt 1", env.Task, inst.Snapshot.State, inst.Snapshot.Attempt, err)
		}
	}
	if !seen["b"] || !seen["c"] || !seen["d"] {
		t.Fatalf("envelopes of %v, want b, c and d", seen)
	}
}
