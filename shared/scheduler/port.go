package scheduler

import "github.com/runledger/runledger/shared/ledger"

// Store is the scheduler's port to its storage: the storage port the
// ledger package declares, which the DynamoDB store and memstore
// implement. New builds the decision loop over it (ledger.New) once.
type Store = ledger.Storage

// WorkerLeases keeps each worker process's lease (ledger.WorkerLeases).
type WorkerLeases = ledger.WorkerLeases
