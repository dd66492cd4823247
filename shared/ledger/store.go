package ledger

import "time"

const (
	// DefaultHistoryRetention is how long spilled history items live
	// (RUNLEDGER_HISTORY_RETENTION's default).
	DefaultHistoryRetention = 2160 * time.Hour
	// IdempotencyTTL is how long an idempotency key holds (API: 24 h).
	IdempotencyTTL = 24 * time.Hour
	// DefaultRunBackstop is how far ahead a live run's re-derivation
	// backstop timer is set.
	DefaultRunBackstop = 5 * time.Minute
	// MaxRounds bounds Transition's read-decide-write rounds.
	MaxRounds = 8
)
