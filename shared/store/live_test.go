package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/emulator/emulatortest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/store/storetest"
	"github.com/runledger/runledger/statemodel"
)

// seedFinishedPointers writes n run pointers of job that look like the
// pointer of a finished run (a real one, cloned under new run ids) with
// BatchWriteItem: the history a job accumulates, cheaply.
func seedFinishedPointers(t *testing.T, ts *testStore, job string, n int) {
	t.Helper()
	ctx := context.Background()
	v := ts.MustCreate(t, storetest.NewRun(job, "a"))
	if _, err := ts.UpdateRunState(ctx, v.Run, store.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired}); err != nil {
		t.Fatal(err)
	}
	tmpl := getItem(t, ts.table, "JOB#"+job, "RUN#"+v.Run.ID)
	var batch []types.WriteRequest
	flush := func() {
		if _, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{ts.table: batch}}); err != nil {
			t.Fatal(err)
		}
		batch = nil
	}
	for i := range n {
		id := fmt.Sprintf("01SEED%020d", i)
		it := map[string]types.AttributeValue{}
		for k, a := range tmpl {
			if s, ok := a.(*types.AttributeValueMemberS); ok {
				a = &types.AttributeValueMemberS{Value: strings.ReplaceAll(s.Value, v.Run.ID, id)}
			}
			it[k] = a
		}
		batch = append(batch, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
		if len(batch) == 25 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
}

func unfinishedIDs(t *testing.T, st *store.Store, job string) []string {
	t.Helper()
	runs, err := st.ListUnfinishedRuns(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return out
}

// What the unfinished runs of a job cost to find does not grow with the
// runs it finished: 600 finished runs of the job, one unfinished, and both
// reads examine a handful of items (they read every pointer before).
func TestUnfinishedRunsCostFollowsLiveWork(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	const finished = 600
	seedFinishedPointers(t, ts, "wf", finished)
	var c emulatortest.ReadCounter
	counted := store.New(env.DynamoDBClient(c.Option), ts.table, store.WithClock(ts.Clock.Now))

	if busy, err := counted.HasUnfinishedRuns(ctx, "wf"); err != nil || busy {
		t.Fatalf("HasUnfinishedRuns with only finished runs: %t %v", busy, err)
	}
	if n := c.Items(); n > 20 {
		t.Fatalf("HasUnfinishedRuns examined %d items with %d finished runs and none unfinished, want at most 20", n, finished)
	}
	c.Reset()
	if got := unfinishedIDs(t, counted, "wf"); len(got) != 0 {
		t.Fatalf("unfinished runs: %v", got)
	}
	live := ts.MustCreate(t, storetest.NewRun("wf", "x"))
	// Old runs, newer than the live one: the newest pointers do not find
	// it, the live index does.
	seedFinishedPointers(t, ts, "wf", 30)
	c.Reset()
	if busy, err := counted.HasUnfinishedRuns(ctx, "wf"); err != nil || !busy {
		t.Fatalf("HasUnfinishedRuns with %s unfinished: %t %v", live.Run.ID, busy, err)
	}
	if got := unfinishedIDs(t, counted, "wf"); !slices.Equal(got, []string{live.Run.ID}) {
		t.Fatalf("unfinished runs: %v, want %s", got, live.Run.ID)
	}
	if n := c.Items(); n > 20 {
		t.Fatalf("finding 1 unfinished run among %d examined %d items, want at most 20", finished+31, n)
	}
}

// TestPointerLeftLiveByAStoppedWriterIsRepaired: UpdateRunState writes a
// finishing run's item, then takes its pointer out of the live index. A
// writer stopped between the two leaves a live pointer of a finished run;
// HasUnfinishedRuns confirms against the run item, answers false, and
// takes the pointer out.
func TestPointerLeftLiveByAStoppedWriterIsRepaired(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	c := &crasher{}
	cs := store.New(env.DynamoDBClient(c.option), ts.table, store.WithClock(ts.Clock.Now))
	v := ts.MustCreate(t, storetest.NewRun("stopped", "main"))
	c.arm(2) // the pointer's write
	_, err := cs.UpdateRunState(ctx, v.Run, store.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired})
	if !errors.Is(err, errCrash) {
		t.Fatalf("update stopped before the pointer: %v", err)
	}
	c.arm(0)
	ptr := getItem(t, ts.table, "JOB#stopped", "RUN#"+v.Run.ID)
	if _, live := ptr["live_pk"]; !live {
		t.Fatal("the scenario needs the pointer still live")
	}
	busy, err := ts.HasUnfinishedRuns(ctx, "stopped")
	if err != nil || busy {
		t.Fatalf("HasUnfinishedRuns = %v, %v; want false: the run finished", busy, err)
	}
	ptr = getItem(t, ts.table, "JOB#stopped", "RUN#"+v.Run.ID)
	if _, live := ptr["live_pk"]; live {
		t.Fatal("the finished run's pointer is still live after the check")
	}
}
