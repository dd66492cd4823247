package store_test

import (
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
)

// TestContract holds the DynamoDB store to the port's contract suite, on
// DynamoDB Local, a fresh table per case.
func TestContract(t *testing.T) {
	ledgertest.Run(t, func(t testing.TB, now func() time.Time) ledger.Storage {
		return store.New(db, newTable(t), store.WithClock(now))
	})
}
