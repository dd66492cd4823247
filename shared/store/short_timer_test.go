package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// timerEntries lists the timers index entries of the instances of run.
func timerEntries(t *testing.T, table, run string) []map[string]types.AttributeValue {
	t.Helper()
	out, err := db.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), IndexName: aws.String(tableschema.TimerIndex)})
	if err != nil {
		t.Fatal(err)
	}
	var found []map[string]types.AttributeValue
	for _, it := range out.Items {
		pk, _ := it[tableschema.PK].(*types.AttributeValueMemberS)
		sk, _ := it[tableschema.SK].(*types.AttributeValueMemberS)
		if pk != nil && sk != nil && pk.Value == "RUN#"+run && strings.HasPrefix(sk.Value, "TASK#") {
			found = append(found, it)
		}
	}
	return found
}

// TestSingleTaskRunWritesNoTimerIndexEntry: with the default policy every
// timer of a single task's life (dispatch, queue timeout, lease, a retry)
// is within the horizon of the write that sets it, so no write of the
// instance, heartbeats included, puts or moves a timers index entry: the
// capacity reports count none, and the index holds none after each step.
func TestSingleTaskRunWritesNoTimerIndexEntry(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		reports []store.CapacityReport
	)
	ts := newStore(t, store.WithCapacityReports(func(r store.CapacityReport) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, r)
	}))
	ctx := context.Background()
	nr := ledgertest.NewRun("lean", "main")
	nr.Tasks[0].Scheduled = true
	v := ts.MustCreate(t, nr)
	key := v.Tasks[0].Instance.Key
	now := ts.Clock.Now()
	empty := func(step string) {
		t.Helper()
		if got := timerEntries(t, ts.table, key.Run); len(got) != 0 {
			t.Fatalf("%s: the timers index holds %v", step, got)
		}
	}
	empty("created SCHEDULED")
	ts.Step(t, key, ledgertest.Dispatch(1), now)
	empty("queued")
	ts.Step(t, key, ledgertest.Started(1, "w"), now)
	empty("running")
	for i := 1; i <= 3; i++ {
		at := now.Add(time.Duration(i) * 20 * time.Second)
		if _, err := ts.Harness.Store.Heartbeat(ctx, key, 1, at, ledgertest.Policy().Timeouts.Heartbeat); err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
	}
	empty("after heartbeats")
	ts.Step(t, key, ledgertest.Ev(statemodel.EvFailed, 1), now)
	empty("up for retry in 10 s")
	later := now.Add(ledgertest.Policy().Retry.InitialInterval)
	ts.Step(t, key, ledgertest.Ev(statemodel.EvRetryDue, 1), later)
	ts.Step(t, key, ledgertest.Dispatch(2), later)
	ts.Step(t, key, ledgertest.Started(2, "w"), later)
	ts.Step(t, key, ledgertest.Succeeded(2), later)
	empty("succeeded")

	mu.Lock()
	defer mu.Unlock()
	beats := 0
	for _, r := range reports {
		switch r.Operation {
		case "transition", "heartbeat":
			if len(r.IndexWriteSizes) != 0 {
				t.Errorf("%s wrote index entries %v", r.Operation, r.IndexWriteSizes)
			}
			if r.Operation == "heartbeat" {
				beats++
			}
		}
	}
	if beats != 3 {
		t.Fatalf("%d heartbeat reports, want 3", beats)
	}
}

// TestShortTimerIndexedBeforeStillFires: an instance stored before near
// timers left the index (its lease entry in timers_v2, as every write put
// it then) is listed due as it was, and its next write takes it out.
func TestShortTimerIndexedBeforeStillFires(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.MustCreate(t, ledgertest.NewRun("old", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.ToQueued(t, key)
	res := ts.Step(t, key, ledgertest.Started(1, "w"), now)
	lease := res.Snapshot.Lease.ExpiresAt

	// The item as the store wrote it before: the lease's timer attributes.
	sk := "TASK#" + key.Task
	ix := ts.table
	all, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(ix)})
	if err != nil {
		t.Fatal(err)
	}
	var shard string
	for _, it := range all.Items {
		if s, ok := it[tableschema.SK].(*types.AttributeValueMemberS); ok && s.Value == sk {
			if _, ok := it[tableschema.TimerShard]; ok {
				t.Fatalf("a near lease is in the item: %v", it[tableschema.TimerShard])
			}
		}
	}
	// Any shard will do: the old writer hashed the key, the reader reads
	// the shard from the entry.
	shard = tableschema.ShardName(7)
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(ix),
		Key: map[string]types.AttributeValue{
			tableschema.PK: &types.AttributeValueMemberS{Value: "RUN#" + key.Run}, tableschema.SK: &types.AttributeValueMemberS{Value: sk},
		},
		UpdateExpression:         aws.String("SET #s = :s, #a = :a, #k = :k"),
		ExpressionAttributeNames: map[string]string{"#s": tableschema.TimerShard, "#a": tableschema.TimerAt, "#k": tableschema.TimerKind},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":s": &types.AttributeValueMemberS{Value: shard}, ":a": &types.AttributeValueMemberS{Value: ledger.FormatTime(lease)},
			":k": &types.AttributeValueMemberS{Value: string(statemodel.TimerLease)},
		},
	}); err != nil {
		t.Fatal(err)
	}
	inst := ts.MustInstance(t, key)
	if !inst.TimerAt.Equal(lease) || inst.TimerKind != statemodel.TimerLease {
		t.Fatalf("old item reads timer %s %s, want lease at %s", inst.TimerKind, inst.TimerAt, lease)
	}
	due, _, err := ts.Harness.Store.ListDueTimers(ctx, 7, lease, 0, "")
	if err != nil || len(due) != 1 || due[0].Instance() != key || due[0].Kind != string(statemodel.TimerLease) {
		t.Fatalf("due at the lease's end: %+v (%v), want the old entry", due, err)
	}
	ts.Step(t, key, ledgertest.Succeeded(1), now)
	if got := timerEntries(t, ts.table, key.Run); len(got) != 0 {
		t.Fatalf("the next write left the old entry: %v", got)
	}
}
