package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store/memstore"
	"github.com/runledger/runledger/statemodel"
)

// sentLog is the service's queue as the tests watch it: every call goes
// on to the queue, and every envelope the queue took is recorded.
type sentLog struct {
	scheduler.Queue
	mu   sync.Mutex
	envs []protocol.Envelope
}

func (l *sentLog) record(body string) {
	env, err := protocol.ParseEnvelope(body)
	if err != nil || env.Token == "" || env.Attempt < 1 {
		return // a timer, not an envelope
	}
	l.mu.Lock()
	l.envs = append(l.envs, env)
	l.mu.Unlock()
}

func (l *sentLog) Send(ctx context.Context, queueURL, body string, attrs map[string]string) (string, error) {
	id, err := l.Queue.Send(ctx, queueURL, body, attrs)
	if err == nil {
		l.record(body)
	}
	return id, err
}

func (l *sentLog) SendDelayed(ctx context.Context, queueURL, body string, attrs map[string]string, delay time.Duration) (string, error) {
	id, err := l.Queue.SendDelayed(ctx, queueURL, body, attrs, delay)
	if err == nil {
		l.record(body)
	}
	return id, err
}

func (l *sentLog) SendBatch(ctx context.Context, queueURL string, entries []queue.Entry) ([]queue.Result, error) {
	res, err := l.Queue.SendBatch(ctx, queueURL, entries)
	if err == nil {
		for i, r := range res {
			if r.Err == nil {
				l.record(entries[i].Body)
			}
		}
	}
	return res, err
}

// attempts lists the envelopes sent for each attempt ("run/task#n"), in
// the order they were sent.
func (l *sentLog) attempts() map[string][]protocol.Envelope {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]protocol.Envelope{}
	for _, e := range l.envs {
		k := fmt.Sprintf("%s/%s#%d", e.Run, e.Task, e.Attempt)
		out[k] = append(out[k], e)
	}
	return out
}

// of lists the envelopes sent for attempt n of a run's task.
func (l *sentLog) of(run, task string, n int) []protocol.Envelope {
	return l.attempts()[fmt.Sprintf("%s/%s#%d", run, task, n)]
}

// checkOneTokenPerAttempt fails the test when two envelopes of one
// attempt carry different tokens, and returns how many attempts got one
// envelope and how many got more.
func checkOneTokenPerAttempt(t *testing.T, l *sentLog) (one, more int) {
	t.Helper()
	for k, envs := range l.attempts() {
		for _, e := range envs[1:] {
			if e.Token != envs[0].Token {
				t.Errorf("attempt %s: %d envelopes with different tokens", k, len(envs))
				break
			}
		}
		if len(envs) == 1 {
			one++
		} else {
			more++
		}
	}
	return one, more
}

// gatedStore stages the race of two completions of a join's upstream
// tasks, once armed for a run: each completion's write waits until both
// completions have come to it (each read the run before either wrote);
// a run read after that waits until both writes are done (each
// completion's next read sees both tasks ended); and the first write of
// the join's instance waits until a second writer of it comes or one
// completion has returned. So both completions decide the join, and both
// reach the store before either writes it, every time, not only when the
// goroutines happen to interleave so. Any completion that returns opens
// every gate: a gate never waits for what cannot come.
type gatedStore struct {
	scheduler.Store
	mu   sync.Mutex
	cond *sync.Cond
	// run, ups and join name what is staged ("": nothing).
	run, join            string
	ups                  map[string]bool
	upCame, upDone, came int // completions at their write, done with it; writers of join
	returned             int
}

func newGatedStore(st scheduler.Store) *gatedStore {
	g := &gatedStore{Store: st}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// arm stages the race of run's tasks ups over join ("": none).
func (g *gatedStore) arm(run, join string, ups ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.run, g.join, g.ups = run, join, map[string]bool{}
	for _, u := range ups {
		g.ups[u] = true
	}
	g.upCame, g.upDone, g.came, g.returned = 0, 0, 0, 0
	g.cond.Broadcast()
}

// done tells the gate a completion returned; it reports how many writers
// of the join came so far.
func (g *gatedStore) done() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.returned++
	g.cond.Broadcast()
	return g.came
}

// waitFor waits, holding g.mu, until cond holds or a completion returned.
func (g *gatedStore) waitFor(cond func() bool) {
	for !cond() && g.returned == 0 {
		g.cond.Wait()
	}
}

// write holds a write of key as staged and returns what to call after it.
func (g *gatedStore) write(key ledger.InstanceKey) func() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.run == "" || key.Run != g.run {
		return func() {}
	}
	switch {
	case g.ups[key.Task]:
		g.upCame++
		g.cond.Broadcast()
		g.waitFor(func() bool { return g.upCame >= len(g.ups) })
		return func() {
			g.mu.Lock()
			g.upDone++
			g.cond.Broadcast()
			g.mu.Unlock()
		}
	case key.Task == g.join:
		g.came++
		g.cond.Broadcast()
		g.waitFor(func() bool { return g.came >= 2 })
	}
	return func() {}
}

func (g *gatedStore) ReadRun(ctx context.Context, id string) (ledger.RunView, error) {
	g.mu.Lock()
	if g.run != "" && id == g.run && g.upCame >= len(g.ups) {
		g.waitFor(func() bool { return g.upDone >= len(g.ups) })
	}
	g.mu.Unlock()
	return g.Store.ReadRun(ctx, id)
}

// WriteInstance is where every transition the scheduler decides reaches
// the store: the gate holds it there.
func (g *gatedStore) WriteInstance(ctx context.Context, from ledger.Instance, ds []statemodel.Decision) (ledger.Instance, error) {
	defer g.write(from.Key)()
	return g.Store.WriteInstance(ctx, from, ds)
}

// joinJob: c waits for a and b, and runs whatever became of them.
const joinJob = `{"name":"join","retry":{"max_attempts":1},"timeouts":{"heartbeat":"1m","queue":"1h"},
	"tasks":[{"id":"a"},{"id":"b"},{"id":"c","depends_on":["a","b"],"trigger_rule":"all_done"}]}`

// Two upstream completions of a join released together, many rounds:
// every envelope sent for an attempt of the join carries the token its
// claim accepts, so a second one is a true duplicate (the same worker's
// claim of it gets the first answer, another worker's is refused as
// already claimed), and racing evaluators send one envelope per attempt.
// Every other round stages the race for certain (gatedStore); the other
// rounds race as the goroutines fall.
func TestJoinRaceSendsOneTokenPerAttempt(t *testing.T) {
	c := newClock()
	q := newMemQueue()
	pool := q.create(fmt.Sprintf("sched%d-pool", seq.Add(1)))
	gate := newGatedStore(memstore.New(memstore.WithClock(c.Now), memstore.WithTimerHorizon(ledger.IndexEveryTimer)))
	raceJoin(t, assemble(gate, q, pool, c, "", nil), gate, 200)
}

// The same race on DynamoDB Local and the SQS emulator.
func TestJoinRaceSendsOneTokenPerAttemptOnDynamoDBLocal(t *testing.T) {
	var gate *gatedStore
	f := newEmulatorFixtureWrapped(t, nil, func(st scheduler.Store) scheduler.Store {
		gate = newGatedStore(st)
		return gate
	})
	raceJoin(t, f, gate, 20)
}

func raceJoin(t *testing.T, f *fixture, gate *gatedStore, rounds int) {
	t.Helper()
	ctx := context.Background()
	f.createJob(t, joinJob)
	counts := map[string]map[int]int{"gated": {}, "free": {}} // envelopes of c#1 -> rounds
	staged := 0
	for round := range rounds {
		run := f.trigger(t, "join", f.clock.Now().Add(time.Duration(round)*time.Hour)).Run.ID
		ups := map[string]protocol.Envelope{}
		for _, task := range []string{"a", "b"} {
			envs := f.sent.of(run, task, 1)
			if len(envs) != 1 {
				t.Fatalf("round %d: %d envelopes of %s#1", round, len(envs), task)
			}
			ups[task] = envs[0]
			if _, err := f.svc.Workers().Claim(ctx, refOf(envs[0]), envs[0].Token, "up@boot", "claim"); err != nil {
				t.Fatalf("round %d: claim %s: %v", round, task, err)
			}
		}
		how := "free"
		if round%2 == 0 {
			how = "gated"
			gate.arm(run, "c", "a", "b")
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		writers := make(chan int, 2)
		for task, outcome := range map[string]protocol.Outcome{"a": protocol.OutcomeFailed, "b": protocol.OutcomeSucceeded} {
			env := ups[task]
			comp := protocol.Completion{Run: run, Task: task, Attempt: 1, EventID: "done", Outcome: outcome}
			if outcome == protocol.OutcomeFailed {
				comp.ErrorCategory, comp.Retryable = "boom", &[]bool{false}[0]
			}
			wg.Go(func() {
				<-start
				_, err := f.svc.Workers().Complete(ctx, comp, env.Token)
				writers <- gate.done()
				if err != nil {
					t.Errorf("round %d: complete %s: %v", round, task, err)
				}
			})
		}
		close(start)
		wg.Wait()
		gate.arm("", "")
		if max(<-writers, <-writers) >= 2 {
			staged++
		}

		envs := f.sent.of(run, "c", 1)
		counts[how][len(envs)]++
		if len(envs) == 0 {
			t.Fatalf("round %d: c was not dispatched", round)
		}
		for _, e := range envs[1:] {
			if e.Token != envs[0].Token {
				t.Fatalf("round %d: %d envelopes of c#1 with different tokens", round, len(envs))
			}
		}
		first, err := f.svc.Workers().Claim(ctx, refOf(envs[0]), envs[0].Token, "w1@boot", "claim")
		if err != nil {
			t.Fatalf("round %d: claim of c#1's first envelope: %v", round, err)
		}
		// Every envelope, the first one's second delivery included: the
		// same worker gets its first answer, another worker is refused.
		for i, e := range envs {
			again, err := f.svc.Workers().Claim(ctx, refOf(e), e.Token, "w1@boot", "claim")
			if err != nil || !again.Claimed || !again.LeaseExpiresAt.Equal(first.LeaseExpiresAt) {
				t.Fatalf("round %d: the same worker's claim of envelope %d of c#1: %+v, %v; want the first answer", round, i+1, again, err)
			}
			if _, err := f.svc.Workers().Claim(ctx, refOf(e), e.Token, "w2@boot", "claim"); !errors.Is(err, protocol.ErrAlreadyClaimed) {
				t.Fatalf("round %d: another worker's claim of envelope %d of c#1: %v, want already claimed", round, i+1, err)
			}
		}
	}
	for how, byCount := range counts {
		t.Logf("%s rounds, by envelopes of c#1: %v", how, byCount)
		for _, n := range slices.Sorted(maps.Keys(byCount)) {
			if n > 1 {
				t.Errorf("%s: %d rounds sent %d envelopes of c#1, want one", how, byCount[n], n)
			}
		}
	}
	t.Logf("rounds where both evaluators reached c's write: %d of %d", staged, rounds)
	if gated := (rounds + 1) / 2; staged < gated {
		t.Errorf("the race was staged in %d rounds, want at least the %d gated ones", staged, gated)
	}
}

// An instance created before instances had a secret (a persisted local
// table) is still dispatched, with a random token that its claim accepts.
func TestInstanceWithoutSecretIsDispatchedWithARandomToken(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	nr := ledger.NewRun{ID: f.svc.NewID(), Job: "old", LogicalTime: f.clock.Now(), Trigger: statemodel.TriggerManual,
		Tasks: []ledger.NewTask{{ID: "main", Pool: "default", Policy: statemodel.DefaultPolicy(), Scheduled: true}}}
	v, err := f.st.CreateRun(ctx, nr, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tasks[0].Instance.Secret) != 0 {
		t.Fatal("the instance has a secret")
	}
	f.clock.Advance(time.Minute) // past the grace a fresh SCHEDULED instance gets
	key := ledger.InstanceKey{Run: nr.ID, Task: "main"}
	if err := f.svc.FireTimer(ctx, key); err != nil {
		t.Fatal(err)
	}
	envs := f.sent.of(nr.ID, "main", 1)
	if len(envs) != 1 || len(envs[0].Token) != 32 {
		t.Fatalf("envelopes %+v, want one with a token", envs)
	}
	if ans, err := f.svc.Workers().Claim(ctx, refOf(envs[0]), envs[0].Token, "w@boot", "claim"); err != nil || !ans.Claimed {
		t.Fatalf("claim: %+v, %v", ans, err)
	}
}
