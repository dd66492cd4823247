package memstore_test

import (
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store/memstore"
)

// The in-memory store is an implementation of the scheduler's port.

// TestContract holds memstore to the port's contract suite.
func TestContract(t *testing.T) {
	ledgertest.Run(t, func(t testing.TB, now func() time.Time) ledger.Storage {
		return memstore.New(memstore.WithClock(now))
	})
}
