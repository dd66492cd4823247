package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/emulator/emulatortest"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/store/memstore"
	"github.com/runledger/runledger/statemodel"
)

var env *emulator.Env

func TestMain(m *testing.M) {
	emulatortest.Main(m, func(e *emulator.Env) error { env = e; return nil })
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// evidenceDouble is the executor check's test double: it answers what the
// test sets, and counts the questions.
type evidenceDouble struct {
	verdict atomic.Value // scheduler.Verdict
	asked   atomic.Int32
	// category and exit go with a failed verdict, recheck with a running one.
	category string
	exit     atomic.Pointer[int]
	recheck  time.Duration
}

func (e *evidenceDouble) Name() string { return "executor_double" }
func (e *evidenceDouble) Check(_ context.Context, _ ledger.Instance, a statemodel.AttemptRecord) (scheduler.Evidence, error) {
	e.asked.Add(1)
	return scheduler.Evidence{Verdict: e.verdict.Load().(scheduler.Verdict), Detail: map[string]string{"attempt": fmt.Sprint(a.N)},
		ErrorCategory: e.category, ExitCode: e.exit.Load(), RecheckAfter: e.recheck}, nil
}

var seq atomic.Int32

type fixture struct {
	svc  *scheduler.Service
	st   scheduler.Store
	q    testQueue
	pool string
	// events is the events queue of a fixture that has one.
	events string
	clock  *clock
	ev     *evidenceDouble
	table  string // the DynamoDB table of an emulator fixture; "" in memory
	// sent records every envelope the service sent.
	sent *sentLog
	// runs are the runs runningJob started, whose backstop lose fires.
	runs []string
}

// testQueue is what the tests need of a queue besides the scheduler's
// Queue: *queue.Client and memQueue.
type testQueue interface {
	scheduler.Queue
	Receive(ctx context.Context, queueURL string, opts queue.ReceiveOptions) ([]queue.Message, error)
	Delete(ctx context.Context, queueURL, receiptHandle string) error
}

// newFixture is the service on memstore and an in-memory queue: for the
// tests of the service's decisions, which need neither DynamoDB's nor
// SQS's own behaviour (the store's is held to the same contract by
// ledgertest).
func newFixture(t *testing.T, providers ...scheduler.EvidenceProvider) *fixture {
	t.Helper()
	c := newClock()
	q := newMemQueue()
	pool := q.create(fmt.Sprintf("sched%d-pool", seq.Add(1)))
	// No delay queue: every timer is indexed, as the app builds a store
	// without one (withDelayQueue gives a test the queue and the horizon).
	return assemble(memstore.New(memstore.WithClock(c.Now), memstore.WithTimerHorizon(ledger.IndexEveryTimer)), q, pool, c, "", providers)
}

// newEmulatorFixture is the service on DynamoDB Local and the SQS
// emulator, a fresh table and queue per test: for the tests that read
// the table itself or count its reads.
func newEmulatorFixture(t *testing.T, providers ...scheduler.EvidenceProvider) *fixture {
	t.Helper()
	return newEmulatorFixtureWith(t, nil, providers...)
}

// newEmulatorFixtureWith is newEmulatorFixture with options for its store.
func newEmulatorFixtureWith(t *testing.T, opts []store.Option, providers ...scheduler.EvidenceProvider) *fixture {
	t.Helper()
	return newEmulatorFixtureWrapped(t, opts, nil, providers...)
}

// newEmulatorFixtureWrapped is newEmulatorFixtureWith whose service
// reaches its store through wrap (nil: directly).
func newEmulatorFixtureWrapped(t *testing.T, opts []store.Option, wrap func(scheduler.Store) scheduler.Store, providers ...scheduler.EvidenceProvider) *fixture {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("sched%d", seq.Add(1))
	db := env.DynamoDBClient()
	if err := store.CreateTable(ctx, db, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.DeleteTable(context.Background(), db, name) })
	q := queue.New(env.SQSClient())
	pool, err := q.CreateQueue(ctx, queue.Spec{Name: name + "-pool", VisibilityTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.DeleteQueue(context.Background(), pool.URL) })
	c := newClock()
	// No delay queue: every timer indexed, unless opts say otherwise.
	var st scheduler.Store = store.New(db, name, append([]store.Option{store.WithClock(c.Now), store.WithTimerHorizon(ledger.IndexEveryTimer)}, opts...)...)
	if wrap != nil {
		st = wrap(st)
	}
	return assemble(st, q, pool.URL, c, name, providers)
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

// mustNew is scheduler.New of a config the test wrote, which New must
// accept: a refusal is the test's own mistake.
func mustNew(st scheduler.Store, q scheduler.Queue, cfg scheduler.Config) *scheduler.Service {
	svc, err := scheduler.New(st, q, cfg)
	if err != nil {
		panic(err)
	}
	return svc
}

func assemble(st scheduler.Store, q testQueue, pool string, c *clock, table string, providers []scheduler.EvidenceProvider) *fixture {
	ev := &evidenceDouble{}
	ev.verdict.Store(scheduler.VerdictUnknown)
	sent := &sentLog{Queue: q}
	svc := mustNew(st, sent, scheduler.Config{
		Pools: map[string]string{"default": pool}, Now: c.Now,
		Evidence: append(providers, ev),
	})
	return &fixture{svc: svc, st: st, q: q, pool: pool, clock: c, ev: ev, table: table, sent: sent}
}

// running creates a one-task job, triggers it and claims attempt 1 as
// worker id, returning the run id and the envelope.
func (f *fixture) running(t *testing.T, workerID string) (string, protocol.Envelope) {
	t.Helper()
	return f.runningJob(t, `{"name":"j","timeouts":{"heartbeat":"10s"},"evidence_window":"1m","retry":{"max_attempts":3,"initial_interval":"1s","jitter":"none"}}`, workerID)
}

// runningJob is running with the job definition spec (named "j").
func (f *fixture) runningJob(t *testing.T, spec, workerID string) (string, protocol.Envelope) {
	t.Helper()
	ctx := context.Background()
	j, err := jobspec.Parse([]byte(spec), f.svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Jobs().CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	return f.triggered(t, "j", workerID)
}

// triggered triggers a run of job, whose one task "main" runs on the
// default pool, and claims attempt 1 as workerID, returning the run id and
// the envelope.
func (f *fixture) triggered(t *testing.T, job, workerID string) (string, protocol.Envelope) {
	t.Helper()
	ctx := context.Background()
	v, _, err := f.svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: job})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := f.q.Receive(ctx, f.pool, queue.ReceiveOptions{MaxMessages: 1, Wait: 5 * time.Second})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("no envelope: %v %d", err, len(msgs))
	}
	envl, err := protocol.ParseEnvelope(msgs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	ref := protocol.AttemptRef{Run: envl.Run, Task: envl.Task, Attempt: envl.Attempt}
	if _, err := f.svc.Workers().Claim(ctx, ref, envl.Token, workerID, "claim-1"); err != nil {
		t.Fatal(err)
	}
	f.runs = append(f.runs, v.Run.ID)
	return v.Run.ID, envl
}

func (f *fixture) instance(t *testing.T, run string) ledger.Instance {
	t.Helper()
	inst, err := f.st.GetInstance(context.Background(), ledger.InstanceKey{Run: run, Task: "main"})
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// backstop runs one reconciler pass and the pass that fires the timer of
// each run started (AdvanceRun): the fixture has no delay queue, so
// every short timer's message is lost and the run's backstop fires it.
func (f *fixture) backstop(t *testing.T) {
	t.Helper()
	if _, err := f.svc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, run := range f.runs {
		if err := f.svc.AdvanceRun(context.Background(), run); err != nil {
			t.Fatal(err)
		}
	}
}

// lose lets the lease expire and runs one reconciler pass and the
// backstop of the runs started: the fixture has no delay queue, so the
// lease's message is lost, and a near lease is in no index; the pass that
// fires the run's timer (AdvanceRun) finds it.
func (f *fixture) lose(t *testing.T) {
	t.Helper()
	f.clock.Advance(11 * time.Second)
	f.backstop(t)
}

func TestEvidenceConfirmsSuccess(t *testing.T) {
	f := newFixture(t)
	run, _ := f.running(t, "w@boot")
	f.ev.verdict.Store(scheduler.VerdictSucceeded)
	f.lose(t)
	inst := f.instance(t, run)
	if inst.Snapshot.State != statemodel.StateSucceeded {
		t.Fatalf("state %s, want SUCCEEDED on confirmed success", inst.Snapshot.State)
	}
	h, err := ledger.FullHistory(context.Background(), f.st, inst.Key)
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1]
	if last.Event != statemodel.EvEvidenceOK || last.Evidence["provider"] != "executor_double" || h[len(h)-2].To != statemodel.StateLost {
		t.Fatalf("history ends %s from %s with evidence %v", last.Event, h[len(h)-2].To, last.Evidence)
	}
}

// A confirmed failure that saw the process's exit status (an ECS task's
// container) records it on the attempt, with its category, and retries.
func TestEvidenceFailedRecordsTheExitCode(t *testing.T) {
	f := newFixture(t)
	run, _ := f.running(t, "w@boot")
	f.ev.verdict.Store(scheduler.VerdictFailed)
	f.ev.category = "container_failed"
	code := 137
	f.ev.exit.Store(&code)
	f.lose(t)
	snap := f.instance(t, run).Snapshot
	a1, _ := snap.AttemptN(1)
	if snap.State != statemodel.StateUpForRetry || a1.Outcome != statemodel.OutcomeFailed || a1.ErrorCategory != "container_failed" ||
		a1.ExitCode == nil || *a1.ExitCode != 137 {
		t.Fatalf("state %s, attempt 1 %+v: want UP_FOR_RETRY, failed with container_failed and exit code 137", snap.State, a1)
	}
}

func TestEvidenceNeverStartedResubmitsWithoutBudget(t *testing.T) {
	f := newFixture(t)
	run, _ := f.running(t, "w@boot")
	f.ev.verdict.Store(scheduler.VerdictNeverStarted)
	f.lose(t)
	snap := f.instance(t, run).Snapshot
	if snap.State != statemodel.StateQueued || snap.Attempt != 2 {
		t.Fatalf("state %s attempt %d, want attempt 2 QUEUED", snap.State, snap.Attempt)
	}
	if a2, _ := snap.AttemptN(2); a2.SpendsBudget || snap.Spent != 1 || snap.Resubmits != 1 {
		t.Fatalf("resubmit spent budget: %+v spent %d", a2, snap.Spent)
	}
}

func TestEvidenceRunningHoldsOnlyUntilTheWindowEnds(t *testing.T) {
	f := newFixture(t)
	run, _ := f.running(t, "w@boot")
	f.ev.verdict.Store(scheduler.VerdictRunning)
	f.lose(t)
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateLost {
		t.Fatalf("state %s, want LOST while the executor says running", st)
	}
	f.clock.Advance(61 * time.Second)
	f.backstop(t) // the window's end is near: its message, lost here, or the run's backstop
	snap := f.instance(t, run).Snapshot
	a1, _ := snap.AttemptN(1)
	if snap.State != statemodel.StateUpForRetry || a1.ErrorCategory != statemodel.CategoryLost {
		t.Fatalf("after the window: %s category %q", snap.State, a1.ErrorCategory)
	}
}

// A provider that says the work still runs and asks to be asked again gets
// a precise timer for then (the delay queue), not only the window's end:
// work that ends while LOST resolves the attempt when it ends.
func TestEvidenceRunningIsAskedAgainWhenItAsks(t *testing.T) {
	f := newFixture(t)
	mq := f.q.(*memQueue)
	delay := mq.create(fmt.Sprintf("sched%d-delay", seq.Add(1)))
	f.svc = mustNew(f.st, f.q, scheduler.Config{Pools: map[string]string{"default": f.pool}, Now: f.clock.Now,
		DelayQueueURL: delay, Evidence: []scheduler.EvidenceProvider{f.ev}})
	run, _ := f.running(t, "w@boot") // evidence window 1m
	f.ev.verdict.Store(scheduler.VerdictRunning)
	f.ev.recheck = 5 * time.Second
	f.lose(t)
	lostAt := f.clock.Now()
	if st := f.instance(t, run).Snapshot.State; st != statemodel.StateLost {
		t.Fatalf("state %s, want LOST while the executor says running", st)
	}
	// Besides the short timers' own messages (queue timeout, lease,
	// evidence window, each with its purpose), one recheck.
	var rechecks []protocol.Timer
	for _, body := range mq.bodies(delay) {
		var tm protocol.Timer
		if err := json.Unmarshal([]byte(body), &tm); err != nil {
			t.Fatal(err)
		}
		if tm.Purpose == "" {
			rechecks = append(rechecks, tm)
		}
	}
	if len(rechecks) != 1 || rechecks[0].Run != run || !rechecks[0].At.Equal(lostAt.Add(5*time.Second)) {
		t.Fatalf("rechecks %+v, want one of run %s at %s", rechecks, run, lostAt.Add(5*time.Second))
	}
	asked := f.ev.asked.Load()
	f.clock.Advance(5 * time.Second)
	f.ev.verdict.Store(scheduler.VerdictFailed)
	f.recheck(t, run)
	snap := f.instance(t, run).Snapshot
	if f.ev.asked.Load() != asked+1 || snap.State != statemodel.StateUpForRetry {
		t.Fatalf("after the recheck: asked %d more times, state %s; want asked once, UP_FOR_RETRY", f.ev.asked.Load()-asked, snap.State)
	}
}

func TestReconcileStopsBeforeTheDeadline(t *testing.T) {
	f := newFixture(t)
	f.running(t, "w@boot")
	f.clock.Advance(11 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // under the 2 s margin
	defer cancel()
	st, err := f.svc.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Stopped || st.Handled != 0 || f.ev.asked.Load() != 0 {
		t.Fatalf("pass %+v asked %d: it must stop before starting work this close to its deadline", st, f.ev.asked.Load())
	}
}
