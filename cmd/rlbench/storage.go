package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/tableschema"
)

// storageMonth is the month a run's items are priced for.
const storageMonth = 30 * 24 * time.Hour

// storedBytes reads the whole table (with the bench's uncounted client)
// and answers what it holds as DynamoDB bills its storage: every item's
// size and each of its index entries' (the projected attributes), each
// with 100 B of overhead. An item with a TTL counts for the share of a
// month before it expires. The cost scenario's table holds only its own
// few runs, so reading it before and after a run is cheap, and the
// difference is everything the run left anywhere: its partition, its
// index entries, and the items it wrote in other partitions (slot claims,
// idempotency keys, limiter records).
func storedBytes(ctx context.Context, db *dynamodb.Client, table string, now time.Time) (float64, error) {
	indexes := tableschema.Table().Indexes
	total := 0.0
	p := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, fmt.Errorf("read table %s for its storage: %w", table, err)
		}
		for _, it := range page.Items {
			total += kept(it, now) * float64(billedItemBytes(it, indexes))
		}
	}
	return total, nil
}

// billedItemBytes is the storage DynamoDB bills for it: the item and its
// index entries, each with its overhead.
func billedItemBytes(it map[string]types.AttributeValue, indexes []tableschema.Index) int {
	n := store.ItemSize(it) + dynamoItemOverhead
	for _, ix := range indexes {
		if e, ok := indexEntryOf(ix, it); ok {
			n += e.size + dynamoItemOverhead
		}
	}
	return n
}

// kept is the share of a month the item stays: 1 without a TTL (nothing
// deletes it), else the time to its expiry over a month, at most 1.
func kept(it map[string]types.AttributeValue, now time.Time) float64 {
	v, ok := it[tableschema.TTL].(*types.AttributeValueMemberN)
	if !ok {
		return 1
	}
	at, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 1
	}
	left := time.Unix(at, 0).Sub(now)
	return min(1, max(0, left.Seconds()/storageMonth.Seconds()))
}
