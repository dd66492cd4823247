package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/emulator/emulatortest"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// counted is the fixture's service again, on a client whose reads c counts.
func (f *fixture) counted(c *emulatortest.ReadCounter) *scheduler.Service {
	st := store.New(env.DynamoDBClient(c.Option), f.table, store.WithClock(f.clock.Now), store.WithTimerHorizon(ledger.IndexEveryTimer))
	return mustNew(st, f.q, scheduler.Config{Pools: map[string]string{"default": f.pool}, Now: f.clock.Now})
}

func (f *fixture) createJob(t *testing.T, def string) {
	t.Helper()
	j, err := jobspec.Parse([]byte(def), f.svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Jobs().CreateJob(context.Background(), j); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) trigger(t *testing.T, job string, logical time.Time) ledger.RunView {
	t.Helper()
	v, _, err := f.svc.Triggers().TriggerRun(context.Background(), scheduler.TriggerRequest{Job: job, LogicalTime: logical})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (f *fixture) readRun(t *testing.T, id string) ledger.RunView {
	t.Helper()
	v, err := f.st.ReadRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (f *fixture) tick(t *testing.T, svc *scheduler.Service) scheduler.PassStats {
	t.Helper()
	st, err := svc.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// seedFinishedRuns writes n finished runs of job, cloned from the pointer
// of a real finished run under new run ids with BatchWriteItem: the
// history a job accumulates, without running it.
func (f *fixture) seedFinishedRuns(t *testing.T, job string, n int) {
	t.Helper()
	ctx := context.Background()
	v := f.trigger(t, job, f.clock.Now().Add(-time.Hour))
	if err := f.svc.CancelRun(ctx, v.Run.ID, "seed"); err != nil {
		t.Fatal(err)
	}
	db := env.DynamoDBClient()
	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &[]string{f.table}[0], ConsistentRead: &[]bool{true}[0],
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: store.RunPointerPK(job, v.Run.ID)}, "sk": &types.AttributeValueMemberS{Value: "RUN#" + v.Run.ID}}})
	if err != nil || got.Item == nil {
		t.Fatalf("pointer of %s: %v", v.Run.ID, err)
	}
	var batch []types.WriteRequest
	for i := range n {
		id := fmt.Sprintf("00SEED%020d", i) // older than every real run
		it := map[string]types.AttributeValue{}
		for k, a := range got.Item {
			if s, ok := a.(*types.AttributeValueMemberS); ok {
				a = &types.AttributeValueMemberS{Value: strings.ReplaceAll(s.Value, v.Run.ID, id)}
			}
			it[k] = a
		}
		batch = append(batch, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
		if len(batch) == 25 || i == n-1 {
			if _, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{f.table: batch}}); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
}

// The fire of a cancel_previous job cancels the previous unfinished run
// and reads only the job's unfinished runs: with 400 finished runs of the
// job, the fire examines a bounded number of items (it paged through all
// of the job's runs before).
func TestCancelPreviousFireFollowsLiveRuns(t *testing.T) {
	f := newEmulatorFixture(t)
	f.createJob(t, `{"name":"every","schedule":{"cron":"* * * * *","timezone":"UTC"},"overlap":"cancel_previous","timeouts":{"queue":"1h"}}`)
	f.clock.Advance(time.Minute) // 03:05:05: the 03:05 slot is due
	f.tick(t, f.svc)
	first, err := f.st.ListUnfinishedRuns(context.Background(), "every")
	if err != nil || len(first) != 1 {
		t.Fatalf("after the first fire: %+v %v", first, err)
	}
	f.seedFinishedRuns(t, "every", 400)

	var c emulatortest.ReadCounter
	svc := f.counted(&c)
	f.clock.Advance(time.Minute) // the 03:06 slot
	f.tick(t, svc)
	if got := f.readRun(t, first[0].ID).Run.ExecutionState; got != statemodel.RunCancelled {
		t.Fatalf("the previous run is %s, want CANCELLED by the next fire", got)
	}
	live, err := f.st.ListUnfinishedRuns(context.Background(), "every")
	if err != nil || len(live) != 1 || live[0].ID == first[0].ID {
		t.Fatalf("after the second fire: %+v %v, want one new unfinished run", live, err)
	}
	if n := c.Items(); n > 150 {
		t.Fatalf("the fire examined %d items with 400 finished runs of the job, want at most 150", n)
	}
}

// A run's finish wakes the runs that wait on it, and reads only its
// dependents: with 300 other jobs defined, the finish examines a bounded
// number of items (it listed and parsed every job before).
func TestRunFinishReadsOnlyDependents(t *testing.T) {
	f := newEmulatorFixture(t)
	for i := range 300 {
		f.createJob(t, fmt.Sprintf(`{"name":"other-%03d"}`, i))
	}
	f.createJob(t, `{"name":"up"}`)
	f.createJob(t, `{"name":"down","depends_on_jobs":[{"job":"up","require":"succeeded"}]}`)
	logical := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	down := f.trigger(t, "down", logical)
	if st := down.Tasks[0].Instance.Snapshot.State; st != statemodel.StateCreated {
		t.Fatalf("the dependent run's task is %s before its upstream ran, want CREATED", st)
	}
	up := f.trigger(t, "up", logical)

	var c emulatortest.ReadCounter
	svc := f.counted(&c)
	// The upstream run ends CANCELLED: a dependent that needs SUCCEEDED
	// can never run, and the finish tells it at once.
	if err := svc.CancelRun(context.Background(), up.Run.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if st := f.readRun(t, down.Run.ID).Tasks[0].Instance.Snapshot.State; st != statemodel.StateUpstreamFailed {
		t.Fatalf("the dependent's task is %s after its upstream run was cancelled, want UPSTREAM_FAILED at once", st)
	}
	if n := c.Items(); n > 100 {
		t.Fatalf("the finish examined %d items with 302 jobs defined, want at most 100", n)
	}
}

// A skip or an upstream failure travels a whole deep chain in one call.
func TestUpstreamFailureTravelsTheWholeChainAtOnce(t *testing.T) {
	f := newFixture(t)
	const n = 20
	tasks := make([]string, n)
	for i := range tasks {
		dep := "[]"
		if i > 0 {
			dep = fmt.Sprintf(`["t%02d"]`, i-1)
		}
		tasks[i] = fmt.Sprintf(`{"id":"t%02d","depends_on":%s}`, i, dep)
	}
	f.createJob(t, `{"name":"chain","tasks":[`+strings.Join(tasks, ",")+`]}`)
	v := f.trigger(t, "chain", time.Time{})
	if err := f.svc.CancelTask(context.Background(), ledger.InstanceKey{Run: v.Run.ID, Task: "t00"}, "test"); err != nil {
		t.Fatal(err)
	}
	after := f.readRun(t, v.Run.ID)
	for _, tv := range after.Tasks[1:] {
		if st := tv.Instance.Snapshot.State; st != statemodel.StateUpstreamFailed {
			t.Fatalf("task %s is %s right after t00 was cancelled, want UPSTREAM_FAILED", tv.Instance.Key.Task, st)
		}
	}
	if after.Run.ExecutionState != statemodel.RunFailed {
		t.Fatalf("run %s, want FAILED", after.Run.ExecutionState)
	}
}

// A live run whose state does not change has its backstop re-armed: the
// next pass does not list it again.
func TestRunBackstopIsReArmed(t *testing.T) {
	f := newFixture(t)
	f.createJob(t, `{"name":"slow","timeouts":{"queue":"1h"}}`)
	v := f.trigger(t, "slow", time.Time{})
	f.clock.Advance(6 * time.Minute)
	if st := f.tick(t, f.svc); st.Due != 1 {
		t.Fatalf("first pass listed %d timers, want the run's backstop", st.Due)
	}
	run := f.readRun(t, v.Run.ID).Run
	if !run.TimerAt.After(f.clock.Now()) {
		t.Fatalf("backstop at %s, not re-armed after %s", run.TimerAt, f.clock.Now())
	}
	if st := f.tick(t, f.svc); st.Due != 0 {
		t.Fatalf("second pass listed %d timers, want none", st.Due)
	}
}

// Once a task has started, its run stays RUNNING while a retry waits in
// the queue.
func TestRequeuedRetryKeepsTheRunRunning(t *testing.T) {
	f := newFixture(t)
	run, envl := f.running(t, "w@boot")
	ctx := context.Background()
	if got := f.readRun(t, run).Run.ExecutionState; got != statemodel.RunRunning {
		t.Fatalf("run %s after the claim, want RUNNING", got)
	}
	retryable := true
	if _, err := f.svc.Workers().Complete(ctx, protocol.Completion{
		Run: envl.Run, Task: envl.Task, Attempt: envl.Attempt,
		EventID: "fail-1", Outcome: "failed", Retryable: &retryable, ErrorCategory: "boom",
	}, envl.Token); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2 * time.Second)
	f.tick(t, f.svc)
	if snap := f.instance(t, run).Snapshot; snap.State != statemodel.StateQueued || snap.Attempt != 2 {
		t.Fatalf("task %s attempt %d, want attempt 2 QUEUED", snap.State, snap.Attempt)
	}
	if err := f.svc.AdvanceRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	if got := f.readRun(t, run).Run.ExecutionState; got != statemodel.RunRunning {
		t.Fatalf("run %s while its retry is queued, want RUNNING", got)
	}
}

// Each ticker pass starts one shard further: passes that stop after their
// first timer still reach every shard in turn.
func TestTickPassesRotateTheirFirstShard(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for i := range 48 {
		if _, err := f.st.CreateJob(ctx, ledger.Job{Name: fmt.Sprintf("j%02d", i), Spec: json.RawMessage(`{}`), NextFireAt: f.clock.Now().Add(-time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	first := map[string]bool{}
	for range 16 {
		pctx, cancel := context.WithCancel(ctx)
		var seen string
		if _, err := f.svc.TickPassForTest(pctx, func(d ledger.DueTimer) {
			if seen == "" {
				seen = d.Job
				cancel() // a pass that runs out of time after one timer
			}
		}); err != nil {
			t.Fatal(err)
		}
		cancel()
		first[seen] = true
	}
	if len(first) < 8 {
		t.Fatalf("16 passes stopped after one timer served %d distinct first timers, want one per non-empty shard (at least 8)", len(first))
	}
}
