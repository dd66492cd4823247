package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// Exactly-once effects (docs/workers.md): a handler's own
// TransactWriteItems carries its attempt's fence (Task.Fence), so its
// output lands only while its attempt owns the task. These tests cut
// workers off from the API past their lease, make the cut-off handlers
// ignore their ctx (as a paused VM or a worker whose clock runs late
// would) and commit once the scheduler has given their attempt up: the
// fence, not the worker's clock, must refuse them.

// heartbeatCut is a worker's transport to the API that drops the
// heartbeats of the attempts cut off, as a partition between that attempt's
// worker and the API would; everything else gets through.
type heartbeatCut struct {
	mu      sync.Mutex
	cut     map[worker.AttemptRef]bool
	dropped atomic.Int64
}

func newHeartbeatCut() *heartbeatCut {
	return &heartbeatCut{cut: map[worker.AttemptRef]bool{}}
}

func (c *heartbeatCut) cutOff(ref worker.AttemptRef) {
	c.mu.Lock()
	c.cut[ref] = true
	c.mu.Unlock()
}

func (c *heartbeatCut) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/v1/attempts/heartbeat") {
		return http.DefaultTransport.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req worker.HeartbeatRequest
	_ = json.Unmarshal(body, &req)
	c.mu.Lock()
	cut := c.cut[req.Ref()]
	c.mu.Unlock()
	if cut {
		c.dropped.Add(1)
		return nil, errors.New("heartbeat lost in the partition")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// outputTable is a user's own table on the stack's DynamoDB endpoint,
// where handlers write one row per attempt that committed: a stale
// attempt's write that got through would be a row of its own.
type outputTable struct {
	db   *dynamodb.Client
	name string
}

func newOutputTable(t *testing.T, s *stack) *outputTable {
	t.Helper()
	o := &outputTable{db: s.Env.DynamoDBClient(), name: s.opts.Name + "-output"}
	ctx := context.Background()
	_, err := o.db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(o.name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("round"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("attempt"), AttributeType: types.ScalarAttributeTypeN},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("round"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("attempt"), KeyType: types.KeyTypeRange},
		},
	})
	if err != nil {
		t.Fatalf("create the output table: %v", err)
	}
	t.Cleanup(func() {
		if _, err := o.db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(o.name)}); err != nil {
			t.Errorf("delete the output table: %v", err)
		}
	})
	return o
}

// commitResult is how one fenced commit ended.
type commitResult int

const (
	committed commitResult = iota
	refused                // the fence failed: the attempt no longer owns its task
	failedOtherwise
)

// commit is the handler's effect as docs/workers.md shows it: the
// attempt's fence first, then the Put of its output row, in one
// TransactWriteItems. A cancellation for a conflicting write on the same
// items is tried again, as a handler should; the fence's refusal is final.
func (o *outputTable) commit(ctx context.Context, tk worker.Task) (commitResult, error) {
	fence, err := tk.Fence()
	if err != nil {
		return failedOtherwise, err
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		fence,
		{Put: &types.Put{TableName: aws.String(o.name), Item: map[string]types.AttributeValue{
			"round":   &types.AttributeValueMemberS{Value: tk.Run},
			"attempt": &types.AttributeValueMemberN{Value: strconv.Itoa(tk.Attempt)},
		}}},
	}}
	for try := 1; ; try++ {
		_, err := o.db.TransactWriteItems(ctx, in)
		switch {
		case err == nil:
			return committed, nil
		case worker.FenceRefused(err):
			return refused, nil
		case try < 5 && isConflict(err):
			time.Sleep(time.Duration(try) * 50 * time.Millisecond) // a backoff between tries, not a wait for a state
		default:
			return failedOtherwise, err
		}
	}
}

func isConflict(err error) bool {
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) {
		for _, r := range tc.CancellationReasons {
			if aws.ToString(r.Code) == "TransactionConflict" {
				return true
			}
		}
	}
	var ce *types.TransactionConflictException
	return errors.As(err, &ce)
}

// rows is the output table: round -> the attempts that committed in it.
func (o *outputTable) rows(t *testing.T) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	in := &dynamodb.ScanInput{TableName: aws.String(o.name), ConsistentRead: aws.Bool(true)}
	for {
		page, err := o.db.Scan(context.Background(), in)
		if err != nil {
			t.Fatalf("scan the output table: %v", err)
		}
		for _, it := range page.Items {
			round := it["round"].(*types.AttributeValueMemberS).Value
			n, _ := strconv.Atoi(it["attempt"].(*types.AttributeValueMemberN).Value)
			out[round] = append(out[round], n)
		}
		if page.LastEvaluatedKey == nil {
			return out
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// fencedJob is a job whose lost attempts are retried soon: a 10 s
// heartbeat timeout (so an attempt cut off is given up seconds later,
// while one that is not keeps its lease on a heavily loaded machine,
// where a heartbeat's answer may take seconds), a 1 s evidence window.
func fencedJob(name string, attempts int) map[string]any {
	return quickJob(name, map[string]any{
		"retry":    map[string]any{"max_attempts": attempts, "initial_interval": "200ms", "jitter": "none"},
		"timeouts": map[string]any{"heartbeat": "10s", "queue": "5m", "cancel": "2s", "run": "5m"},
	})
}

// A worker cut off from the API past its lease commits after its retry
// has started: the fence refuses it, though its handler never looked at
// ctx. The retry's commit lands, and the output table holds the retry's
// row alone. The first attempt that reaches the handler is the one cut
// off (on a loaded machine a claim's answer may come too late, and the
// attempt is then retried before any handler sees it).
func TestFencedCommitOfAPartitionedAttemptIsRefused(t *testing.T) {
	s := startStack(t, devstack.Options{})
	out := newOutputTable(t, s)
	net := newHeartbeatCut()
	var first sync.Once
	var stale atomic.Int64
	retryStarted, staleTried := make(chan struct{}), make(chan struct{})
	var startRetry sync.Once
	type tried struct {
		attempt int
		r       commitResult
		err     error
	}
	results := make(chan tried, 2)
	s.runWorker("default", worker.Config{Name: "fenced", Concurrency: 2, StopTimeout: 500 * time.Millisecond,
		HTTPClient: &http.Client{Transport: net, Timeout: 15 * time.Second}},
		func(ctx context.Context, tk worker.Task) error {
			ops := context.WithoutCancel(ctx) // the commits ignore ctx on purpose
			first.Do(func() { stale.Store(int64(tk.Attempt)) })
			if tk.Attempt == int(stale.Load()) {
				net.cutOff(tk.Ref())
				select {
				case <-retryStarted:
				case <-time.After(3 * time.Minute):
				}
				r, err := out.commit(ops, tk)
				results <- tried{tk.Attempt, r, err}
				close(staleTried)
				return nil // never reported: the worker gave the attempt up
			}
			startRetry.Do(func() { close(retryStarted) })
			select {
			case <-staleTried:
			case <-time.After(3 * time.Minute):
			}
			r, err := out.commit(ops, tk)
			results <- tried{tk.Attempt, r, err}
			if err != nil || r != committed {
				return fmt.Errorf("commit: %d %v", r, err)
			}
			return nil
		})
	s.createJob(fencedJob("fenced", 5))
	id := s.trigger("fenced", nil)

	d := s.waitRun(id, 5*time.Minute, "SUCCEEDED", "FAILED")
	var got []tried
	for len(got) < 2 {
		select {
		case r := <-results:
			got = append(got, r)
		case <-time.After(2 * time.Minute):
			t.Fatalf("commits tried: %+v, want the stale attempt's and its retry's", got)
		}
	}
	history := func() string { return describe(s.records(id, "main")) }
	if got[0].r != refused || got[0].err != nil || got[0].attempt != int(stale.Load()) {
		t.Fatalf("the cut-off attempt's commit: %+v, want refused (%d)", got[0], refused)
	}
	if got[1].r != committed || got[1].err != nil || got[1].attempt <= got[0].attempt {
		t.Fatalf("the retry's commit: %+v, want committed (%d)", got[1], committed)
	}
	if d.Run.ExecutionState != "SUCCEEDED" {
		t.Fatalf("run %s %s, commits %+v; history %s", id, d.Run.ExecutionState, got, history())
	}
	main := s.runDetail(id).task("main")
	if main.Attempt != got[1].attempt || main.attempt(t, got[0].attempt).State != "LOST" {
		t.Fatalf("task %+v, want attempt %d LOST and attempt %d the last", main, got[0].attempt, got[1].attempt)
	}
	if rows := out.rows(t); len(rows) != 1 || len(rows[id]) != 1 || rows[id][0] != got[1].attempt {
		t.Fatalf("output rows %v, want attempt %d's alone", rows, got[1].attempt)
	}
	if net.dropped.Load() == 0 {
		t.Fatal("no heartbeat was dropped: the partition did not happen")
	}
}

// roundLog is what the handlers of the random rounds saw: per attempt,
// whether it was cut off and how its commit ended.
type roundLog struct {
	mu      sync.Mutex
	cut     map[worker.AttemptRef]bool
	commits map[worker.AttemptRef]commitResult
	errs    []string
	// started is, per run, the highest attempt whose handler started.
	started map[string]int
}

func (l *roundLog) start(ref worker.AttemptRef, cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut[ref] = cut
	l.started[ref.Run] = max(l.started[ref.Run], ref.Attempt)
}

func (l *roundLog) retryStarted(ref worker.AttemptRef) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started[ref.Run] > ref.Attempt
}

func (l *roundLog) record(ref worker.AttemptRef, r commitResult, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.commits[ref] = r
	if err != nil {
		l.errs = append(l.errs, fmt.Sprintf("%s: %v", ref, err))
	}
}

// 100 rounds at once, each a run whose attempts are cut off at random
// (each of the first two with even odds, at its start or after a
// heartbeat got through), the cut-off ones committing either once the
// scheduler has found them gone (the task no longer RUNNING on that
// attempt) or once their retry's handler has started. Every round ends
// with exactly one output row, the attempt that succeeded; every cut-off
// attempt's commit was refused.
func TestExactlyOnceEffectsUnderRandomPartitions(t *testing.T) {
	// Attempts 1 and 2 may be cut off; the ones after never are. The
	// policy allows more than three, as a claim or heartbeat answered too
	// late on a loaded machine loses an attempt too.
	const rounds, cuttable, attempts = 100, 2, 5
	s := startStack(t, devstack.Options{})
	out := newOutputTable(t, s)
	net := newHeartbeatCut()
	log := &roundLog{cut: map[worker.AttemptRef]bool{}, commits: map[worker.AttemptRef]commitResult{}, started: map[string]int{}}
	handler := func(ctx context.Context, tk worker.Task) error {
		ops := context.WithoutCancel(ctx)
		cut := tk.Attempt <= cuttable && rand.IntN(2) == 0
		log.start(tk.Ref(), cut)
		if !cut {
			r, err := out.commit(ops, tk)
			log.record(tk.Ref(), r, err)
			if err != nil || r != committed {
				return fmt.Errorf("commit: %d %v", r, err)
			}
			return nil
		}
		if rand.IntN(2) == 0 {
			// After a heartbeat got through: the lease had moved on.
			first := tk.FencingDeadline()
			for !tk.FencingDeadline().After(first) && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond) // a poll interval
			}
		}
		net.cutOff(tk.Ref())
		gone := func() bool { return log.retryStarted(tk.Ref()) }
		if rand.IntN(2) == 0 {
			gone = func() bool { return !s.ownedBy(tk.Ref()) }
		}
		for deadline := time.Now().Add(5 * time.Minute); !gone() && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond) // a poll interval
		}
		r, err := out.commit(ops, tk)
		log.record(tk.Ref(), r, err)
		return nil // never reported: the worker gave the attempt up
	}
	for _, name := range []string{"eo-a", "eo-b"} {
		s.runWorker("default", worker.Config{Name: name, Concurrency: 60, StopTimeout: 500 * time.Millisecond,
			HTTPClient: &http.Client{Transport: net, Timeout: 15 * time.Second}}, handler)
	}
	s.createJob(fencedJob("rounds", attempts))
	began := time.Now()
	ids := make([]string, rounds)
	for i := range ids {
		ids[i] = s.trigger("rounds", nil)
	}
	final := map[string]int{}
	for _, id := range ids {
		d := s.waitRun(id, 10*time.Minute, "SUCCEEDED", "FAILED")
		if d.Run.ExecutionState != "SUCCEEDED" {
			log.mu.Lock()
			seen := map[int]string{}
			for ref, cut := range log.cut {
				if ref.Run == id {
					seen[ref.Attempt] = fmt.Sprintf("cut %v, commit %d", cut, log.commits[ref])
				}
			}
			log.mu.Unlock()
			t.Fatalf("run %s %s; handlers saw %v; history %s", id, d.Run.ExecutionState, seen, describe(s.records(id, "main")))
		}
		final[id] = d.task("main").Attempt
	}
	took := time.Since(began)

	// A cut-off handler may still be on its way to its commit after its
	// run ended; the rows are counted once every commit was tried.
	cutOff := 0
	eventually(t, 5*time.Minute, "every started attempt's commit tried", func() (bool, string) {
		log.mu.Lock()
		defer log.mu.Unlock()
		cutOff = 0
		for ref, cut := range log.cut {
			if _, ok := log.commits[ref]; !ok {
				return false, ref.String()
			}
			if cut {
				cutOff++
			}
		}
		return true, ""
	})
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.errs) > 0 {
		t.Fatalf("commits failed for another reason than the fence: %q", log.errs)
	}
	for ref, cut := range log.cut {
		if r := log.commits[ref]; cut && r != refused {
			t.Errorf("cut-off attempt %s: commit %d, want refused", ref, r)
		}
	}
	rows := out.rows(t)
	for _, id := range ids {
		if got := rows[id]; len(got) != 1 || got[0] != final[id] {
			t.Errorf("round %s: rows of attempts %v, want attempt %d's alone", id, got, final[id])
		}
	}
	if len(rows) != rounds {
		t.Errorf("%d rounds have rows, want %d", len(rows), rounds)
	}
	if cutOff < rounds/4 {
		t.Fatalf("only %d attempts were cut off in %d rounds: the partitions did not happen", cutOff, rounds)
	}
	t.Logf("%d rounds in %s: %d attempts started, %d cut off and refused, %d heartbeats dropped",
		rounds, took.Round(time.Second), len(log.cut), cutOff, net.dropped.Load())
}

// ownedBy reports whether ref still owns its task by the API's answer:
// the task's current attempt and RUNNING or CANCELLING. An error reads
// as owned, so a caller waits on.
func (s *stack) ownedBy(ref worker.AttemptRef) bool {
	req, err := http.NewRequest("GET", s.url+"/v1/runs/"+ref.Run, nil)
	if err != nil {
		return true
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return true
	}
	defer resp.Body.Close()
	var d runDoc
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&d) != nil {
		return true
	}
	tk := d.task(ref.Task)
	return tk.Attempt == ref.Attempt && (tk.State == "RUNNING" || tk.State == "CANCELLING")
}

// A claim answer over HTTP carries the fence (the ledger's table, the
// task's item, the condition over the attempt and its owning states), and
// the OpenAPI document accepts it: every answer is checked against it.
func TestClaimAnswerCarriesTheFence(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(quickJob("fence-claim", nil))
	run := s.trigger("fence-claim", nil)
	env := takeEnvelope(t, s, run, 1)
	if env.Fence != nil {
		t.Fatalf("the dispatch message carries a fence %+v: only a claim answer may", env.Fence)
	}
	r := s.callAs("Bearer "+env.Token, "POST", "/v1/attempts/claim",
		map[string]any{"run": run, "task": "main", "attempt": 1, "worker_id": "probe@1", "event_id": "claim-fence"}).must(t, http.StatusOK)
	var answer worker.ClaimResponse
	if err := json.Unmarshal(r.Raw, &answer); err != nil {
		t.Fatal(err)
	}
	if answer.Envelope == nil || answer.Envelope.Fence == nil {
		t.Fatalf("claim answer %s carries no fence", r.Raw)
	}
	f := answer.Envelope.Fence
	if f.Table != s.Info.Table || f.Key["pk"] != "RUN#"+run || f.Key["sk"] == "" || len(f.Key) != 2 {
		t.Fatalf("fence %+v, want the task's item in table %s", f, s.Info.Table)
	}
	if f.Condition == "" || f.Values[":a"] != float64(1) {
		t.Fatalf("fence %+v, want a condition on attempt 1", f)
	}
	states := map[any]bool{}
	for _, v := range f.Values {
		states[v] = true
	}
	if !states["RUNNING"] || !states["CANCELLING"] || len(f.Values) != 3 {
		t.Fatalf("fence values %v, want attempt 1 and the owning states RUNNING and CANCELLING", f.Values)
	}
	if _, err := worker.ConditionCheck(*f); err != nil {
		t.Fatalf("the SDK cannot use the fence it gets: %v", err)
	}
}
