package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

// timerIndex is the timers index's definition.
func timerIndex() tableschema.Index {
	for _, ix := range tableschema.Table().Indexes {
		if ix.Name == tableschema.TimerIndex {
			return ix
		}
	}
	panic("tableschema defines no " + tableschema.TimerIndex + " index")
}

// timerEntryAttributes are the attributes an entry of the timers index
// holds: the table's keys, the index's keys and the projected attributes.
// ListDueTimers reads these and nothing else.
func timerEntryAttributes() []string {
	ix := timerIndex()
	return append([]string{tableschema.PK, tableschema.SK, ix.PartitionKey.Name, ix.SortKey.Name}, ix.NonKeyAttributes...)
}

// timerEntry is the timers index entry of an item (nil: absent attributes
// count as absent), or nil when the item is not in the index.
func timerEntry(it item) item {
	if it[tableschema.TimerShard] == nil || it[tableschema.TimerAt] == nil {
		return nil
	}
	e := item{}
	for _, a := range timerEntryAttributes() {
		if v := it[a]; v != nil {
			e[a] = v
		}
	}
	return e
}

// timerIndexWrites lists the sizes of the timers index entry writes that
// writing item next over item old causes, by DynamoDB's rules: an entry
// that appears or disappears is one write, one whose key (shard or time)
// changes a delete and a put, one whose projected attributes change one
// write, and one that stays as it was none. The index projects only the
// keys and a few short attributes, so each write is 1 WCU however large
// the item is.
func timerIndexWrites(old, next item) []int {
	o, n := timerEntry(old), timerEntry(next)
	switch {
	case o == nil && n == nil:
		return nil
	case o == nil:
		return []int{itemSize(n)}
	case n == nil:
		return []int{itemSize(o)}
	case !reflect.DeepEqual(o[tableschema.TimerShard], n[tableschema.TimerShard]) ||
		!reflect.DeepEqual(o[tableschema.TimerAt], n[tableschema.TimerAt]):
		return []int{itemSize(o), itemSize(n)}
	case reflect.DeepEqual(o, n):
		return nil
	}
	return []int{itemSize(n)}
}

// ListDueTimers lists the timers of shard (0..tableschema.TimerShards-1)
// due at now, oldest first, at most limit (0: DefaultListLimit) per page,
// with an opaque token for the next page ("" at the end). One Query of the
// sparse timers index, never a Scan:
//
//	timer_shard = T#<shard> AND timer_at <= <now>
//
// The index projects only the attributes decoded here (timerEntryAttributes).
// The index is eventually consistent: a timer just moved may still be
// listed at its old time, so callers re-read the item (Transition does)
// and let statemodel decide (ErrNotDue).
func (s *timers) ListDueTimers(ctx context.Context, shard int, now time.Time, limit int, token string) ([]ledger.DueTimer, string, error) {
	op := func(err error) error {
		return fmt.Errorf("list due timers of shard %d at %s: %w", shard, ledger.FormatTime(now), err)
	}
	if shard < 0 || shard >= tableschema.TimerShards {
		return nil, "", op(fmt.Errorf("%w: shard %d outside 0..%d", ledger.ErrInvalidInput, shard, tableschema.TimerShards-1))
	}
	if limit <= 0 {
		limit = ledger.DefaultListLimit
	}
	name := tableschema.ShardName(shard)
	start, err := decodeToken(token, map[string]string{
		tableschema.TimerShard: name, tableschema.TimerAt: "", tableschema.PK: "", tableschema.SK: "",
	})
	if err != nil {
		return nil, "", op(err)
	}
	e := newExpr()
	var projection []string
	for _, a := range timerEntryAttributes() {
		projection = append(projection, e.n(a))
	}
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(s.table), IndexName: aws.String(tableschema.TimerIndex),
		KeyConditionExpression: aws.String(e.n(tableschema.TimerShard) + " = " + e.v("shard", str(name)) +
			" AND " + e.n(tableschema.TimerAt) + " <= " + e.v("now", str(ledger.FormatTime(now)))),
		ProjectionExpression:     aws.String(strings.Join(projection, ", ")),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		Limit: aws.Int32(int32(min(limit, ledger.MaxListLimit))), ExclusiveStartKey: start,
	})
	if err != nil {
		return nil, "", op(translate(err))
	}
	due := make([]ledger.DueTimer, 0, len(out.Items))
	for _, it := range out.Items {
		r := &reader{it: it}
		pk, sk := r.str(tableschema.PK), r.str(tableschema.SK)
		d := ledger.DueTimer{At: r.time(tableschema.TimerAt), Kind: r.str(attrTimerKind)}
		switch {
		case strings.HasPrefix(pk, prefixJob) && sk == skJob:
			d.Item, d.Job = ledger.TimerOfJob, strings.TrimPrefix(pk, prefixJob)
		case strings.HasPrefix(pk, prefixRun) && sk == skRun:
			d.Item, d.Run, d.Job = ledger.TimerOfRun, strings.TrimPrefix(pk, prefixRun), r.str(attrJob)
		case strings.HasPrefix(pk, prefixBackfill) && sk == skBackfill:
			d.Item, d.Backfill, d.Job = ledger.TimerOfBackfill, strings.TrimPrefix(pk, prefixBackfill), r.str(attrJob)
		default:
			run, task, ok := instanceOfKey(pk, sk)
			if !ok {
				return nil, "", op(fmt.Errorf("%w: timer on unexpected item %s/%s", ledger.ErrCorruptItem, pk, sk))
			}
			d.Item, d.Run, d.Task, d.Job = ledger.TimerOfInstance, run, task, r.str(attrJob)
		}
		if r.err != nil {
			return nil, "", op(r.err)
		}
		due = append(due, d)
	}
	return due, encodeToken(out.LastEvaluatedKey), nil
}
