package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

// A run expires whole (docs/store.md, "Retention"): every item of it (the
// run, its pointer, instances, attempts, history, map items, map children
// and their attempts and history, map outputs) carries the same TTL value,
// its run's ExpiresAt, written through expiry and nothing else, so
// DynamoDB removes all of them within the same sweep and no reader meets a
// run with a gap in its history. The run carries the value, and each
// instance a copy, so a writer of any item of the run has it without a
// read.

// attrRetention is the run's retention in seconds (ledger.Run.Retention).
const attrRetention = "retention"

// expiry is the TTL attribute of an item of a run expiring at; absent for
// a run that never expires (stored before runs expired).
func expiry(at time.Time) types.AttributeValue {
	if at.IsZero() {
		return nil
	}
	return epoch(at)
}

// expiry reads the TTL attribute; zero when absent.
func (r *reader) expiry() time.Time {
	if _, ok := r.it[tableschema.TTL]; !ok {
		return time.Time{}
	}
	return time.Unix(r.int(tableschema.TTL), 0).UTC()
}

// expiryOf reads the TTL attribute of the item at pk/sk (a projection of
// it alone), for the few writers of an item of a run that hold no copy of
// the run's expiry: a late event's attempt item, a map's output. Zero when
// the item or its TTL is absent.
func (s *base) expiryOf(ctx context.Context, pk, sk string) (time.Time, error) {
	e := newExpr()
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: keyOf(pk, sk), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String(e.n(tableschema.TTL)), ExpressionAttributeNames: e.nameMap(),
	})
	if err != nil {
		return time.Time{}, translate(err)
	}
	r := &reader{it: out.Item}
	at := r.expiry()
	return at, r.err
}

// pushExpiry moves the expiry of every item of run but the run item to
// at, before the run item's own write carries it: a crash in between
// leaves the run item's older value, so the next pass pushes again.
// Items pushed already (or written since with at) are skipped by the
// condition, an item deleted since is not recreated, and the value only
// ever grows.
//
//	per item  Update  SET #expires_at = :at
//	          condition  attribute_exists(#pk) AND #expires_at < :at
//
// The items are the run's partition (instances, attempts, history, map
// items and, for a map stored before its children were partitioned, its
// children), each partitioned map's child partitions (their children,
// attempts, history and count shards), and the run's pointer in its job's
// partition.
func (s *runs) pushExpiry(ctx context.Context, run ledger.Run, at time.Time) error {
	keys := []map[string]types.AttributeValue{keyOf(jobShard(run.Job, run.ID), pointerSK(run.ID))}
	type partedMap struct {
		task  string
		parts int
	}
	var parted []partedMap
	err := s.expiringKeys(ctx, runPK(run.ID), at, func(r *reader) {
		if r.str(tableschema.SK) == skRun {
			return
		}
		if r.str(attrKind) == kindMap {
			if n := int(r.int(attrChildParts)); n > 0 {
				parted = append(parted, partedMap{task: r.str(attrTask), parts: n})
			}
		}
		if r.expiry().Before(at) {
			keys = append(keys, keyOf(r.str(tableschema.PK), r.str(tableschema.SK)))
		}
	})
	if err != nil {
		return err
	}
	for _, m := range parted {
		for p := range m.parts {
			err := s.expiringKeys(ctx, childPartPK(run.ID, m.task, p), at, func(r *reader) {
				if r.expiry().Before(at) {
					keys = append(keys, keyOf(r.str(tableschema.PK), r.str(tableschema.SK)))
				}
			})
			if err != nil {
				return err
			}
		}
	}
	for _, k := range keys {
		u := newExpr()
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(s.table), Key: k,
			UpdateExpression: aws.String("SET " + u.n(tableschema.TTL) + " = " + u.v("at", epoch(at))),
			ConditionExpression: aws.String("attribute_exists(" + u.n(tableschema.PK) + ") AND (attribute_not_exists(" +
				u.n(tableschema.TTL) + ") OR " + u.n(tableschema.TTL) + " < " + u.v("at2", epoch(at)) + ")"),
			ExpressionAttributeNames: u.nameMap(), ExpressionAttributeValues: u.valueMap(),
		})
		if _, failed := conditionItem(err); err != nil && !failed {
			return fmt.Errorf("push expiry of run %s: %w", run.ID, translate(err))
		}
	}
	return nil
}

// expiringKeys queries partition pk (keys, kind, task, child partitions
// and expiry only, strongly consistent) and hands each item to see.
func (s *runs) expiringKeys(ctx context.Context, pk string, at time.Time, see func(*reader)) error {
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		KeyConditionExpression: aws.String(e.n(tableschema.PK) + " = " + e.v("pk", str(pk))),
		ProjectionExpression: aws.String(e.n(tableschema.PK) + ", " + e.n(tableschema.SK) + ", " + e.n(tableschema.TTL) +
			", " + e.n(attrKind) + ", " + e.n(attrTask) + ", " + e.n(attrChildParts)),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		ConsistentRead: aws.Bool(true),
	}
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return fmt.Errorf("push expiry: read %s: %w", pk, translate(err))
		}
		for _, it := range out.Items {
			see(&reader{it: it})
		}
		if out.LastEvaluatedKey == nil {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// retained is run as its next write leaves it: when its expiry is due at
// now (ledger.ExpiryDue), every other item of it is pushed first and the
// returned run carries the new expiry, for the run item's write.
func (s *runs) retained(ctx context.Context, run ledger.Run, now time.Time) (ledger.Run, error) {
	if !ledger.ExpiryDue(run, now) {
		return run, nil
	}
	at := ledger.RunExpiry(now, run.Retention)
	if err := s.pushExpiry(ctx, run, at); err != nil {
		return run, err
	}
	run.ExpiresAt = at
	return run, nil
}
