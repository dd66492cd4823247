package store_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// TestInstanceOfTheFormerFormat: an instance item as the store wrote it
// before compact records (long-named records inline, the policy on the
// item, ten attempts inline, the recent event ids as sent, times as
// strings) and its
// long-named history item read, answer duplicates, transition and show
// their whole history; its first write leaves its records and attempts in
// the compact format, with the attempts it let go in their attempt items.
func TestInstanceOfTheFormerFormat(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	p := ledgertest.Policy()
	v := ts.MustCreate(t, ledgertest.NewRun("legacy", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.Clock.Now()
	ts.Step(t, key, ledgertest.Ev(statemodel.EvDepsMet, 0), now)
	const attempts = 10
	var firstStart, lastFail statemodel.Event
	for n := 1; n <= attempts; n++ {
		ts.Step(t, key, ledgertest.Dispatch(n), now)
		started := ledgertest.Started(n, "w")
		ts.Step(t, key, started, now)
		failed := ledgertest.Ev(statemodel.EvFailed, n)
		failed.ErrorCategory, failed.Retryable = "boom", new(bool)
		ts.Step(t, key, failed, now)
		if n == 1 {
			firstStart = started
		}
		lastFail = failed
		if n < attempts {
			retry := ledgertest.Ev(statemodel.EvManualRetry, 0)
			retry.Operator, retry.Reason = "ana", "again"
			ts.Step(t, key, retry, now)
		}
	}
	hist := ts.FullHistory(t, key)
	inst := ts.MustInstance(t, key)
	var all []statemodel.AttemptRecord
	for n := 1; n <= attempts; n++ {
		a, err := ts.GetAttempt(ctx, key, n)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, a.AttemptRecord)
	}

	// The former layout: the eight newest records inline, the others in
	// one history item, no attempt items, the newest 32 ids as sent.
	for _, it := range scanAll(t, ts.table) {
		if sk := it["sk"].(*types.AttributeValueMemberS).Value; strings.HasPrefix(sk, "TR#") || strings.Contains(sk, "#ATT#") {
			if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(ts.table), Key: map[string]types.AttributeValue{"pk": it["pk"], "sk": it["sk"]}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	split := len(hist) - ledger.MaxInlineHistory
	legacy := inst
	legacy.History = hist[split:]
	legacy.Snapshot.Recent, legacy.Snapshot.Attempts = nil, all
	for _, tr := range hist[max(0, len(hist)-statemodel.RecentEvents):] {
		legacy.Snapshot.Recent = append(legacy.Snapshot.Recent, statemodel.SeenEvent{ID: tr.EventID, Seq: tr.Seq, To: tr.To})
	}
	for _, it := range []map[string]types.AttributeValue{store.LegacyHistoryItem(key, hist[:split]), store.LegacyInstanceItem(legacy, all)} {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(ts.table), Item: it}); err != nil {
			t.Fatal(err)
		}
	}

	// It reads as it was written.
	old := ts.MustInstance(t, key)
	old.Policy.Random = p.Random
	if len(old.Snapshot.Attempts) != attempts || !reflect.DeepEqual(old.Policy, p) || !old.Snapshot.EqualState(legacy.Snapshot) {
		t.Fatalf("the former item reads %d attempts, policy %+v", len(old.Snapshot.Attempts), old.Policy)
	}
	if got := ts.FullHistory(t, key); !sameRecords(got, hist) {
		t.Fatalf("history of the former item: %d records, want %d", len(got), len(hist))
	}
	for n := 1; n <= attempts; n++ {
		if a, err := ts.GetAttempt(ctx, key, n); err != nil || !a.AttemptRecord.Equal(all[n-1]) {
			t.Fatalf("attempt %d of the former item: %+v, %v", n, a, err)
		}
	}
	// Duplicates: one its recent ids know, one only its history item does.
	for _, e := range []statemodel.Event{lastFail, firstStart} {
		res, err := ts.Harness.Store.Transition(ctx, key, e, now, p)
		if err != nil || res.Outcome != statemodel.Duplicate {
			t.Fatalf("%s again: %s, %v; want duplicate", e, res.Outcome, err)
		}
	}

	// It transitions, and its first write leaves it compact.
	retry := ledgertest.Ev(statemodel.EvManualRetry, 0)
	retry.Operator, retry.Reason = "ana", "once more"
	ts.Step(t, key, retry, now)
	ts.Step(t, key, ledgertest.Dispatch(attempts+1), now)
	ts.Step(t, key, ledgertest.Started(attempts+1, "w"), now)
	ts.Step(t, key, ledgertest.Succeeded(attempts+1), now)
	it := getItem(t, ts.table, "RUN#"+key.Run, "TASK#"+key.Task)
	// The policy is written once, at creation, and stays as it was.
	for _, former := range []string{"history", "attempts", "recent", "created_at", "scheduled_at"} {
		if _, ok := it[former]; ok {
			t.Fatalf("the rewritten item still holds %q", former)
		}
	}
	after := ts.MustInstance(t, key)
	final := ts.FullHistory(t, key)
	if len(final) != len(hist)+4 || !sameRecords(final[:len(hist)], hist) {
		t.Fatalf("history after the rewrite: %d records, want %d then 4 more", len(final), len(hist))
	}
	if got, err := statemodel.Replay(final); err != nil || !got.EqualState(after.Snapshot) || after.Snapshot.State != statemodel.StateSucceeded {
		t.Fatalf("replay after the rewrite: %v, state %s", err, after.Snapshot.State)
	}
	for n := 1; n <= attempts+1; n++ {
		a, err := ts.GetAttempt(ctx, key, n)
		if err != nil || a.N != n || a.WorkerID != "w" {
			t.Fatalf("attempt %d after the rewrite: %+v, %v", n, a, err)
		}
	}
	if len(after.Snapshot.Attempts) != statemodel.MaxInlineAttempts {
		t.Fatalf("the rewritten instance holds %d attempts", len(after.Snapshot.Attempts))
	}
}

// sameRecords compares records on what the history route shows.
func sameRecords(a, b []statemodel.Transition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Seq != b[i].Seq || a[i].From != b[i].From || a[i].To != b[i].To || a[i].Event != b[i].Event ||
			!statemodel.SameEvent(a[i].EventID, b[i].EventID) && !statemodel.SameEvent(b[i].EventID, a[i].EventID) ||
			!a[i].ObservedAt.Equal(b[i].ObservedAt) || a[i].Reason != b[i].Reason {
			return false
		}
	}
	return true
}
