package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/store/memstore"
	"github.com/runledger/runledger/statemodel"
)

// stormJob is a small DAG with a retry budget, short leases and a task
// that runs only when something above it failed.
const stormJob = `{"name":"storm","retry":{"max_attempts":2,"initial_interval":"1s","jitter":"none"},
	"timeouts":{"heartbeat":"10s","queue":"1m"},"evidence_window":"20s",
	"tasks":[{"id":"a"},{"id":"b","depends_on":["a"]},{"id":"c","depends_on":["b"]},{"id":"d","depends_on":["a"]},
	{"id":"alert","depends_on":["c","d"],"trigger_rule":"one_failed"}]}`

// storm is the shared record of what the workers did.
type storm struct {
	f    *fixture
	calm atomic.Bool // from now on every claimed attempt succeeds
	mu   sync.Mutex
	// claim: the workers whose claim of an attempt was answered claimed,
	// by run/task#n. A worker that gets a second envelope of an attempt
	// it holds (a second send, or SQS's redelivery) is answered its claim
	// again; another worker is refused.
	claim map[string]map[string]bool
}

// work is one worker: it takes envelopes, claims them, heartbeats now and
// then (acknowledging a cancel it hears of) and, while the storm lasts,
// succeeds, fails (retryable or not) or crashes silently (its attempt
// becomes LOST and is resolved by the window) at random.
func (c *storm) work(ctx context.Context, t *testing.T, id int) {
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	for ctx.Err() == nil {
		msgs, err := c.f.q.Receive(ctx, c.f.pool, queue.ReceiveOptions{MaxMessages: 1, Wait: 20 * time.Millisecond})
		if err != nil || len(msgs) == 0 {
			continue
		}
		env, err := protocol.ParseEnvelope(msgs[0].Body)
		if err != nil {
			t.Error(err)
			return
		}
		// The calls themselves outlive ctx: a worker stopped after the
		// storm finishes what it started, effects included.
		call := context.WithoutCancel(ctx)
		worker := fmt.Sprintf("w%d@boot", id)
		if _, err := c.f.svc.Workers().Claim(call, refOf(env), env.Token, worker, "claim"); err != nil {
			continue // cancelled, timed out or superseded meanwhile: refused, as it should be
		}
		c.mu.Lock()
		attempt := fmt.Sprintf("%s/%s#%d", env.Run, env.Task, env.Attempt)
		if c.claim[attempt] == nil {
			c.claim[attempt] = map[string]bool{}
		}
		c.claim[attempt][worker] = true
		c.mu.Unlock()
		if rng.IntN(5) == 0 {
			// The queue delivered the envelope twice: another worker's
			// claim of it must be refused.
			if _, err := c.f.svc.Workers().Claim(call, refOf(env), env.Token, fmt.Sprintf("dup%d@boot", id), "claim"); err == nil {
				t.Errorf("a second worker claimed %s/%s#%d", env.Run, env.Task, env.Attempt)
			}
		}
		comp := protocol.Completion{Run: env.Run, Task: env.Task, Attempt: env.Attempt, EventID: "done", Outcome: protocol.OutcomeSucceeded}
		if rng.IntN(3) == 0 {
			// A heartbeat first (it may find the attempt LOST and bring it
			// back); a cancel it reports is acknowledged.
			beat, err := c.f.svc.Workers().Heartbeat(call, refOf(env), env.Token, "beat")
			if err == nil && beat.CancelRequested {
				comp.Outcome = protocol.OutcomeCancelled
			}
		}
		if !c.calm.Load() && comp.Outcome == protocol.OutcomeSucceeded {
			switch p := rng.IntN(10); {
			case p < 2:
				comp.Outcome, comp.ErrorCategory, comp.Retryable = protocol.OutcomeFailed, "boom", &[]bool{true}[0]
			case p < 3:
				comp.Outcome, comp.ErrorCategory, comp.Retryable = protocol.OutcomeFailed, "bad_input", &[]bool{false}[0]
			case p < 4:
				continue // crashed: no completion, no heartbeat
			}
		}
		_, _ = c.f.svc.Workers().Complete(call, comp, env.Token) // refused when fenced off: the history says which
		if rng.IntN(5) == 0 {
			_, _ = c.f.svc.Workers().Complete(call, comp, env.Token) // delivered twice: changes nothing
		}
	}
}

// operate is the operator: retries (with or without downstream), marks,
// cancels tasks and runs, pauses and resumes runs at random, n times.
func (c *storm) operate(ctx context.Context, t *testing.T, runs []string, n int) {
	rng := rand.New(rand.NewPCG(99, 7))
	svc := c.f.svc
	for range n {
		id := runs[rng.IntN(len(runs))]
		v, err := c.f.st.ReadRun(ctx, id)
		if err != nil {
			t.Error(err)
			return
		}
		task := v.Tasks[rng.IntN(len(v.Tasks))].Instance
		key := task.Key
		switch p := rng.IntN(22); {
		case p >= 20:
			err = svc.CancelTask(ctx, key, "storm")
		case p < 8:
			err = svc.RetryTask(ctx, key, scheduler.Retry{Operator: "op", Reason: "storm", Downstream: p < 4})
		case p < 10:
			err = svc.MarkTask(ctx, key, p == 8, "op", "storm")
		case p < 11:
			err = svc.CancelRun(ctx, id, "storm")
		case p < 15:
			err = svc.PauseRun(ctx, id, "storm")
		default:
			err = svc.ResumeRun(ctx, id, "storm")
		}
		if err != nil && !errors.Is(err, statemodel.ErrIllegalTransition) {
			t.Errorf("operator on %s: %v", key, err)
		}
	}
}

// Workers that succeed, fail and crash, an operator who retries, marks,
// cancels, pauses and resumes, and the timers, all at once on the same
// runs. Once the storm is over every run ends, its state is the one its
// tasks derive, every task's history replays whole to its stored state,
// no attempt was claimed by two workers, and every envelope of an
// attempt carries the one token its claim accepts. No run backstop fires
// within these tests: a run state left behind by a race must be caught
// here, not repaired by the timer minutes later.
func TestStormLeavesEveryRunConsistent(t *testing.T) {
	c := newClock()
	q := newMemQueue()
	pool := q.create(fmt.Sprintf("sched%d-pool", seq.Add(1)))
	f := assemble(memstore.New(memstore.WithClock(c.Now), memstore.WithRunBackstop(10000*time.Hour), memstore.WithTimerHorizon(ledger.IndexEveryTimer)), q, pool, c, "", nil)
	weather(t, f, 24, 400)
}

// The storm on DynamoDB Local and the SQS emulator: the store's real
// conditional writes and the queue's redelivery of a crashed worker's
// envelope.
func TestStormOnDynamoDBLocal(t *testing.T) {
	f := newEmulatorFixtureWith(t, []store.Option{store.WithRunBackstop(10000 * time.Hour), store.WithTimerHorizon(ledger.IndexEveryTimer)})
	weather(t, f, 8, 120)
}

// blow lets three workers, operate and the timers (time running fast)
// loose on ids together; then calms everything (workers succeed, paused
// runs resume, time goes on until every task has ended), stops the
// workers and checks every run (the events seen by kind).
func blow(t *testing.T, f *fixture, ids []string, operate func(context.Context, *storm)) (*storm, map[statemodel.EventType]int) {
	t.Helper()
	c := &storm{f: f, claim: map[string]map[string]bool{}}
	ctx, stop := context.WithCancel(context.Background())
	var workers, storm sync.WaitGroup
	for i := range 3 {
		workers.Go(func() { c.work(ctx, t, i) })
	}
	stormDone := make(chan struct{})
	storm.Go(func() {
		operate(ctx, c)
		close(stormDone)
	})
	storm.Go(func() { // the timers, with time running fast
		for {
			select {
			case <-stormDone:
				return
			default:
			}
			f.clock.Advance(3 * time.Second)
			if _, err := f.svc.Tick(ctx); err != nil {
				t.Error(err)
			}
			if _, err := f.svc.Reconcile(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	storm.Wait()

	c.calm.Store(true)
	for _, id := range ids {
		if err := f.svc.ResumeRun(ctx, id, "calm"); err != nil && !errors.Is(err, statemodel.ErrIllegalTransition) {
			t.Fatal(err)
		}
	}
	for pass := 0; ; pass++ {
		open := openTasks(t, f, ids)
		if len(open) == 0 {
			break
		}
		if pass == 3000 {
			t.Fatalf("stuck: tasks still open after the storm and %d timer passes: %v", pass, open)
		}
		f.clock.Advance(5 * time.Second)
		if _, err := f.svc.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Every task has ended, and each one's writer has returned: the runs
	// must have ended with them.
	stop()
	workers.Wait()
	seen := map[statemodel.EventType]int{}
	for _, id := range ids {
		checkRunConsistent(t, f, id, seen)
	}
	return c, seen
}

// weather creates the storm job, triggers runs of it, lets three workers,
// an operator (ops actions) and the timers loose on them together, then
// calms everything and checks every run.
func weather(t *testing.T, f *fixture, runs, ops int) {
	t.Helper()
	f.createJob(t, stormJob)
	var ids []string
	for i := range runs {
		ids = append(ids, f.trigger(t, "storm", f.clock.Now().Add(time.Duration(i)*time.Hour)).Run.ID)
	}
	c, seen := blow(t, f, ids, func(ctx context.Context, c *storm) { c.operate(ctx, t, ids, ops) })
	t.Logf("claims %d; events %v", len(c.claim), seen)
	// Every envelope of an attempt carries the token its claim accepts:
	// never two tokens for one attempt.
	one, more := checkOneTokenPerAttempt(t, f.sent)
	t.Logf("attempts sent: %d with one envelope, %d with two or more", one, more)
	for a, workers := range c.claim {
		if len(workers) > 1 {
			t.Errorf("attempt %s claimed by %d workers", a, len(workers))
		}
	}
}

// openTasks lists the runs with a task not yet in a terminal state, with
// those tasks' states.
func openTasks(t *testing.T, f *fixture, runs []string) map[string]map[string]statemodel.InstanceState {
	t.Helper()
	open := map[string]map[string]statemodel.InstanceState{}
	for _, id := range runs {
		v := f.readRun(t, id)
		for task, st := range states(v) {
			if !st.Terminal() {
				if open[id] == nil {
					open[id] = map[string]statemodel.InstanceState{}
				}
				open[id][task] = st
			}
		}
	}
	return open
}

// checkRunConsistent: the run's stored state is the one its tasks derive,
// with an end time, and every task's whole history replays to the stored
// snapshot's state, seq and attempt.
func checkRunConsistent(t *testing.T, f *fixture, id string, seen map[statemodel.EventType]int) {
	t.Helper()
	v := f.readRun(t, id)
	if d := statemodel.DeriveRunState(v.Nodes()); v.Run.ExecutionState != d.State || v.Run.EndedAt.IsZero() {
		t.Errorf("run %s is %s (ended %v) over tasks %v, which derive %s", id, v.Run.ExecutionState, v.Run.EndedAt, states(v), d.State)
	}
	for _, task := range v.Tasks {
		key := task.Instance.Key
		h, err := ledger.FullHistory(context.Background(), f.st, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range h {
			seen[tr.Event]++
		}
		got, err := statemodel.Replay(h)
		want := task.Instance.Snapshot
		if err != nil || got.State != want.State || got.Seq != want.Seq || got.Attempt != want.Attempt {
			t.Errorf("%s: history of %d records replays to %s seq %d attempt %d (%v), stored %s seq %d attempt %d",
				key, len(h), got.State, got.Seq, got.Attempt, err, want.State, want.Seq, want.Attempt)
		}
	}
}
