package ledger

import (
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
)

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
	// DefaultRunRetention is how long a finished run is kept when its
	// job sets no retention (the deployment's RUNLEDGER_HISTORY_RETENTION
	// overrides it): every item of the run expires together (RunExpiry).
	DefaultRunRetention = 2160 * time.Hour
	// RetentionGrace is how far past its retention a run's items are set
	// to expire: a run that ends within it of its last expiry (its
	// creation, or its last push) keeps the expiry it has, so only runs
	// that last longer than a day rewrite their items' expiry
	// (ExpiryDue).
	RetentionGrace = 24 * time.Hour
	// IdempotencyTTL is how long an idempotency key holds (API: 24 h).
	IdempotencyTTL = 24 * time.Hour
	// DefaultRunBackstop is how far ahead a live run's re-derivation
	// backstop timer is set.
	DefaultRunBackstop = 5 * time.Minute
)

// RunExpiry is the expiry every item of a run carries when written from
// at (the run's creation, or a push of its expiry) with retention: the
// table's TTL attribute, the same value on every item, so DynamoDB removes
// a run whole and no reader meets a run with a gap in its history.
func RunExpiry(at time.Time, retention time.Duration) time.Time {
	return at.Add(retention + RetentionGrace).Truncate(time.Second)
}

// ExpiryDue reports whether run's expiry must be pushed at now: less than
// its retention remains, so it would expire before it has been kept its
// retention after an end now. An unfinished run's backstop pass (every few
// minutes) and the run's end push it, so an unfinished run never expires
// and a finished one is kept at least its retention after its end. A run
// stored before runs expired has none and never does.
func ExpiryDue(run Run, now time.Time) bool {
	return !run.ExpiresAt.IsZero() && run.ExpiresAt.Before(now.Add(run.Retention))
}

// Expired reports whether an item with expiry at is gone at now: DynamoDB
// deletes an expired item some time (up to days) after its expiry, and
// every reader treats it as deleted from its expiry on. Zero never
// expires.
func Expired(at, now time.Time) bool { return !at.IsZero() && !now.Before(at) }

// CheckRetention refuses a retention outside jobspec.MinRetention ..
// jobspec.MaxRetention, the job's and the deployment's alike; zero is the
// deployment's.
func CheckRetention(d time.Duration) error {
	if d != 0 && (d < jobspec.MinRetention || d > jobspec.MaxRetention) {
		return fmt.Errorf("%w: retention %s is not within %s..%s", ErrInvalidInput,
			jobspec.FormatDuration(d), jobspec.FormatDuration(jobspec.MinRetention), jobspec.FormatDuration(jobspec.MaxRetention))
	}
	return nil
}

// Retain sets a new run's retention (its job's, else the deployment's)
// and its expiry from stamp, the store's clock at its creation.
func Retain(run *Run, nr NewRun, deployment time.Duration, stamp time.Time) {
	run.Retention = nr.Retention
	if run.Retention == 0 {
		run.Retention = deployment
	}
	run.ExpiresAt = RunExpiry(stamp, run.Retention)
}
