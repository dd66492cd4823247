package store

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
)

// getItem reads the item at (pk, sk) with ONE strongly consistent GetItem
// and decodes it: the read every entity's Get shares. ErrNotFound when
// there is no item.
func getItem[T any](ctx context.Context, s *base, pk, sk string, decode func(map[string]types.AttributeValue) (T, error)) (T, error) {
	var zero T
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: keyOf(pk, sk), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return zero, translate(err)
	}
	if out.Item == nil {
		return zero, ledger.ErrNotFound
	}
	return decode(out.Item)
}

// versionedUpdate is the compare-and-set on a version every versioned
// entity (run, job, backfill) shares: ONE UpdateItem of the item at
// (pk, sk) that SETs set (a nil value REMOVEs) while
//
//	condition  #version = :expected_version [AND also]
//
// holds. A failed condition is ErrVersionConflict, with the stored
// version, or ErrNotFound when the item is gone: told from the item
// DynamoDB returns with the failure or, from an endpoint that returns
// none, by one read.
func (s *base) versionedUpdate(ctx context.Context, pk, sk string, set item, expected int64, also func(*expr) string) (*dynamodb.UpdateItemOutput, error) {
	e := newExpr()
	upd := e.update(set)
	cond := e.n(attrVersion) + " = " + e.v("expected_version", num(expected))
	if also != nil {
		cond += " AND " + also(e)
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(pk, sk),
		UpdateExpression: aws.String(upd), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              s.returnCapacity(),
	})
	if err == nil {
		return out, nil
	}
	old, ok := conditionItem(err)
	if !ok {
		return nil, translate(err)
	}
	if len(old) == 0 {
		stored, gerr := getItem(ctx, s, pk, sk, func(m map[string]types.AttributeValue) (map[string]types.AttributeValue, error) { return m, nil })
		if gerr != nil {
			return nil, gerr
		}
		old = stored
	}
	r := &reader{it: old}
	return nil, fmt.Errorf("%w: stored version is %d", ledger.ErrVersionConflict, r.int(attrVersion))
}
