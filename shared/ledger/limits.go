package ledger

import "time"

// The limits every store holds to, so both refuse alike: DynamoDB's
// (the production store's), and the ledger's own.
const (
	// MaxItemSize is DynamoDB's item size limit: 400 KB, attribute names
	// and values together.
	MaxItemSize = 400 * 1024
	// MaxTransactionSize is the aggregate size limit of one
	// TransactWriteItems request.
	MaxTransactionSize = 4 * 1024 * 1024
	// MaxInlineHistory is the most transition records an instance item
	// holds before its writer spills the oldest.
	MaxInlineHistory = 8
	// MaxRounds bounds Transition's read-decide-write rounds.
	MaxRounds = 8
)

// Defaults.
const (
	// DefaultHistoryRetention is how long spilled history items live
	// (RUNLEDGER_HISTORY_RETENTION's default).
	DefaultHistoryRetention = 2160 * time.Hour
	// IdempotencyTTL is how long an idempotency key holds (API: 24 h).
	IdempotencyTTL = 24 * time.Hour
	// DefaultRunBackstop is how far ahead a live run's re-derivation
	// backstop timer is set.
	DefaultRunBackstop = 5 * time.Minute
)
