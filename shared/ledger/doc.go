// Package ledger is the storage contract at the bottom of the service: the
// records (runs, task instances, attempts, jobs, backfills, timers, worker
// leases), the interfaces a store implements (Store and its parts), the
// errors every store answers with, and the storage-independent rules both
// stores apply (key checks, new-run checks, run timers, the decision
// policy).
//
// It imports only statemodel: the DynamoDB store
// (shared/store), the in-memory one (shared/store/memstore) and the
// contract suite (ledgertest) import it, never the other way round.
package ledger
