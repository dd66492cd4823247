package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/statemodel"
)

var claimT0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// claimedRun is a schedule run of job that claims the slot at and holds
// the idempotency key key.
func claimedRun(job string, at time.Time, key, body string) ledger.NewRun {
	nr := ledgertest.NewRun(job, "a")
	nr.Trigger, nr.ClaimSlot, nr.LogicalTime = statemodel.TriggerSchedule, true, at
	nr.Idempotency = &ledger.Idempotency{Key: key, BodyHash: body}
	return nr
}

// claimItems are the table's slot and idempotency items of job, by sort key.
func claimItems(t *testing.T, table, job string) map[string]map[string]types.AttributeValue {
	t.Helper()
	out := map[string]map[string]types.AttributeValue{}
	for _, it := range scanAll(t, table) {
		pk := it["pk"].(*types.AttributeValueMemberS).Value
		sk := it["sk"].(*types.AttributeValueMemberS).Value
		if (pk == "JOB#"+job || strings.HasPrefix(pk, "JOB#"+job+"#")) && (strings.HasPrefix(sk, "SLOT#") || strings.HasPrefix(sk, "IDEM#")) {
			if _, dup := out[sk]; dup {
				t.Fatalf("%s is stored twice", sk)
			}
			out[sk] = it
		}
	}
	return out
}

// One job's slot claims and idempotency keys spread over its shards: none
// is written at JOB#<job>, which every run of the job would share.
func TestClaimsSpreadOverTheJobsShards(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	const n = 12
	for i := range n {
		ts.MustCreate(t, claimedRun("spread", claimT0.Add(time.Duration(i)*time.Hour), fmt.Sprintf("key-%d", i), "h"))
	}
	items := claimItems(t, ts.table, "spread")
	if len(items) != 2*n {
		t.Fatalf("%d slot and idempotency items, want %d", len(items), 2*n)
	}
	shards := map[string]bool{}
	for sk, it := range items {
		pk := it["pk"].(*types.AttributeValueMemberS).Value
		if !strings.HasPrefix(pk, "JOB#spread#") {
			t.Errorf("%s is at %s, not on a shard of the job", sk, pk)
		}
		shards[pk] = true
	}
	if len(shards) < 4 {
		t.Errorf("%d items on %d shards: the hash does not spread them", 2*n, len(shards))
	}
}

// moveToLegacy puts job's slot and idempotency items where they were
// stored before the sharding (JOB#<job>), as a table written then holds
// them, and deletes the sharded ones.
func moveToLegacy(t *testing.T, table, job string, edit func(map[string]types.AttributeValue)) {
	t.Helper()
	ctx := context.Background()
	for _, it := range claimItems(t, table, job) {
		if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": it["pk"], "sk": it["sk"]},
		}); err != nil {
			t.Fatal(err)
		}
		it["pk"] = &types.AttributeValueMemberS{Value: "JOB#" + job}
		if edit != nil {
			edit(it)
		}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
			t.Fatal(err)
		}
	}
}

// A slot claim and an idempotency key stored before the sharding still
// count: a retry of the key answers the old run, the slot refuses a second
// claim and reads as taken, and a mark of it writes no second slot item.
func TestClaimsStoredBeforeTheShardingStillCount(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	old := ts.MustCreate(t, claimedRun("legacy", claimT0, "k-old", "h1"))
	moveToLegacy(t, ts.table, "legacy", nil)

	var ex *ledger.ExistingRunError
	retry := claimedRun("legacy", claimT0.Add(time.Hour), "k-old", "h1")
	if _, err := ts.CreateRun(ctx, retry, ts.Clock.Now()); !errors.Is(err, ledger.ErrIdempotentReplay) || !errors.As(err, &ex) || ex.RunID != old.Run.ID {
		t.Fatalf("retry of an old key: %v, want ErrIdempotentReplay of %s", err, old.Run.ID)
	}
	other := claimedRun("legacy", claimT0.Add(time.Hour), "k-old", "h2")
	if _, err := ts.CreateRun(ctx, other, ts.Clock.Now()); !errors.Is(err, ledger.ErrIdempotencyMismatch) {
		t.Fatalf("old key, another body: %v, want ErrIdempotencyMismatch", err)
	}
	second := claimedRun("legacy", claimT0, "k-new", "h1")
	if _, err := ts.CreateRun(ctx, second, ts.Clock.Now()); !errors.Is(err, ledger.ErrSlotTaken) || !errors.As(err, &ex) || ex.RunID != old.Run.ID {
		t.Fatalf("second claim of an old slot: %v, want ErrSlotTaken of %s", err, old.Run.ID)
	}
	taken, err := ts.TakenSlots(ctx, "legacy", []time.Time{claimT0, claimT0.Add(time.Hour)})
	if err != nil || !taken[0] || taken[1] {
		t.Fatalf("TakenSlots: %v, %v; want [true false]", taken, err)
	}
	mark := ledgertest.NewRun("legacy", "a")
	mark.LogicalTime, mark.MarkSlot = claimT0, true
	ts.MustCreate(t, mark)
	if items := claimItems(t, ts.table, "legacy"); len(items) != 2 {
		t.Errorf("after marking the old slot: %d slot and idempotency items, want the 2 old ones", len(items))
	}
	ts.MustCreate(t, claimedRun("legacy", claimT0.Add(time.Hour), "k-new", "h1")) // a free slot and key still take a run
}

// An old idempotency key past its 24 h that TTL has not deleted yet is
// free, as a sharded one is.
func TestExpiredLegacyIdempotencyKeyIsFree(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	first := ledgertest.NewRun("expired", "a")
	first.Idempotency = &ledger.Idempotency{Key: "k", BodyHash: "h"}
	ts.MustCreate(t, first)
	moveToLegacy(t, ts.table, "expired", func(it map[string]types.AttributeValue) {
		it["expires_at"] = &types.AttributeValueMemberN{Value: fmt.Sprint(ts.Clock.Now().Add(-time.Minute).Unix())}
	})
	again := ledgertest.NewRun("expired", "a")
	again.Idempotency = &ledger.Idempotency{Key: "k", BodyHash: "h"}
	if v := ts.MustCreate(t, again); v.Run.ID == first.ID {
		t.Fatal("the expired key answered its old run")
	}
}

// Once every key stored before the sharding has expired (a day and the
// deploy's hour after the epoch the table records), a creation reads none:
// a key left at JOB#<job> by a table that records an older epoch is no
// longer looked at, and the same key takes a new run.
func TestLegacyIdempotencyKeysAreReadOnlyWhileTheyMayLive(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	epoch := ts.Clock.Now().Add(-ledger.IdempotencyTTL - 2*time.Hour)
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(ts.table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "META"}, "sk": &types.AttributeValueMemberS{Value: "CLAIMS_SHARDED"},
		"kind": &types.AttributeValueMemberS{Value: "claims_epoch"}, "created_at": &types.AttributeValueMemberS{Value: ledger.FormatTime(epoch)},
	}}); err != nil {
		t.Fatal(err)
	}
	first := ledgertest.NewRun("aged", "a")
	first.Idempotency = &ledger.Idempotency{Key: "k", BodyHash: "h"}
	ts.MustCreate(t, first)
	moveToLegacy(t, ts.table, "aged", nil) // its TTL a day ahead: live, were it read
	again := ledgertest.NewRun("aged", "a")
	again.Idempotency = &ledger.Idempotency{Key: "k", BodyHash: "h"}
	ts.MustCreate(t, again)
	var pks []string
	for _, it := range scanAll(t, ts.table) {
		if it["sk"].(*types.AttributeValueMemberS).Value == "IDEM#k" {
			pks = append(pks, it["pk"].(*types.AttributeValueMemberS).Value)
		}
	}
	if len(pks) != 2 {
		t.Fatalf("idempotency items at %v, want the old one and the new one", pks)
	}
}
