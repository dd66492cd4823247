package memstore_test

import (
	"testing"
	"time"

	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store/memstore"
	"github.com/runledger/runledger/shared/store/storetest"
)

// The in-memory store is an implementation of the scheduler's port.
var _ scheduler.Store = (*memstore.Store)(nil)

// TestContract holds memstore to the port's contract suite.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t testing.TB, now func() time.Time) scheduler.Store {
		return memstore.New(memstore.WithClock(now))
	})
}
