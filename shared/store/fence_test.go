package store_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/shared/worker"
	"github.com/runledger/runledger/statemodel"
)

// commitFenced is a worker's own write as docs/workers.md shows it: the
// attempt's fence, made a ConditionCheck by the worker SDK (the one
// conversion from the wire), and a Put of its output row into its own
// table, in one TransactWriteItems. It answers whether the transaction
// committed; a failure other than the fence's refusal fails the test.
func commitFenced(t *testing.T, userTable string, f protocol.Fence, row string, attempt int) bool {
	t.Helper()
	check, err := worker.ConditionCheck(f)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		check,
		{Put: &types.Put{TableName: aws.String(userTable), Item: map[string]types.AttributeValue{
			tableschema.PK: &types.AttributeValueMemberS{Value: row},
			tableschema.SK: &types.AttributeValueMemberS{Value: "OUTPUT"},
			"attempt":      &types.AttributeValueMemberN{Value: strconv.Itoa(attempt)},
		}}},
	}})
	switch {
	case err == nil:
		return true
	case worker.FenceRefused(err):
		return false
	}
	t.Fatalf("commit of attempt %d: %v", attempt, err)
	return false
}

// TestFenceAdmitsOnlyTheOwningAttempt: a worker's own transaction with its
// attempt's fence commits while the attempt runs, and not once it failed,
// its retry started, or it ended; the retry's fence commits in its place.
// No clock is involved: the check reads the instance's attempt and state.
func TestFenceAdmitsOnlyTheOwningAttempt(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	userTable := newTable(t)
	v := ts.MustCreate(t, ledgertest.NewRun("fenced", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.ToQueued(t, key)
	ts.Step(t, key, ledgertest.Started(1, "w1"), now)
	f1 := mustFence(t, ts, key, 1)
	if f1.Table != ts.table {
		t.Fatalf("fence table %q, want the ledger's %q", f1.Table, ts.table)
	}
	if !commitFenced(t, userTable, f1, "row-a", 1) {
		t.Fatal("attempt 1's commit refused while it runs")
	}
	fail := ledgertest.Ev(statemodel.EvFailed, 1)
	fail.ErrorCategory = "boom"
	ts.Step(t, key, fail, now)
	if commitFenced(t, userTable, f1, "row-b", 1) {
		t.Fatal("attempt 1 committed after it failed")
	}
	now = ts.Clock.Advance(time.Hour)
	ts.Step(t, key, ledgertest.Ev(statemodel.EvRetryDue, 0), now)
	ts.Step(t, key, ledgertest.Dispatch(2), now)
	if commitFenced(t, userTable, mustFence(t, ts, key, 2), "row-b", 2) {
		t.Fatal("attempt 2 committed before its claim")
	}
	ts.Step(t, key, ledgertest.Started(2, "w2"), now)
	f2 := mustFence(t, ts, key, 2)
	if commitFenced(t, userTable, f1, "row-b", 1) {
		t.Fatal("attempt 1 committed after its retry started")
	}
	if !commitFenced(t, userTable, f2, "row-b", 2) {
		t.Fatal("attempt 2's commit refused while it runs")
	}
	ts.Step(t, key, ledgertest.Succeeded(2), now)
	if commitFenced(t, userTable, f2, "row-c", 2) {
		t.Fatal("attempt 2 committed after it succeeded")
	}
	rows := 0
	for _, it := range scanAll(t, userTable) {
		rows++
		if it[tableschema.PK].(*types.AttributeValueMemberS).Value == "row-c" {
			t.Fatal("a refused commit left its row")
		}
	}
	if rows != 2 {
		t.Fatalf("%d rows, want the two that committed", rows)
	}
	if _, _, err := ts.Fence(ctx, ledger.InstanceKey{Run: v.Run.ID, Task: ""}, 1); !errors.Is(err, ledger.ErrInvalidKey) {
		t.Fatalf("fence of no task: %v, want ErrInvalidKey", err)
	}
}

// TestFenceOfAMapChildNamesItsItem: a map child's fence checks the child's
// own item (a run without a map item keeps its children in the run's
// partition, as a map stored before the partitions did).
func TestFenceOfAMapChildNamesItsItem(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.MustCreate(t, ledgertest.NewRun("fencedmap", "main"))
	child := ledger.InstanceKey{Run: v.Run.ID, Task: "main[7]"}
	f, ok, err := ts.Fence(ctx, child, 3)
	if err != nil || !ok {
		t.Fatalf("fence: %v %v", ok, err)
	}
	if f.Key[tableschema.PK] != "RUN#"+v.Run.ID || f.Key[tableschema.SK] != "MAP#main#C#00007" || f.Values[":a"] != 3 {
		t.Fatalf("fence %+v, want the child's item MAP#main#C#00007 and attempt 3", f)
	}
}

func mustFence(t *testing.T, ts *testStore, key ledger.InstanceKey, n int) protocol.Fence {
	t.Helper()
	f, ok, err := ts.Fence(context.Background(), key, n)
	if err != nil || !ok {
		t.Fatalf("fence %s#%d: ok %v, %v", key, n, ok, err)
	}
	return f
}
