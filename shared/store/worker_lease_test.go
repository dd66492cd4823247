package store_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
)

// An item stored before boot start times were kept is replaced by any
// lease. (The order of leases is the port's: ledgertest.)
func TestWorkerLeaseReplacesLegacyItem(t *testing.T) {
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
	if err := s.PutWorkerLease(ctx, ledger.WorkerLease{Name: "w2", BootID: "a", Seq: 1, ExpiresAt: ledgertest.T0}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetWorkerLease(ctx, "w2"); err != nil || got.BootID != "a" {
		t.Fatalf("stored lease %+v (%v) after boot a's lease over a legacy item, want boot a", got, err)
	}
}
