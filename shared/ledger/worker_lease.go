package ledger

import (
	"math"
	"time"
)

// AttemptKey names one attempt of one instance.
type AttemptKey struct {
	Run     string `json:"run"`
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
}

// WorkerLease is a worker process's lease: evidence for resolving LOST
// instances. A worker that restarted has another BootID; one that died stops
// renewing and its lease ends.
type WorkerLease struct {
	Name   string
	BootID string
	// BootStartedAt is when the process started (by its own clock; zero
	// when unknown): of two boots of one name, the later start is the live
	// one.
	BootStartedAt time.Time
	// ExpiresAt is the lease's end by the worker's clock, as it sent it.
	ExpiresAt time.Time
	// EndsAt is the lease's end by the scheduler's clock: when the lease
	// was received plus the lifetime the worker gave it. Evidence reads
	// this one, never the worker's clock.
	EndsAt    time.Time
	UpdatedAt time.Time
	Running   []AttemptKey
	// Seq increases with every lease one boot sends; SQS does not keep
	// order, so an older lease arriving late must not replace a newer one
	// (a graceful shutdown's final lease expires earlier than the one
	// before it, so expiry cannot order them).
	Seq int64
}

// MaxLeaseSeqJump is how far a lease's seq may run ahead of the stored
// lease of its boot. The worker SDK numbers only the leases that list
// attempts (the only ones kept), so a live boot's next kept lease is
// rarely more than a few ahead; a seq far beyond would be stored as the
// boot's newest and lock out every later lease the boot really sends.
const MaxLeaseSeqJump = 1000

// SeqFloor is the lowest seq a stored lease of l's boot may have for l to
// replace it (l.Seq less MaxLeaseSeqJump, never below the smallest int64).
func (l WorkerLease) SeqFloor() int64 {
	if l.Seq < math.MinInt64+MaxLeaseSeqJump {
		return math.MinInt64
	}
	return l.Seq - MaxLeaseSeqJump
}
