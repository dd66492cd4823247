package store_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/emulator/emulatortest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

var (
	env *emulator.Env
	db  *dynamodb.Client
)

// TestMain starts DynamoDB Local (or adopts the endpoint the SDK settings
// name) once for the package.
func TestMain(m *testing.M) {
	emulatortest.Main(m, func(e *emulator.Env) error {
		env = e
		db = e.DynamoDBClient()
		return nil
	})
}

// t0 is the tests' epoch: every clock starts here.
var t0 = time.Date(2031, 3, 14, 9, 26, 53, 589793238, time.UTC)

// fakeClock is the injected clock: it moves only when a test moves it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// testStore is a store on a fresh table, with the registry of every run it
// created: when the test ends, each run's history is folded and compared
// with the stored snapshot (invariant 5), then the table is deleted.
type testStore struct {
	*store.Store
	table string
	clock *fakeClock

	mu   sync.Mutex
	runs []string
}

var tableSeq atomic.Int64

var unsafeTableChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

func newStore(t testing.TB, opts ...store.Option) *testStore {
	t.Helper()
	clk := &fakeClock{t: t0}
	ts := &testStore{table: newTable(t), clock: clk}
	ts.Store = store.New(db, ts.table, append([]store.Option{store.WithClock(clk.Now)}, opts...)...)
	// Registered after the deletion, so it runs before it.
	t.Cleanup(func() { ts.checkReplay(t) })
	return ts
}

// newTable creates a fresh table for the test and deletes it when the
// test ends.
func newTable(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("rl-%d-%s", tableSeq.Add(1), unsafeTableChars.ReplaceAllString(t.Name(), "_"))
	if len(name) > 200 {
		name = name[:200]
	}
	if err := store.CreateTable(context.Background(), db, name); err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() {
		if err := store.DeleteTable(context.Background(), db, name); err != nil {
			t.Errorf("delete table %s: %v", name, err)
		}
	})
	return name
}

// CreateRun records every run it created in the registry.
func (ts *testStore) CreateRun(ctx context.Context, nr store.NewRun, now time.Time) (store.RunView, error) {
	v, err := ts.Store.CreateRun(ctx, nr, now)
	if err == nil {
		ts.mu.Lock()
		ts.runs = append(ts.runs, nr.ID)
		ts.mu.Unlock()
	}
	return v, err
}

// checkReplay folds the history of every instance of every registered run
// and compares it with the stored snapshot. It also scans the table for
// instances of runs the registry does not know: none may exist.
func (ts *testStore) checkReplay(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	ts.mu.Lock()
	runs := slices.Clone(ts.runs)
	ts.mu.Unlock()
	known := map[string]bool{}
	for _, id := range runs {
		known[id] = true
		v, err := ts.ReadRun(ctx, id)
		if err != nil {
			t.Errorf("replay: read run %s: %v", id, err)
			continue
		}
		for _, task := range v.Tasks {
			key := task.Instance.Key
			hist, err := ts.FullHistory(ctx, key)
			if err != nil {
				t.Errorf("replay: history of %s: %v", key, err)
				continue
			}
			got, err := statemodel.Replay(hist)
			if err != nil {
				t.Errorf("replay %s: %v", key, err)
				continue
			}
			if !got.EqualState(task.Instance.Snapshot) {
				t.Errorf("replay %s: folding %d records gives\n%+v\nstored\n%+v", key, len(hist), got, task.Instance.Snapshot)
			}
			// Every attempt has an item, and the items of the attempts the
			// snapshot holds (the latest ones) say what it says.
			snap := task.Instance.Snapshot
			if len(task.Attempts) != snap.Attempt {
				t.Errorf("replay %s: %d attempt items, the snapshot is at attempt %d", key, len(task.Attempts), snap.Attempt)
				continue
			}
			for _, a := range task.Attempts {
				if held, ok := snap.AttemptN(a.N); ok && !a.AttemptRecord.Equal(held) {
					t.Errorf("replay %s: attempt item %d is %+v, snapshot says %+v", key, a.N, a.AttemptRecord, held)
				}
			}
		}
	}
	for _, it := range scanAll(t, ts.table) {
		if kind(it) != "instance" {
			continue
		}
		run := it["run"].(*types.AttributeValueMemberS).Value
		if !known[run] {
			t.Errorf("replay: instance of run %s that the registry does not know", run)
		}
	}
}

// scanAll reads the whole table. Tests may Scan; the store never does.
func scanAll(t testing.TB, table string) []map[string]types.AttributeValue {
	t.Helper()
	var out []map[string]types.AttributeValue
	in := &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)}
	for {
		page, err := db.Scan(context.Background(), in)
		if err != nil {
			t.Fatalf("scan %s: %v", table, err)
		}
		out = append(out, page.Items...)
		if page.LastEvaluatedKey == nil {
			return out
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

func kind(it map[string]types.AttributeValue) string {
	if v, ok := it["kind"].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// policy is the tests' policy: the defaults, deterministic (no jitter draw).
func policy() statemodel.Policy {
	p := statemodel.DefaultPolicy()
	p.Retry.Jitter = statemodel.JitterNone
	return p
}

var eventSeq atomic.Int64

// ev builds an event of type typ from its one actor, with a fresh id.
func ev(typ statemodel.EventType, attempt int) statemodel.Event {
	actor, _ := statemodel.ActorOf(typ)
	return statemodel.Event{
		ID: fmt.Sprintf("ev-%d", eventSeq.Add(1)), Type: typ, Actor: actor, Attempt: attempt,
	}
}

var runSeq atomic.Int64

// runID returns a new run id that sorts after every earlier one, as ULIDs do.
func runID() string { return fmt.Sprintf("01RUN%020d", runSeq.Add(1)) }

// newRun is a run of job with the named tasks, no dependencies.
func newRun(job string, tasks ...string) store.NewRun {
	nr := store.NewRun{ID: runID(), Job: job, LogicalTime: t0, Params: []byte(`{"p":1}`), Spec: []byte(`{"tasks":[]}`)}
	for _, task := range tasks {
		nr.Tasks = append(nr.Tasks, store.NewTask{ID: task, Pool: "default", Payload: []byte(`{"x":1}`), Policy: policy()})
	}
	return nr
}

// mustCreate creates a run and fails the test on error.
func (ts *testStore) mustCreate(t testing.TB, nr store.NewRun) store.RunView {
	t.Helper()
	v, err := ts.CreateRun(context.Background(), nr, ts.clock.Now())
	if err != nil {
		t.Fatalf("create run: %v", err)
	}
	return v
}

// step applies an event that must be Applied and returns the result.
func (ts *testStore) step(t testing.TB, key store.InstanceKey, e statemodel.Event, now time.Time) store.Result {
	t.Helper()
	res, err := ts.Transition(context.Background(), key, e, now, policy())
	if err != nil {
		t.Fatalf("%s on %s: %v", e, key, err)
	}
	if res.Outcome != statemodel.Applied {
		t.Fatalf("%s on %s: outcome %s, want applied", e, key, res.Outcome)
	}
	return res
}

// toQueued moves a fresh instance to QUEUED with attempt 1 dispatched.
func (ts *testStore) toQueued(t testing.TB, key store.InstanceKey) time.Time {
	t.Helper()
	now := ts.clock.Now()
	ts.step(t, key, ev(statemodel.EvDepsMet, 0), now)
	d := ev(statemodel.EvDispatched, 1)
	d.TokenHash, d.ExecutorID = "hash-1", "msg-1"
	ts.step(t, key, d, now)
	return now
}

// started is a worker's claim of attempt n.
func started(n int, worker string) statemodel.Event {
	e := ev(statemodel.EvStarted, n)
	e.WorkerID = worker
	return e
}

// getItem reads one raw item.
func getItem(t testing.TB, table, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk},
		},
	})
	if err != nil {
		t.Fatalf("get item %s/%s: %v", pk, sk, err)
	}
	return out.Item
}
