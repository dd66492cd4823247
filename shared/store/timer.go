package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runledger/runledger/shared/tableschema"
)

// ItemKind names what a due timer belongs to.
type ItemKind string

const (
	// TimerOfJob: a job's next fire (Job is set).
	TimerOfJob ItemKind = "job"
	// TimerOfRun: a live run's re-derivation backstop (Run is set).
	TimerOfRun ItemKind = "run"
	// TimerOfInstance: a task instance's state timer (Run and Task are
	// set; Kind says which statemodel timer).
	TimerOfInstance ItemKind = "instance"
	// TimerOfBackfill: an unfinished backfill's backstop (Backfill and
	// Job are set).
	TimerOfBackfill ItemKind = "backfill"
)

// DueTimer is one entry of the timers index whose time has come.
type DueTimer struct {
	Item ItemKind
	Job  string
	Run  string
	Task string
	// Backfill is the backfill of a backfill timer.
	Backfill string
	At       time.Time
	// Kind is the timer's purpose: a statemodel.TimerKind for instances,
	// "job_fire" or "run_backstop" otherwise.
	Kind string
}

// Instance returns the instance key of an instance timer.
func (d DueTimer) Instance() InstanceKey { return InstanceKey{Run: d.Run, Task: d.Task} }

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
func (s *Store) ListDueTimers(ctx context.Context, shard int, now time.Time, limit int, token string) ([]DueTimer, string, error) {
	op := func(err error) error {
		return fmt.Errorf("list due timers of shard %d at %s: %w", shard, formatTime(now), err)
	}
	if shard < 0 || shard >= tableschema.TimerShards {
		return nil, "", op(fmt.Errorf("%w: shard %d outside 0..%d", ErrInvalidInput, shard, tableschema.TimerShards-1))
	}
	if limit <= 0 {
		limit = DefaultListLimit
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
			" AND " + e.n(tableschema.TimerAt) + " <= " + e.v("now", str(formatTime(now)))),
		ProjectionExpression:     aws.String(strings.Join(projection, ", ")),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		Limit: aws.Int32(int32(min(limit, MaxListLimit))), ExclusiveStartKey: start,
	})
	if err != nil {
		return nil, "", op(translate(err))
	}
	due := make([]DueTimer, 0, len(out.Items))
	for _, it := range out.Items {
		r := &reader{it: it}
		pk, sk := r.str(tableschema.PK), r.str(tableschema.SK)
		d := DueTimer{At: r.time(tableschema.TimerAt), Kind: r.str(attrTimerKind)}
		switch {
		case strings.HasPrefix(pk, prefixJob) && sk == skJob:
			d.Item, d.Job = TimerOfJob, strings.TrimPrefix(pk, prefixJob)
		case strings.HasPrefix(pk, prefixRun) && sk == skRun:
			d.Item, d.Run, d.Job = TimerOfRun, strings.TrimPrefix(pk, prefixRun), r.str(attrJob)
		case strings.HasPrefix(pk, prefixBackfill) && sk == skBackfill:
			d.Item, d.Backfill, d.Job = TimerOfBackfill, strings.TrimPrefix(pk, prefixBackfill), r.str(attrJob)
		case strings.HasPrefix(pk, prefixRun) && strings.HasPrefix(sk, prefixTask):
			d.Item, d.Run, d.Task, d.Job = TimerOfInstance, strings.TrimPrefix(pk, prefixRun), strings.TrimPrefix(sk, prefixTask), r.str(attrJob)
		default:
			return nil, "", op(fmt.Errorf("%w: timer on unexpected item %s/%s", ErrCorruptItem, pk, sk))
		}
		if r.err != nil {
			return nil, "", op(r.err)
		}
		due = append(due, d)
	}
	return due, encodeToken(out.LastEvaluatedKey), nil
}
