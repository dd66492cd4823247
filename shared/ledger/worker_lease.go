package ledger

import "time"

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
