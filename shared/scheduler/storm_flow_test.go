package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/store/memstore"
	"github.com/runledger/runledger/statemodel"
	"github.com/runledger/runledger/statemodel/limiter"
)

// stormLimitedJob is the storm's DAG with a concurrency limit of 3 runs
// per customer.
const stormLimitedJob = `{"name":"stormlim","retry":{"max_attempts":2,"initial_interval":"1s","jitter":"none"},
	"timeouts":{"heartbeat":"10s","queue":"1m"},"evidence_window":"20s",
	"concurrency":{"limit":3,"key":"{{.Params.customer}}"},
	"tasks":[{"id":"a"},{"id":"b","depends_on":["a"]},{"id":"c","depends_on":["b"]},{"id":"d","depends_on":["a"]},
	{"id":"alert","depends_on":["c","d"],"trigger_rule":"one_failed"}]}`

const stormLimit = 3

// stormPoolJob's tasks b and c share the task pool "stormwh" of
// stormPoolLimit slots (its runs have no limit of their own).
const stormPoolJob = `{"name":"stormpool","retry":{"max_attempts":2,"initial_interval":"1s","jitter":"none"},
	"timeouts":{"heartbeat":"10s","queue":"1m"},"evidence_window":"20s",
	"tasks":[{"id":"a"},{"id":"b","depends_on":["a"],"concurrency":{"limit":2,"group":"stormwh"}},
	{"id":"c","depends_on":["a"],"concurrency":{"limit":2,"group":"stormwh"}}]}`

const stormPoolLimit = 2

// The storm on runs of a limited job: workers that succeed, fail and
// crash, an operator who cancels tasks and runs (waiting ones too),
// pauses and resumes, and the timers, all at once. Once calm, every run
// ended (0 stuck), and at no moment were more than the limit of one
// customer's runs active (0 excess), active meaning from the first
// dispatch of any of its tasks to its end.
func TestStormRespectsConcurrencyLimits(t *testing.T) {
	c := newClock()
	q := newMemQueue()
	pool := q.create(fmt.Sprintf("sched%d-pool", seq.Add(1)))
	f := assemble(memstore.New(memstore.WithClock(c.Now), memstore.WithRunBackstop(10000*time.Hour), memstore.WithTimerHorizon(ledger.IndexEveryTimer)), q, pool, c, "", nil)
	limitedStorm(t, f, 30, 300)
}

// The same on DynamoDB Local and the SQS emulator.
func TestStormRespectsConcurrencyLimitsOnDynamoDBLocal(t *testing.T) {
	f := newEmulatorFixtureWith(t, []store.Option{store.WithRunBackstop(10000 * time.Hour), store.WithTimerHorizon(ledger.IndexEveryTimer)})
	limitedStorm(t, f, 10, 80)
}

// stormTwoLimitersJob is the storm's DAG with a concurrency limit of 3
// runs per customer and a rate limit of another group: two limiters a run.
const stormTwoLimitersJob = `{"name":"stormtwo","retry":{"max_attempts":2,"initial_interval":"1s","jitter":"none"},
	"timeouts":{"heartbeat":"10s","queue":"1m"},"evidence_window":"20s",
	"concurrency":{"limit":3,"key":"{{.Params.customer}}"},"rate_limit":{"runs":2,"per":"10s","group":"stormapi"},
	"tasks":[{"id":"a"},{"id":"b","depends_on":["a"]},{"id":"c","depends_on":["b"]},{"id":"d","depends_on":["a"]},
	{"id":"alert","depends_on":["c","d"],"trigger_rule":"one_failed"}]}`

// The limited storm on runs that enter two limiters (concurrency, then a
// rate limiter of its own group): 0 excess, 0 stuck, both limiters empty
// once calm. On DynamoDB Local.
func TestStormRespectsTwoLimitersOnDynamoDBLocal(t *testing.T) {
	f := newEmulatorFixtureWith(t, []store.Option{store.WithRunBackstop(10000 * time.Hour), store.WithTimerHorizon(ledger.IndexEveryTimer)})
	limitedStormOf(t, f, "stormtwo", stormTwoLimitersJob, []string{"stormapi/"}, 10, 80)
}

func limitedStorm(t *testing.T, f *fixture, runs, ops int) {
	t.Helper()
	limitedStormOf(t, f, "stormlim", stormLimitedJob, nil, runs, ops)
}

// limitedStormOf is the limited storm on job (named name, whose
// concurrency limit of stormLimit is per customer); the limiters
// "<name>/a", "<name>/b" and more end empty.
func limitedStormOf(t *testing.T, f *fixture, name, job string, more []string, runs, ops int) {
	t.Helper()
	f.createJob(t, job)
	customer := map[string]string{}
	var ids []string
	for i := range runs {
		who := []string{"a", "b"}[i%2]
		v := f.triggerWith(t, name, fmt.Sprintf(`{"customer":%q}`, who))
		ids = append(ids, v.Run.ID)
		customer[v.Run.ID] = who
		f.clock.Advance(time.Millisecond)
	}
	f.createJob(t, stormPoolJob)
	var pooled []string
	for range runs {
		v := f.trigger(t, "stormpool", time.Time{})
		pooled = append(pooled, v.Run.ID)
		f.clock.Advance(time.Millisecond)
	}
	limited := ids
	ids = append(slices.Clip(ids), pooled...)
	blow(t, f, ids, func(ctx context.Context, _ *storm) { operateLimited(ctx, t, f, ids, ops) })
	excess, stuck := limitExcess(t, f, limited, customer)
	fmt.Printf("limited storm: %d runs, %d excess, %d stuck\n", len(limited), excess, stuck)
	if excess != 0 || stuck != 0 {
		t.Errorf("%d runs active beyond the limit, %d runs not ended", excess, stuck)
	}
	excess, stuck = poolExcess(t, f, pooled)
	fmt.Printf("task pool storm: %d runs, %d excess, %d stuck\n", len(pooled), excess, stuck)
	if excess != 0 || stuck != 0 {
		t.Errorf("%d attempts in flight beyond the task pool's slots, %d runs not ended", excess, stuck)
	}
	if st, err := f.st.GetLimiter(context.Background(), "task:stormwh/"); err != nil || st.Active != 0 || st.Waiting != 0 {
		t.Errorf("the task pool after the storm: %+v, %v", st, err)
	}
	for _, lim := range append([]string{name + "/a", name + "/b"}, more...) {
		st, err := f.st.GetLimiter(context.Background(), lim)
		if err != nil || st.Active != 0 || st.Waiting != 0 || st.Version == 0 {
			t.Errorf("limiter %s after the storm: %+v, %v; want entered and empty", lim, st, err)
		}
	}
}

// operateLimited cancels tasks and runs, pauses and resumes runs at
// random, n times. (Retries and marks of an ended run reopen it, which
// this storm leaves out.)
func operateLimited(ctx context.Context, t *testing.T, f *fixture, runs []string, n int) {
	rng := rand.New(rand.NewPCG(42, 7))
	for range n {
		id := runs[rng.IntN(len(runs))]
		v, err := f.st.ReadRun(ctx, id)
		if err != nil {
			t.Error(err)
			return
		}
		key := v.Tasks[rng.IntN(len(v.Tasks))].Instance.Key
		switch p := rng.IntN(10); {
		case p < 1:
			err = f.svc.CancelTask(ctx, key, "storm")
		case p < 2:
			err = f.svc.CancelRun(ctx, id, "storm")
		case p < 6:
			err = f.svc.PauseRun(ctx, id, "storm")
		default:
			err = f.svc.ResumeRun(ctx, id, "storm")
		}
		if err != nil && !errors.Is(err, statemodel.ErrIllegalTransition) {
			t.Errorf("operator on %s: %v", key, err)
		}
	}
}

// endedRun reads a run, false when it has not ended (stuck).
func endedRun(t *testing.T, f *fixture, id string) (ledger.RunView, bool) {
	t.Helper()
	v, err := f.st.ReadRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return v, v.Run.ExecutionState.Terminal()
}

// limitExcess sweeps each customer's runs' active intervals (first
// dispatch of any task to the run's end) and answers the most runs active
// at once beyond the limit, and the runs not ended.
func limitExcess(t *testing.T, f *fixture, ids []string, customer map[string]string) (excess, stuck int) {
	flights := map[string][]limiter.Span{}
	for _, id := range ids {
		v, ended := endedRun(t, f, id)
		if !ended {
			stuck++
			continue
		}
		var first time.Time
		for _, tv := range v.Tasks {
			for _, a := range tv.Instance.Snapshot.Attempts {
				if !a.QueuedAt.IsZero() && (first.IsZero() || a.QueuedAt.Before(first)) {
					first = a.QueuedAt
				}
			}
			for _, a := range tv.Attempts {
				if !a.QueuedAt.IsZero() && (first.IsZero() || a.QueuedAt.Before(first)) {
					first = a.QueuedAt
				}
			}
		}
		if first.IsZero() {
			continue // never dispatched: cancelled while waiting
		}
		flights[customer[id]] = append(flights[customer[id]], limiter.Span{From: first, To: v.Run.EndedAt})
	}
	for who, fs := range flights {
		if n := limiter.MostBeyond(fs, stormLimit); n > 0 {
			t.Logf("customer %s: %d runs active beyond the limit", who, n)
			excess = max(excess, n)
		}
	}
	return excess, stuck
}

// poolExcess sweeps the pooled tasks' attempts' flight (queued to ended;
// an attempt not ended counts as stuck) and answers the most in flight at
// once beyond the pool's slots, and the runs not ended.
func poolExcess(t *testing.T, f *fixture, ids []string) (excess, stuck int) {
	var fs []limiter.Span
	for _, id := range ids {
		v, ended := endedRun(t, f, id)
		if !ended {
			stuck++
			continue
		}
		for _, tv := range v.Tasks {
			if tv.Instance.Key.Task == "a" {
				continue
			}
			byN := map[int]statemodel.AttemptRecord{}
			for _, a := range tv.Attempts {
				byN[a.N] = a.AttemptRecord
			}
			for _, a := range tv.Instance.Snapshot.Attempts {
				byN[a.N] = a
			}
			for _, a := range byN {
				if a.QueuedAt.IsZero() {
					continue
				}
				if a.EndedAt.IsZero() {
					stuck++
					continue
				}
				fs = append(fs, limiter.Span{From: a.QueuedAt, To: a.EndedAt})
			}
		}
	}
	return limiter.MostBeyond(fs, stormPoolLimit), stuck
}
