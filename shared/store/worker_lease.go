package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/wire"
)

const workerPK = "WORKER#"

// PutWorkerLease stores a worker's lease if it is newer than the stored
// one, ordered by (boot start time, seq):
//
//	worker  Put  WORKER#<name>/LEASE
//	        condition  attribute_not_exists(#pk) OR attribute_not_exists(#started)
//	                   OR #started < :started
//	                   OR (#started = :started AND #boot <> :boot)
//	                   OR (#boot = :boot AND #seq < :seq AND #seq >= :floor)
//
// A lease of a boot that started later replaces any lease of an earlier
// boot; within one boot a higher seq replaces a lower one, if it is at
// most ledger.MaxLeaseSeqJump higher (:floor is l.SeqFloor()). Two boots
// whose starts cannot be told apart (equal, or both unknown) replace each
// other. A failed condition means the stored lease is newer (a late
// delivery, or an old boot's final lease after the new boot's first), or
// this one's seq jumps too far: it is dropped, no error. An item from
// before boot start times were stored is replaced.
//
// The item expires (TTL) a day after the lease ends.
func (s *workerLeases) PutWorkerLease(ctx context.Context, l ledger.WorkerLease) error {
	op := func(err error) error { return fmt.Errorf("put worker lease %s: %w", l.Name, err) }
	if err := ledger.CheckWorkerName(l.Name); err != nil {
		return op(err)
	}
	running, err := wire.Marshal(l.Running)
	if err != nil {
		return op(err)
	}
	// The zero start is stored too, as the earliest of all, so that every
	// item carries the attribute the condition orders by.
	started := str(ledger.FormatTime(l.BootStartedAt))
	it := item{
		"pk": str(workerPK + l.Name), "sk": str("LEASE"),
		"boot_id": str(l.BootID), "boot_started_at": started,
		"lease_expires_at": tm(l.ExpiresAt), "lease_ends_at": tm(l.EndsAt), "updated_at": tm(l.UpdatedAt),
		"running": str(string(running)), "expires_at": num(later(l.ExpiresAt, l.EndsAt).Add(24 * time.Hour).Unix()),
		"seq": num(l.Seq),
	}
	for k, v := range it {
		if v == nil {
			delete(it, k)
		}
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.table),
		Item:      it,
		ConditionExpression: aws.String("attribute_not_exists(#pk) OR attribute_not_exists(#started) OR #started < :started" +
			" OR (#started = :started AND #boot <> :boot) OR (#boot = :boot AND #seq < :seq AND #seq >= :floor)"),
		ExpressionAttributeNames: map[string]string{
			"#pk": "pk", "#boot": "boot_id", "#started": "boot_started_at", "#seq": "seq",
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{":boot": str(l.BootID), ":started": started, ":seq": num(l.Seq), ":floor": num(l.SeqFloor())},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil
	}
	if err != nil {
		return op(translate(err))
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// GetWorkerLease reads a worker's lease; a worker never seen has the zero
// lease (empty BootID).
func (s *workerLeases) GetWorkerLease(ctx context.Context, name string) (ledger.WorkerLease, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: keyOf(workerPK+name, "LEASE"), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return ledger.WorkerLease{}, fmt.Errorf("get worker lease %s: %w", name, translate(err))
	}
	if out.Item == nil {
		return ledger.WorkerLease{Name: name}, nil
	}
	r := &reader{it: out.Item}
	l := ledger.WorkerLease{Name: name, BootID: r.str("boot_id"), BootStartedAt: r.time("boot_started_at"),
		ExpiresAt: r.time("lease_expires_at"), EndsAt: r.time("lease_ends_at"), UpdatedAt: r.time("updated_at"), Seq: r.int("seq")}
	if raw := r.str("running"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &l.Running); err != nil {
			return l, fmt.Errorf("get worker lease %s: %w: %v", name, ledger.ErrCorruptItem, err)
		}
	}
	if r.err != nil {
		return l, fmt.Errorf("get worker lease %s: %w", name, r.err)
	}
	return l, nil
}
