package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

// A job's slot claims and idempotency keys are spread over its
// tableschema.JobShards partitions JOB#<job>#nn by a hash of their sort
// key, so that one job's runs do not all write JOB#<job>; those stored
// before the sharding stay at JOB#<job> (legacyClaim) and still count.
func slotPK(job string, logical time.Time) string { return claimShard(job, slotSK(logical)) }
func idemPK(job, key string) string               { return claimShard(job, idemSK(key)) }

func claimShard(job, sk string) string {
	sum := sha256.Sum256([]byte(sk))
	return jobShardN(job, int(binary.BigEndian.Uint32(sum[:4])%tableschema.JobShards))
}
func pointerSK(run string) string   { return prefixRun + run }
func dependentSK(job string) string { return prefixDependent + job }

// legacyOutcome is what the slot and idempotency items stored before the
// sharding say of a new run: taken, the run the first of them holds
// (ErrIdempotentReplay or ErrIdempotencyMismatch before ErrSlotTaken, as
// the transaction answers); slotHeld, that its slot has a run already.
type legacyOutcome struct {
	taken    *ledger.ExistingRunError
	slotHeld bool
}

// legacyClaims reads the items nr's slot and idempotency key had at
// JOB#<job> before they were sharded (one BatchGetItem, eventually
// consistent: nothing writes those keys any more, so they only expire).
// An unexpired key answers its run as a taken one would; a slot claimed
// there refuses a claim and needs no mark. A run with neither reads
// nothing, nor does a key once every key stored before has expired
// (legacyKeysLive).
func (s *runs) legacyClaims(ctx context.Context, nr ledger.NewRun, stamp time.Time) (legacyOutcome, error) {
	var keys []map[string]types.AttributeValue
	var out legacyOutcome
	if nr.Idempotency != nil {
		live, err := s.legacyKeysLive(ctx, stamp)
		if err != nil {
			return out, err
		}
		if !live {
			nr.Idempotency = nil // every key stored before has expired
		}
	}
	if nr.Idempotency != nil {
		keys = append(keys, keyOf(jobPK(nr.Job), idemSK(nr.Idempotency.Key)))
	}
	if nr.ClaimSlot || nr.MarkSlot {
		keys = append(keys, keyOf(jobPK(nr.Job), slotSK(nr.LogicalTime)))
	}
	if len(keys) == 0 {
		return out, nil
	}
	found := map[string]map[string]types.AttributeValue{}
	if err := s.batchGetItems(ctx, keys, false, func(it map[string]types.AttributeValue) {
		found[(&reader{it: it}).str(tableschema.SK)] = it
	}); err != nil {
		return out, fmt.Errorf("read the slot and idempotency key stored before the sharding: %w", err)
	}
	if ik := nr.Idempotency; ik != nil {
		// An expired key that TTL has not deleted yet is free, as the
		// transaction's condition has it.
		if it, ok := found[idemSK(ik.Key)]; ok && (&reader{it: it}).int(tableschema.TTL) >= stamp.Unix() {
			ex, err := existingRunOf(nr.Job, it)
			if err != nil {
				return out, err
			}
			ex.Err = ledger.ErrIdempotentReplay
			if ex.BodyHash != ik.BodyHash {
				ex.Err = ledger.ErrIdempotencyMismatch
			}
			out.taken = ex
			return out, nil
		}
	}
	if it, ok := found[slotSK(nr.LogicalTime)]; ok && (nr.ClaimSlot || nr.MarkSlot) {
		out.slotHeld = true
		if nr.ClaimSlot {
			ex, err := existingRunOf(nr.Job, it)
			if err != nil {
				return out, err
			}
			ex.Err = ledger.ErrSlotTaken
			out.taken = ex
		}
	}
	return out, nil
}

// claimsEpoch is when this table's slot claims and idempotency keys began
// to go to the job's shards: the first time a process that shards them
// needed to know, kept in one item (META / CLAIMS_SHARDED, written once)
// and read once per process. Processes of the code before stop writing
// keys at JOB#<job> within legacyWriters of it, so no key stored there is
// live IdempotencyTTL after that: from then on a creation reads none.
// Slot claims do not expire, so those stored before are always read.
type claimsEpoch struct {
	mu sync.Mutex
	at time.Time // zero until read or written
}

const (
	pkMeta         = "META"
	skClaimsEpoch  = "CLAIMS_SHARDED"
	kindClaimsMark = "claims_epoch"
	// legacyWriters bounds how long a process of the code before the
	// sharding keeps writing after one of the new code first ran (a
	// deploy replaces every Lambda within minutes; an invocation lasts
	// at most 15).
	legacyWriters = time.Hour
)

// legacyKeysLive reports whether an idempotency key stored at JOB#<job>
// before the sharding may still be live at stamp.
func (s *runs) legacyKeysLive(ctx context.Context, stamp time.Time) (bool, error) {
	at, err := s.claimsEpochAt(ctx, stamp)
	if err != nil {
		return false, fmt.Errorf("read when claims were sharded: %w", err)
	}
	return stamp.Before(at.Add(legacyWriters + ledger.IdempotencyTTL)), nil
}

// claimsEpochAt reads the epoch item (strongly consistent) the first time
// a process asks, and writes it with now when the table has none: a put
// conditioned on not existing, so racing first processes keep the first.
func (s *runs) claimsEpochAt(ctx context.Context, now time.Time) (time.Time, error) {
	c := s.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() {
		return c.at, nil
	}
	key := keyOf(pkMeta, skClaimsEpoch)
	got, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return time.Time{}, translate(err)
	}
	it := got.Item
	if it == nil {
		mine := item{tableschema.PK: str(pkMeta), tableschema.SK: str(skClaimsEpoch), attrKind: str(kindClaimsMark), attrCreatedAt: tm(now)}.present()
		out, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.table), Item: mine,
			ConditionExpression:                 aws.String("attribute_not_exists(#pk)"),
			ExpressionAttributeNames:            map[string]string{"#pk": tableschema.PK},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			ReturnConsumedCapacity:              s.returnCapacity(),
		})
		it = mine
		if err == nil {
			s.report("put_claims_epoch", false, []int{itemSize(mine)}, nil, consumed(out.ConsumedCapacity))
		} else {
			old, ok := conditionItem(err)
			if !ok || len(old) == 0 {
				return time.Time{}, translate(err)
			}
			it = old
		}
	}
	r := &reader{it: it}
	at := r.time(attrCreatedAt)
	if r.err != nil {
		return time.Time{}, r.err
	}
	c.at = at
	return at, nil
}
