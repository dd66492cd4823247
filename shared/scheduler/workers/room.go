// Package workers is the worker protocol's room of the scheduler: a
// worker's claim, heartbeat and completion of an attempt, the process
// leases and failed invocations the events queue carries, and the fencing
// that guards them all (the attempt's token, its one-time claim nonce, the
// leases a token proves, the late reports of evicted attempts). What a
// report does to its instance is decided by statemodel and written by the
// ledger; what follows a written transition is the kernel's (Kernel).
package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// Kernel is what the worker protocol needs of the scheduler's kernel.
type Kernel interface {
	// Now is the scheduler's clock, in UTC.
	Now() time.Time
	// Policy makes the store decide with the instance's stored policy and
	// the kernel's jitter source.
	Policy() statemodel.Policy
	// Transient reports whether an error may go away by itself (retried,
	// never dropped).
	Transient(err error) bool
	// AttemptToken is attempt n's fencing token, derived from inst's
	// secret.
	AttemptToken(inst ledger.Instance, n int) (string, error)
	// NonceMatches reports whether bearer is attempt n's one-time claim
	// nonce.
	NonceMatches(inst ledger.Instance, n int, bearer string) bool
	// Envelope is the envelope of attempt n of inst (as read with its
	// run), without its inputs: what the dispatch sent.
	Envelope(inst ledger.Instance, run ledger.Run, n int, token string) protocol.Envelope
	// FollowInRun handles an applied transition and performs its
	// effects, advancing the run from view (the run as read, with the
	// transition's task as written) rather than from another read.
	FollowInRun(ctx context.Context, res ledger.Result, view ledger.RunView)
	// Follow handles a write's transitions and performs their effects.
	Follow(ctx context.Context, res ledger.Result)
	// ReconcileInstance moves an instance on whose lease or deadline has
	// passed (the reconciler's work for one instance).
	ReconcileInstance(ctx context.Context, key ledger.InstanceKey) error
}

// Store is what the worker protocol reads and writes of the ledger
// (ledger.Store implements it).
type Store interface {
	GetInstance(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, error)
	GetInstanceAndRun(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, ledger.Run, error)
	GetAttempt(ctx context.Context, key ledger.InstanceKey, n int) (ledger.Attempt, error)
	GetOutputs(ctx context.Context, run string, tasks []string) (map[string][]byte, error)
	ReadRun(ctx context.Context, id string) (ledger.RunView, error)
	TransitionFrom(ctx context.Context, held ledger.Instance, e statemodel.Event, now time.Time, p statemodel.Policy) (ledger.Result, error)
	Heartbeat(ctx context.Context, key ledger.InstanceKey, attempt int, now time.Time, lease time.Duration) (ledger.HeartbeatResult, error)
	PutWorkerLease(ctx context.Context, l ledger.WorkerLease) error
	Fence(ctx context.Context, key ledger.InstanceKey, attempt int) (protocol.Fence, bool, error)
}

// Queue is what the worker protocol sends: a failed invocation held on the
// events queue until its attempt's lease ends.
type Queue interface {
	SendDelayed(ctx context.Context, queueURL, body string, attrs map[string]string, delay time.Duration) (string, error)
}

// Params is what New builds a Room of.
type Params struct {
	// Kernel is the scheduler's kernel.
	Kernel Kernel
	// Store is the ledger.
	Store Store
	// Queue sends to EventsQueueURL.
	Queue Queue
	// EventsQueueURL receives worker completions and process leases; a
	// failed invocation is held on it. "": none is held.
	EventsQueueURL string
	// ClaimWait bounds how long a claim waits for the dispatch write that
	// follows the send of its envelope.
	ClaimWait time.Duration
	// MaxClockSkew bounds how far a worker's clock may be from the
	// scheduler's (a lease's boot may not start later than now plus it).
	MaxClockSkew time.Duration
	// Log receives the room's logs.
	Log *slog.Logger
}

// Room is the worker protocol.
type Room struct {
	k              Kernel
	store          Store
	queue          Queue
	eventsQueueURL string
	claimWait      time.Duration
	maxClockSkew   time.Duration
	log            *slog.Logger
}

// New builds the worker protocol's room of p.
func New(p Params) *Room {
	return &Room{k: p.Kernel, store: p.Store, queue: p.Queue, eventsQueueURL: p.EventsQueueURL,
		claimWait: p.ClaimWait, maxClockSkew: p.MaxClockSkew, log: p.Log}
}
