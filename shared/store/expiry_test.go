package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// runItems reads every item of run: its partition and its pointer.
func runItems(t *testing.T, table string, run ledger.Run) []map[string]types.AttributeValue {
	t.Helper()
	var out []map[string]types.AttributeValue
	for _, it := range scanAll(t, table) {
		pk, _ := it["pk"].(*types.AttributeValueMemberS)
		id, _ := it["run_id"].(*types.AttributeValueMemberS)
		switch {
		case pk != nil && (pk.Value == "RUN#"+run.ID || strings.HasPrefix(pk.Value, "RUN#"+run.ID+"#")):
			out = append(out, it) // the run's partition and its maps' child partitions
		case kind(it) == "run_pointer" && id != nil && id.Value == run.ID:
			out = append(out, it)
		}
	}
	return out
}

// checkExpiry: every item of run carries at as its TTL, and the kinds
// want are among them.
func checkExpiry(t *testing.T, items []map[string]types.AttributeValue, at time.Time, want ...string) {
	t.Helper()
	kinds := map[string]int{}
	for _, it := range items {
		kinds[kind(it)]++
		n, ok := it[tableschema.TTL].(*types.AttributeValueMemberN)
		if !ok {
			t.Errorf("item %v/%v (%s) has no %s", it["pk"], it["sk"], kind(it), tableschema.TTL)
			continue
		}
		if got, _ := strconv.ParseInt(n.Value, 10, 64); got != at.Unix() {
			t.Errorf("item %v/%v (%s) expires at %d, its run at %d", it["pk"], it["sk"], kind(it), got, at.Unix())
		}
	}
	for _, k := range want {
		if kinds[k] == 0 {
			t.Errorf("items by kind %v: no %s item, the scenario must write one", kinds, k)
		}
	}
}

// TestEveryItemOfARunExpiresTogether: the run, its pointer, its instances,
// spilled history, evicted attempts, a late event's attempt item, its map
// item, element chunk, count shard, children and output all carry the
// run's expiry, and a push moves all of them to the new one, so DynamoDB
// removes the run whole.
func TestEveryItemOfARunExpiresTogether(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	nr := ledgertest.NewRun("kept", "main", "each")
	nr.Retention = 48 * time.Hour
	v := ts.MustCreate(t, nr)
	now := ts.Clock.Now()

	// main: enough attempts to spill history and evict attempt records,
	// then a late event of its first attempt.
	key := ledger.InstanceKey{Run: v.Run.ID, Task: "main"}
	ts.Step(t, key, ledgertest.Ev(statemodel.EvDepsMet, 0), now)
	const attempts = statemodel.MaxInlineAttempts + 1
	for n := 1; n <= attempts; n++ {
		failed := ledgertest.Ev(statemodel.EvFailed, n)
		failed.Reason, failed.Retryable = fmt.Sprintf("attempt %d failed", n), new(bool)
		ts.Step(t, key, ledgertest.Dispatch(n), now)
		ts.Step(t, key, ledgertest.Started(n, "w"), now)
		ts.Step(t, key, failed, now)
		if n < attempts {
			retry := ledgertest.Ev(statemodel.EvManualRetry, 0)
			retry.Operator, retry.Reason = "ana", "again"
			ts.Step(t, key, retry, now)
		}
	}
	if err := ts.Store.AppendLate(ctx, key, statemodel.LateEvent{Attempt: 2, EventID: "late-1", Type: statemodel.EvHeartbeat, Actor: statemodel.ActorWorker, EventTime: now, ObservedAt: now}); err != nil {
		t.Fatal(err)
	}

	// each: a map of two children, one ended, and its output.
	parent := ts.MustInstance(t, ledger.InstanceKey{Run: v.Run.ID, Task: "each"})
	m := ledger.MapState{Run: v.Run.ID, Task: "each", Total: 2, MaxParallel: 2, ExpiresAt: parent.ExpiresAt}
	if err := ts.Store.CreateMap(ctx, m, [][]byte{[]byte("0"), []byte("1")}); err != nil {
		t.Fatal(err)
	}
	var children []ledger.Instance
	for i := range 2 {
		c, err := ledger.NewInstance(ledger.NewRun{ID: v.Run.ID, Job: "kept"}, ledger.NewTask{
			ID: ledger.ChildTask("each", i), Pool: "default", Policy: ledgertest.Policy(), Scheduled: true}, now)
		if err != nil {
			t.Fatal(err)
		}
		c.ExpiresAt = parent.ExpiresAt
		children = append(children, c)
	}
	if err := ts.Store.CreateChildren(ctx, children); err != nil {
		t.Fatal(err)
	}
	child := children[0].Key
	ts.Step(t, child, ledgertest.Dispatch(1), now)
	ts.Step(t, child, ledgertest.Started(1, "w"), now)
	ts.Step(t, child, ledgertest.Succeeded(1), now)
	if err := ts.Store.SetMapOutput(ctx, v.Run.ID, "each", []byte(`[1]`), false); err != nil {
		t.Fatal(err)
	}

	kinds := []string{"run", "run_pointer", "instance", "history", "attempt", "map", "map_shard", "map_items", "map_output"}
	checkExpiry(t, runItems(t, ts.table, v.Run), v.Run.ExpiresAt, kinds...)

	// A day and a half on, the run unfinished: its backstop pass pushes
	// every item.
	ts.Clock.Advance(36 * time.Hour)
	stored, err := ts.GetRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := ts.RearmRunBackstop(ctx, stored)
	if err != nil {
		t.Fatal(err)
	}
	if !pushed.ExpiresAt.After(v.Run.ExpiresAt) {
		t.Fatalf("the backstop pass left the expiry at %s", pushed.ExpiresAt)
	}
	checkExpiry(t, runItems(t, ts.table, v.Run), pushed.ExpiresAt, kinds...)
}

// TestRunStoredBeforeExpiryNeverExpires: a run item written before runs
// expired (no expires_at, no retention) reads, is listed, and its
// backstop pass writes no expiry, whatever the clock.
func TestRunStoredBeforeExpiryNeverExpires(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.MustCreate(t, ledgertest.NewRun("old", "main"))
	for _, it := range runItems(t, ts.table, v.Run) {
		_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(ts.table), Key: map[string]types.AttributeValue{"pk": it["pk"], "sk": it["sk"]},
			UpdateExpression: aws.String("REMOVE expires_at, retention"),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	ts.Clock.Advance(10 * 8760 * time.Hour)
	run, err := ts.GetRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatalf("an old-format run ten years on: %v", err)
	}
	if !run.ExpiresAt.IsZero() || run.Retention != 0 {
		t.Errorf("an old-format run reads expiring at %s (retention %s), want never", run.ExpiresAt, run.Retention)
	}
	if _, err := ts.RearmRunBackstop(ctx, run); err != nil {
		t.Fatal(err)
	}
	for _, it := range runItems(t, ts.table, v.Run) {
		if _, ok := it[tableschema.TTL]; ok {
			t.Errorf("item %v/%v of an old-format run got an expiry", it["pk"], it["sk"])
		}
	}
	runs, _, err := ts.ListRuns(ctx, ledger.RunFilter{Job: "old"})
	if err != nil || len(runs) != 1 {
		t.Errorf("the job's runs: %d, %v; want the old run", len(runs), err)
	}
}
