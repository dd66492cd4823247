package scheduler

import (
	"fmt"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
)

// A paging token the store did not issue stays refused however often the
// work is redelivered: it is permanent, not a retry. Throttling and
// contention are retried.
func TestTransientClassifiesStoreErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("list due timers: %w", ledger.ErrInvalidPageToken), false},
		{fmt.Errorf("list jobs: %w", ledger.ErrNotFound), false},
		{fmt.Errorf("claim: %w", protocol.ErrInvalidAttemptToken), false},
		{fmt.Errorf("put: %w", ledger.ErrThrottled), true},
		{fmt.Errorf("transition: %w", ledger.ErrUnsettled), true},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
