package scheduler

import (
	"context"

	"github.com/runledger/runledger/shared/ledger"
)

// TickPassForTest runs one pass over the ticker's shards (counting as a
// ticker pass for the starting shard) that hands each due timer to see
// instead of acting on it.
func (s *Service) TickPassForTest(ctx context.Context, see func(ledger.DueTimer)) (PassStats, error) {
	return s.ticks.run(ctx, "test", 0, func(_ context.Context, d ledger.DueTimer) (bool, error) {
		see(d)
		return false, nil
	})
}
