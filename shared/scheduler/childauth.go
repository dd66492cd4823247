package scheduler

import (
	"context"
	"errors"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
)

// authorizeChild is authorizeInRun for a map child: its instance alone
// (one GetItem), never its run's tasks or its siblings.
func (s *Service) authorizeChild(ctx context.Context, ref protocol.AttemptRef, token string) (ledger.RunView, ledger.Instance, error) {
	inst, err := s.store.GetInstance(ctx, instanceKey(ref))
	if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidKey) {
		return ledger.RunView{}, ledger.Instance{}, protocol.ErrInvalidAttemptToken
	}
	if err != nil {
		return ledger.RunView{}, ledger.Instance{}, err
	}
	err = s.checkToken(ctx, ref, token, inst)
	if errors.Is(err, ErrNotDispatchedYet) {
		err = protocol.ErrInvalidAttemptToken
	}
	return ledger.RunView{}, inst, err
}
