package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/protocol"
)

// Fence is the check a worker's own DynamoDB transaction adds to commit
// only while its attempt owns its task (protocol.Fence, docs/workers.md
// "Exactly-once effects").
type Fence = protocol.Fence

// ErrNoFence is Task.Fence's (and Task.WireFence's) error when the claim
// answer carried no fence: the ledger is not a DynamoDB table (the
// in-memory ledger), or the task was not handed out by a worker. There is
// nothing a transaction could check; a handler that needs exactly-once
// effects should fail (a configuration error), one that can do with less
// falls back to the fencing token and deadline (Task.FencingDeadline).
// Test with errors.Is.
var ErrNoFence = errors.New("the attempt carries no fence (its ledger is not a DynamoDB table)")

// Fence is the ConditionCheck to put first in the handler's own
// TransactWriteItems: the transaction then commits only while this
// attempt owns its task (it is the task's current attempt, RUNNING or
// CANCELLING). Once the attempt ended, was found LOST, or its retry
// started, the check fails and the whole transaction with it, whatever
// the clocks say; FenceRefused tells that refusal from other failures.
// The worker's credentials need dynamodb:ConditionCheckItem on the
// ledger's table (Fence().ConditionCheck.TableName) and nothing else.
//
// Each call returns a fresh value: the handler may keep or change it. The
// error is ErrNoFence when the claim answer carried none, or names what
// the fence it carried lacks.
func (t Task) Fence() (types.TransactWriteItem, error) {
	f, err := t.WireFence()
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return ConditionCheck(f)
}

// WireFence is the fence as the claim answer carried it (the JSON shape
// docs/api.md describes), for a handler that builds its transaction with
// something other than this SDK's DynamoDB types; ErrNoFence without one.
func (t Task) WireFence() (Fence, error) {
	if t.commitFence == nil {
		return Fence{}, fmt.Errorf("fence of %s: %w", t.Ref(), ErrNoFence)
	}
	f := *t.commitFence
	f.Key, f.Names, f.Values = maps.Clone(f.Key), maps.Clone(f.Names), maps.Clone(f.Values)
	return f, nil
}

// WithFence is t with the fence f, as a claim answer would have given it:
// for tests of a handler that commits with Task.Fence against a table of
// their own (a Task built by hand has none).
func (t Task) WithFence(f Fence) Task {
	t.commitFence = &f
	return t
}

// ConditionCheck turns a fence from its wire shape into the item of a
// TransactWriteItems: key values and string values become DynamoDB
// strings (S), numbers DynamoDB numbers (N). A fence without a table, a
// key or a condition, or with a value of another kind, is refused: a
// check built from it would prove nothing, or fail for the wrong reason.
func ConditionCheck(f Fence) (types.TransactWriteItem, error) {
	bad := func(format string, a ...any) (types.TransactWriteItem, error) {
		return types.TransactWriteItem{}, fmt.Errorf("fence on table %q: %s", f.Table, fmt.Sprintf(format, a...))
	}
	if f.Table == "" || len(f.Key) == 0 || f.Condition == "" {
		return bad("table, key and condition are required")
	}
	key := make(map[string]types.AttributeValue, len(f.Key))
	for k, v := range f.Key {
		key[k] = &types.AttributeValueMemberS{Value: v}
	}
	var values map[string]types.AttributeValue
	if len(f.Values) > 0 {
		values = make(map[string]types.AttributeValue, len(f.Values))
	}
	for k, v := range f.Values {
		av, ok := fenceValue(v)
		if !ok {
			return bad("value %s is a %T, neither a string nor a number", k, v)
		}
		values[k] = av
	}
	var names map[string]string
	if len(f.Names) > 0 {
		names = maps.Clone(f.Names)
	}
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                 aws.String(f.Table),
		Key:                       key,
		ConditionExpression:       aws.String(f.Condition),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}}, nil
}

// fenceValue is a fence value as a DynamoDB attribute: a string is S, a
// number N. Decoded JSON gives float64 (or json.Number); the server's own
// fence holds ints.
func fenceValue(v any) (types.AttributeValue, bool) {
	switch v := v.(type) {
	case string:
		return &types.AttributeValueMemberS{Value: v}, true
	case int:
		return &types.AttributeValueMemberN{Value: strconv.Itoa(v)}, true
	case int64:
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}, true
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, false
		}
		return &types.AttributeValueMemberN{Value: strconv.FormatFloat(v, 'f', -1, 64)}, true
	case json.Number:
		return &types.AttributeValueMemberN{Value: v.String()}, true
	}
	return nil, false
}

// FenceRefused reports whether err is a TransactWriteItems whose first
// item, the fence as Task.Fence asks it to be placed, failed its
// condition: the attempt no longer owns its task, and nothing of the
// transaction was written. Do not retry such a commit: no later try can
// pass. Any other error (a condition of the handler's own items, a
// conflict with another transaction, throttling) is not a refusal.
func FenceRefused(err error) bool {
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) || len(tc.CancellationReasons) == 0 {
		return false
	}
	return aws.ToString(tc.CancellationReasons[0].Code) == "ConditionalCheckFailed"
}
