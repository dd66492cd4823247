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

	"github.com/runledger/runledger/shared/wire"
)

// AttemptKey names one attempt of one instance.
type AttemptKey struct {
	Run     string `json:"run"`
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
}

// WorkerLease is a worker process's lease: evidence for resolving LOST
// instances. A worker that restarted has another BootID; one that died stops
// renewing and its lease ends.
type WorkerLease struct {
	Name      string
	BootID    string
	ExpiresAt time.Time
	UpdatedAt time.Time
	Running   []AttemptKey
	// Seq increases with every lease one boot sends; SQS does not keep
	// order, so an older lease arriving late must not replace a newer one
	// (a graceful shutdown's final lease expires earlier than the one
	// before it, so expiry cannot order them).
	Seq int64
}

const workerPK = "WORKER#"

// PutWorkerLease stores a worker's lease:
//
//	worker  Put  WORKER#<name>/LEASE
//	        condition  attribute_not_exists(#pk) OR #boot <> :boot OR #exp <= :exp
//	        fails when a newer renewal of the same boot is stored already
//	        (out-of-order delivery): the older one is dropped, no error.
//
// The item expires (TTL) a day after the lease ends.
func (s *Store) PutWorkerLease(ctx context.Context, l WorkerLease) error {
	op := func(err error) error { return fmt.Errorf("put worker lease %s: %w", l.Name, err) }
	if err := checkName("worker", l.Name, maxJobBytes); err != nil {
		return op(err)
	}
	running, err := wire.Marshal(l.Running)
	if err != nil {
		return op(err)
	}
	it := item{
		"pk": str(workerPK + l.Name), "sk": str("LEASE"),
		"boot_id": str(l.BootID), "lease_expires_at": tm(l.ExpiresAt), "updated_at": tm(l.UpdatedAt),
		"running": str(string(running)), "expires_at": num(l.ExpiresAt.Add(24 * time.Hour).Unix()),
		"seq": num(l.Seq),
	}
	for k, v := range it {
		if v == nil {
			delete(it, k)
		}
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(s.table),
		Item:                it,
		ConditionExpression: aws.String("attribute_not_exists(#pk) OR #boot <> :boot OR #seq < :seq"),
		ExpressionAttributeNames: map[string]string{
			"#pk": "pk", "#boot": "boot_id", "#seq": "seq",
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{":boot": str(l.BootID), ":seq": num(l.Seq)},
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

// GetWorkerLease reads a worker's lease; a worker never seen has the zero
// lease (empty BootID).
func (s *Store) GetWorkerLease(ctx context.Context, name string) (WorkerLease, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: keyOf(workerPK+name, "LEASE"), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return WorkerLease{}, fmt.Errorf("get worker lease %s: %w", name, translate(err))
	}
	if out.Item == nil {
		return WorkerLease{Name: name}, nil
	}
	r := &reader{it: out.Item}
	l := WorkerLease{Name: name, BootID: r.str("boot_id"), ExpiresAt: r.time("lease_expires_at"), UpdatedAt: r.time("updated_at"), Seq: r.int("seq")}
	if raw := r.str("running"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &l.Running); err != nil {
			return l, fmt.Errorf("get worker lease %s: %w: %v", name, ErrCorruptItem, err)
		}
	}
	if r.err != nil {
		return l, fmt.Errorf("get worker lease %s: %w", name, r.err)
	}
	return l, nil
}
