// Package ledgertest is the contract suite of the storage contract
// (ledger.Store over a ledger.Storage port, ledger.New): every behaviour
// of the port, with the decision loop over it, as a table of cases, run
// against each implementation (the DynamoDB store on DynamoDB Local in
// shared/store's tests, memstore in its own). A behaviour the scheduler
// relies on belongs here, stated through the port only, never through an
// implementation's layout.
package ledgertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// Opener returns a fresh, empty store whose clock (the times it stamps:
// creation, idempotency expiry, backstops) is now and whose run backstop
// is ledger.DefaultRunBackstop. It cleans up after itself with t.Cleanup.
// The harness builds the ledger.Store over it (ledger.New).
type Opener func(t testing.TB, now func() time.Time) ledger.Storage

// Case is one behaviour of the port.
type Case struct {
	Name string
	Test func(t *testing.T, h *Harness)
}

// Cases lists every case of the suite.
func Cases() []Case {
	var all []Case
	for _, group := range [][]Case{transitionCases, heldCases, heartbeatCases, runCases, paramsCases, retentionCases, jobCases, timerCases, leaseCases, inputCases, backfillCases, outputCases, mapCases, limiterCases, limiterGroupCases, slotHolderCases} {
		all = append(all, group...)
	}
	return all
}

// Run runs every case against stores from open, each case on a fresh store,
// in parallel.
func Run(t *testing.T, open Opener) {
	t.Helper()
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			c.Test(t, NewHarness(t, open))
		})
	}
}

// T0 is the suite's epoch: every clock starts here.
var T0 = time.Date(2031, 3, 14, 9, 26, 53, 589793238, time.UTC)

// Clock is the injected clock: it moves only when a test moves it.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// Set moves the clock to at, backwards too: a case that reads past a
// run's expiry comes back before the harness reads its runs.
func (c *Clock) Set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = at
}

// Harness is one case's store with its clock. It remembers every run it
// created: when the case ends, each instance's history is folded and
// compared with its stored snapshot, and each attempt the snapshot holds
// with what GetAttempt and ReadRun say of it.
type Harness struct {
	// Store is the opened port with the decision loop over it.
	Store ledger.Store
	Clock *Clock
	// Turns is the registry the case's limiter calls take turns in, as
	// one process's calls do.
	Turns *ledger.Turns

	mu   sync.Mutex
	runs []string
}

// NewHarness opens a store with a fresh clock at T0.
func NewHarness(t testing.TB, open Opener) *Harness {
	t.Helper()
	h := &Harness{Clock: &Clock{t: T0}, Turns: ledger.NewTurns()}
	h.Store = ledger.New(open(t, h.Clock.Now))
	t.Cleanup(func() { h.checkReplay(t) })
	return h
}

// CreateRun creates a run and remembers it for the replay check.
func (h *Harness) CreateRun(ctx context.Context, nr ledger.NewRun, now time.Time) (ledger.RunView, error) {
	v, err := h.Store.CreateRun(ctx, nr, now)
	if err == nil {
		h.mu.Lock()
		h.runs = append(h.runs, nr.ID)
		h.mu.Unlock()
	}
	return v, err
}

// MustCreate creates a run at the clock's time and fails the test on error.
func (h *Harness) MustCreate(t testing.TB, nr ledger.NewRun) ledger.RunView {
	t.Helper()
	v, err := h.CreateRun(context.Background(), nr, h.Clock.Now())
	if err != nil {
		t.Fatalf("create run: %v", err)
	}
	return v
}

// Runs lists the ids of the runs the harness created.
func (h *Harness) Runs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.runs)
}

// FullHistory pages History to the end.
func (h *Harness) FullHistory(t testing.TB, key ledger.InstanceKey) []statemodel.Transition {
	t.Helper()
	all, err := ledger.FullHistory(context.Background(), h.Store, key)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// Step applies an event that must be Applied and returns the result.
func (h *Harness) Step(t testing.TB, key ledger.InstanceKey, e statemodel.Event, now time.Time) ledger.Result {
	t.Helper()
	res, err := h.Store.Transition(context.Background(), key, e, now, Policy())
	if err != nil {
		t.Fatalf("%s on %s: %v", e, key, err)
	}
	if res.Outcome != statemodel.Applied {
		t.Fatalf("%s on %s: outcome %s, want applied", e, key, res.Outcome)
	}
	return res
}

// ToQueued moves a fresh instance to QUEUED with attempt 1 dispatched and
// returns the time it used.
func (h *Harness) ToQueued(t testing.TB, key ledger.InstanceKey) time.Time {
	t.Helper()
	now := h.Clock.Now()
	h.Step(t, key, Ev(statemodel.EvDepsMet, 0), now)
	h.Step(t, key, Dispatch(1), now)
	return now
}

// MustInstance reads an instance and fails the test on error.
func (h *Harness) MustInstance(t testing.TB, key ledger.InstanceKey) ledger.Instance {
	t.Helper()
	inst, err := h.Store.GetInstance(context.Background(), key)
	if err != nil {
		t.Fatalf("get instance %s: %v", key, err)
	}
	return inst
}

// checkReplay: folding an instance's history gives its stored snapshot,
// every attempt up to the current one is readable, and the attempts the
// snapshot holds say what it says.
func (h *Harness) checkReplay(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	for _, id := range h.Runs() {
		v, err := h.Store.ReadRun(ctx, id)
		if err != nil {
			t.Errorf("replay: read run %s: %v", id, err)
			continue
		}
		for _, task := range v.Tasks {
			key, snap := task.Instance.Key, task.Instance.Snapshot
			hist := h.FullHistory(t, key)
			got, err := statemodel.Replay(hist)
			if err != nil {
				t.Errorf("replay %s: %v", key, err)
				continue
			}
			if !got.EqualState(snap) {
				t.Errorf("replay %s: folding %d records gives\n%+v\nstored\n%+v", key, len(hist), got, snap)
			}
			for n := 1; n <= snap.Attempt; n++ {
				a, err := h.Store.GetAttempt(ctx, key, n)
				if err != nil {
					t.Errorf("replay %s: attempt %d of %d: %v", key, n, snap.Attempt, err)
					continue
				}
				if held, ok := snap.AttemptN(n); ok && !a.AttemptRecord.Equal(held) {
					t.Errorf("replay %s: attempt %d reads %+v, the snapshot says %+v", key, n, a.AttemptRecord, held)
				}
			}
		}
	}
}

// Policy is the suite's policy: the defaults, deterministic (no jitter).
func Policy() statemodel.Policy {
	p := statemodel.DefaultPolicy()
	p.Retry.Jitter = statemodel.JitterNone
	return p
}

var eventSeq atomic.Int64

// Ev builds an event of type typ from its one actor, with a fresh id.
func Ev(typ statemodel.EventType, attempt int) statemodel.Event {
	actor, _ := statemodel.ActorOf(typ)
	return statemodel.Event{ID: fmt.Sprintf("ev-%d", eventSeq.Add(1)), Type: typ, Actor: actor, Attempt: attempt}
}

// Dispatch is the executor's acceptance of attempt n.
func Dispatch(n int) statemodel.Event {
	d := Ev(statemodel.EvDispatched, n)
	d.TokenHash, d.ExecutorID = fmt.Sprintf("hash-%d", n), fmt.Sprintf("msg-%d", n)
	return d
}

// Started is a worker's claim of attempt n.
func Started(n int, worker string) statemodel.Event {
	e := Ev(statemodel.EvStarted, n)
	e.WorkerID = worker
	return e
}

// Succeeded is attempt n's success.
func Succeeded(n int) statemodel.Event {
	e := Ev(statemodel.EvSucceeded, n)
	exit := 0
	e.ExitCode = &exit
	return e
}

var runSeq atomic.Int64

// RunID returns a new run id that sorts after every earlier one, as ULIDs do.
func RunID() string { return fmt.Sprintf("01RUN%020d", runSeq.Add(1)) }

// NewRun is a run of job with the named tasks, no dependencies.
func NewRun(job string, tasks ...string) ledger.NewRun {
	nr := ledger.NewRun{ID: RunID(), Job: job, LogicalTime: T0, Trigger: statemodel.TriggerManual, Params: []byte(`{"p":1}`), Spec: []byte(`{"tasks":[]}`)}
	for _, task := range tasks {
		nr.Tasks = append(nr.Tasks, ledger.NewTask{ID: task, Pool: "default", Payload: []byte(`{"x":1}`), Policy: Policy()})
	}
	return nr
}

// Race runs fn from n goroutines released at the same moment and returns
// their results in goroutine order.
func Race[T any](n int, fn func(i int) T) []T {
	out := make([]T, n)
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			out[i] = fn(i)
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	return out
}

// Parallel runs fn(0..n-1) on workers goroutines and fails on the first
// error.
func Parallel(t testing.TB, workers, n int, fn func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// ids returns the ids of runs.
func ids(runs []ledger.Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

// allDue lists every due timer at `at` over all shards, paging with limit,
// and the set of shards that held one.
func allDue(t *testing.T, h *Harness, at time.Time, limit int) ([]ledger.DueTimer, map[int]bool) {
	t.Helper()
	var got []ledger.DueTimer
	shards := map[int]bool{}
	for shard := range shardCount {
		token := ""
		for {
			page, next, err := h.Store.ListDueTimers(context.Background(), shard, at, limit, token)
			if err != nil {
				t.Fatalf("shard %d: %v", shard, err)
			}
			for _, d := range page {
				shards[shard] = true
				if d.At.After(at) {
					t.Errorf("timer %+v listed before its time %s", d, at)
				}
			}
			got = append(got, page...)
			if next == "" {
				break
			}
			token = next
		}
	}
	return got, shards
}
