package scheduler

import "github.com/runledger/runledger/shared/ledger"

// Store is the scheduler's port to its storage: the storage contract the
// ledger package declares, which the DynamoDB store and memstore implement.
type Store = ledger.Store

// WorkerLeases keeps each worker process's lease (ledger.WorkerLeases).
type WorkerLeases = ledger.WorkerLeases
