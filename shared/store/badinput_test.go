package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/store"
)

// TestItemSizeMatchesDynamoDB: the store's size rules agree with the
// endpoint's limit. An item sized exactly MaxItemSize by the rules is
// accepted and one byte more is refused, for a flat item and for one whose
// bytes sit in nested lists and maps.
func TestItemSizeMatchesDynamoDB(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	shapes := map[string]func(pad string) map[string]types.AttributeValue{
		"flat": func(pad string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"pad": &types.AttributeValueMemberS{Value: pad}, "n": &types.AttributeValueMemberN{Value: "12345"}}
		},
		"nested": func(pad string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{
				&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
					"pad": &types.AttributeValueMemberS{Value: pad}, "ok": &types.AttributeValueMemberBOOL{Value: true},
				}},
				&types.AttributeValueMemberN{Value: "-0.00123400"},
			}}}
		},
	}
	for name, shape := range shapes {
		build := func(size int) map[string]types.AttributeValue {
			it := shape("")
			it["pk"] = &types.AttributeValueMemberS{Value: "SIZE#" + name}
			it["sk"] = &types.AttributeValueMemberS{Value: fmt.Sprint(size)}
			base := store.ItemSize(it)
			it = shape(strings.Repeat("p", size-base))
			it["pk"] = &types.AttributeValueMemberS{Value: "SIZE#" + name}
			it["sk"] = &types.AttributeValueMemberS{Value: fmt.Sprint(size)}
			if got := store.ItemSize(it); got != size {
				t.Fatalf("%s: built %d bytes, want %d", name, got, size)
			}
			return it
		}
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(ts.table), Item: build(ledger.MaxItemSize)})
		if err != nil {
			t.Errorf("%s: an item of exactly %d bytes was refused: %v", name, ledger.MaxItemSize, err)
		}
		_, err = db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(ts.table), Item: build(ledger.MaxItemSize + 1)})
		if err == nil {
			t.Errorf("%s: an item of %d bytes was accepted: the size rules undercount", name, ledger.MaxItemSize+1)
		}
	}
}
