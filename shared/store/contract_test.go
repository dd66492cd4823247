package store_test

import (
	"testing"
	"time"

	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/store/storetest"
)

// TestContract holds the DynamoDB store to the port's contract suite, on
// DynamoDB Local, a fresh table per case.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t testing.TB, now func() time.Time) scheduler.Store {
		return store.New(db, newTable(t), store.WithClock(now))
	})
}
