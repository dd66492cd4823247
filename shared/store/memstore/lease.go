package memstore

import (
	"context"
	"slices"

	"github.com/runledger/runledger/shared/ledger"
)

// PutWorkerLease stores a worker's lease if it is newer than the stored
// one, by the DynamoDB store's order: a boot that started later replaces
// an earlier boot's lease, two boots whose starts are equal replace each
// other, and within one boot a higher seq replaces a lower one, by at most
// ledger.MaxLeaseSeqJump. An older lease, or one that jumps too far, is
// dropped without an error.
func (s *workerLeases) PutWorkerLease(ctx context.Context, l ledger.WorkerLease) error {
	op := opError("put worker lease %s", l.Name)
	if err := s.enter(ctx, ledger.CheckWorkerName(l.Name)); err != nil {
		return op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.leases[l.Name]
	newer := !ok || cur.BootStartedAt.Before(l.BootStartedAt) ||
		(cur.BootStartedAt.Equal(l.BootStartedAt) && cur.BootID != l.BootID) ||
		(cur.BootID == l.BootID && cur.Seq < l.Seq && cur.Seq >= l.SeqFloor())
	if newer {
		l.Running = slices.Clone(l.Running)
		s.leases[l.Name] = l
	}
	return nil
}

// GetWorkerLease reads a worker's lease; a worker never seen has the zero
// lease (empty BootID).
func (s *workerLeases) GetWorkerLease(ctx context.Context, name string) (ledger.WorkerLease, error) {
	if err := s.begin(ctx); err != nil {
		return ledger.WorkerLease{}, opError("get worker lease %s", name)(err)
	}
	defer s.mu.Unlock()
	l, ok := s.leases[name]
	if !ok {
		return ledger.WorkerLease{Name: name}, nil
	}
	l.Running = slices.Clone(l.Running)
	return l, nil
}
