package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/emulator/emulatortest"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// seedFinishedPointers writes n run pointers of job that look like the
// pointer of a finished run (a real one, cloned under new run ids) with
// BatchWriteItem: the history a job accumulates, cheaply.
func seedFinishedPointers(t *testing.T, ts *testStore, job string, n int) {
	t.Helper()
	ctx := context.Background()
	v := ts.MustCreate(t, ledgertest.NewRun(job, "a"))
	if _, err := ts.UpdateRunState(ctx, v.Run, ledger.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired}); err != nil {
		t.Fatal(err)
	}
	tmpl := getItem(t, ts.table, store.RunPointerPK(job, v.Run.ID), "RUN#"+v.Run.ID)
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
	live := ts.MustCreate(t, ledgertest.NewRun("wf", "x"))
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
	// The newest pointers are read from each of the job's pointer shards
	// (here two hold the seeded ones): at most 10 from each.
	if n := c.Items(); n > 40 {
		t.Fatalf("finding 1 unfinished run among %d examined %d items, want at most 40", finished+31, n)
	}
}

// TestFormerLivePointerLeavesTheIndex: before the run item carried the
// live index's keys, the pointer did. A pointer written so, whose run
// finished, is taken out of the index by the first reader that meets it;
// a new run's pointer is never in the index, and its run item leaves it
// in the write that finishes it.
func TestFormerLivePointerLeavesTheIndex(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	old := ts.MustCreate(t, ledgertest.NewRun("former", "main"))
	ptr := getItem(t, ts.table, store.RunPointerPK("former", old.Run.ID), "RUN#"+old.Run.ID)
	if _, live := ptr["live_pk"]; live {
		t.Fatal("a new pointer carries live_pk")
	}
	// The former layout: the pointer in JOB#<job> and in the index beside
	// its run.
	ptr["pk"] = &types.AttributeValueMemberS{Value: "JOB#former"}
	ptr["live_pk"] = &types.AttributeValueMemberS{Value: "JOB#former"}
	ptr["live_sk"] = &types.AttributeValueMemberS{Value: old.Run.ID}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(ts.table), Item: ptr}); err != nil {
		t.Fatal(err)
	}
	done, err := ts.UpdateRunState(ctx, old.Run, ledger.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired})
	if err != nil {
		t.Fatal(err)
	}
	if _, live := getItem(t, ts.table, "RUN#"+done.ID, "RUN")["live_pk"]; live {
		t.Fatal("the finished run item is still in the live index")
	}
	live := ts.MustCreate(t, ledgertest.NewRun("former", "main"))
	runs, err := ts.ListUnfinishedRuns(ctx, "former")
	if err != nil || len(runs) != 1 || runs[0].ID != live.Run.ID {
		t.Fatalf("unfinished runs %+v, %v; want only %s", runs, err, live.Run.ID)
	}
	if _, still := getItem(t, ts.table, "JOB#former", "RUN#"+old.Run.ID)["live_pk"]; still {
		t.Fatal("the finished run's former entry is still in the index after a reader met it")
	}
	if busy, err := ts.HasUnfinishedRuns(ctx, "former"); err != nil || !busy {
		t.Fatalf("HasUnfinishedRuns = %v, %v; want true", busy, err)
	}
}
