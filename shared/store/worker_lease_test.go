package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/store"
)

// Leases of one worker name are ordered by (boot start time, seq), whatever
// order SQS delivers them in: an old boot's final lease that arrives after
// the new boot's first one never replaces it.
func TestWorkerLeaseOrder(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	oldStart, newStart := t0, t0.Add(5*time.Second)
	lease := func(boot string, started time.Time, seq int64) store.WorkerLease {
		return store.WorkerLease{Name: "w1", BootID: boot, BootStartedAt: started, Seq: seq,
			ExpiresAt: t0.Add(time.Minute), EndsAt: t0.Add(time.Minute + time.Duration(seq)*time.Second), UpdatedAt: t0}
	}
	steps := []struct {
		name     string
		put      store.WorkerLease
		wantBoot string
		wantSeq  int64
	}{
		{"first lease of the old boot", lease("old", oldStart, 1), "old", 1},
		{"a newer lease of the same boot", lease("old", oldStart, 3), "old", 3},
		{"an older lease of the same boot arrives late", lease("old", oldStart, 2), "old", 3},
		{"the new boot's first lease", lease("new", newStart, 1), "new", 1},
		// The old boot's final lease (seq 4, its highest) arrives last.
		{"the old boot's final lease arrives late", lease("old", oldStart, 4), "new", 1},
		{"the new boot renews", lease("new", newStart, 2), "new", 2},
		{"a boot whose start is unknown", lease("legacy", time.Time{}, 9), "new", 2},
	}
	for _, st := range steps {
		if err := s.PutWorkerLease(ctx, st.put); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got, err := s.GetWorkerLease(ctx, "w1")
		if err != nil {
			t.Fatal(err)
		}
		if got.BootID != st.wantBoot || got.Seq != st.wantSeq {
			t.Fatalf("%s: stored lease of boot %s seq %d, want boot %s seq %d", st.name, got.BootID, got.Seq, st.wantBoot, st.wantSeq)
		}
	}
	got, err := s.GetWorkerLease(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if !got.BootStartedAt.Equal(newStart) || !got.EndsAt.Equal(t0.Add(time.Minute+2*time.Second)) || !got.ExpiresAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("stored lease %+v: boot start, end or expiry lost", got)
	}
}

// Two boots whose starts cannot be told apart replace each other, and an
// item stored before boot start times were kept is replaced by any lease.
func TestWorkerLeaseUnorderedBoots(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	// An item as the store wrote it before it kept boot start times.
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "WORKER#w2"}, "sk": &types.AttributeValueMemberS{Value: "LEASE"},
		"boot_id": &types.AttributeValueMemberS{Value: "before"}, "seq": &types.AttributeValueMemberN{Value: "50"},
	}}); err != nil {
		t.Fatal(err)
	}
	for _, boot := range []string{"a", "b", "a"} {
		if err := s.PutWorkerLease(ctx, store.WorkerLease{Name: "w2", BootID: boot, Seq: 1, ExpiresAt: t0}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetWorkerLease(ctx, "w2")
		if err != nil {
			t.Fatal(err)
		}
		if got.BootID != boot {
			t.Fatalf("stored boot %s after a lease of boot %s", got.BootID, boot)
		}
	}
}
