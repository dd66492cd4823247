package signals

import (
	"context"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// Kernel is what the signal tasks need of the scheduler's kernel.
type Kernel interface {
	// Now is the scheduler's clock, in UTC.
	Now() time.Time
	// Policy makes the store decide with the instance's stored policy and
	// the kernel's jitter source.
	Policy() statemodel.Policy
	// Transient reports whether an error may go away by itself.
	Transient(err error) bool
	// NewID returns a new unique id, sortable by creation time.
	NewID() string
	// Follow handles a write's transitions and performs their effects.
	Follow(ctx context.Context, res ledger.Result)
	// Notice tells people of n (the kernel's notice sink and log).
	Notice(ctx context.Context, n protocol.Notice)
}

// Store is what the signal tasks read and write of the ledger
// (ledger.Store implements it).
type Store interface {
	GetInstance(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, error)
	// GetAttempt reads attempt n's record where the instance no longer
	// holds it (an older attempt: the instance keeps its current one).
	GetAttempt(ctx context.Context, key ledger.InstanceKey, n int) (ledger.Attempt, error)
	TransitionFrom(ctx context.Context, held ledger.Instance, e statemodel.Event, now time.Time, p statemodel.Policy) (ledger.Result, error)
}

// Params is what New builds a Room of.
type Params struct {
	// Kernel is the scheduler's kernel.
	Kernel Kernel
	// Store is the ledger.
	Store Store
}

// Room is the signal tasks.
type Room struct {
	k     Kernel
	store Store
}

// New builds the signal tasks' room of p.
func New(p Params) *Room {
	return &Room{k: p.Kernel, store: p.Store}
}
