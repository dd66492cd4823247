// Package maps is the scheduler's maps room: map tasks, which fan out over
// a list and run as their children.
//
// A map task (docs/api.md, "Fan-out over a list") runs as its children.
// When its dependencies are met its attempt starts at once, with no
// worker (one write: deps.met, dispatch.accepted and attempt.started),
// over is rendered, and the map item is created with the rendered
// elements (CreateMap). Children are then released in batches: one
// conditional write of the map item (ReleaseChildren) moves its release
// mark, then the released children's instances are written (SCHEDULED)
// and dispatched as any task. A child's final write moves the map's counts
// in the same atomic write (the store's WriteInstance), and its effect
// (the kernel's map step, Kernel.MapStep) reads the map item once: it
// releases the next children, or, when all ended, ends the map task,
// which the run then derives from as from any task. No child step reads
// the run's tasks or its siblings.
//
// The room writes through its Store and hands what is to be done next
// back to the kernel as the kernel's own effects (E), which it builds
// with the Kernel and never reads.
package maps

import (
	"context"
	"log/slog"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// Kernel is what the maps room needs of the scheduler's kernel: the
// effects it performs (of type E), a write's follow-up, attempt
// credentials, and the operator's and the run's next steps.
type Kernel[E any] interface {
	// Applied records a write's applied transitions and answers the
	// effects they ask for, for the caller to hand on.
	Applied(ctx context.Context, res ledger.Result) []E
	// Follow records a write's applied transitions and performs their
	// effects.
	Follow(ctx context.Context, res ledger.Result)
	// MapStep is the effect that moves the map task key on.
	MapStep(key ledger.InstanceKey) E
	// Dispatch is the effect that dispatches child, written SCHEDULED,
	// of the run held.
	Dispatch(child ledger.Instance, run *ledger.Run) E
	// AttemptToken is attempt n's fencing token and its stored hash.
	AttemptToken(inst ledger.Instance, n int) (token, hash string, err error)
	// NewSecret returns a new instance's attempt secret.
	NewSecret() (ledger.Secret, error)
	// NewID returns a new unique, time-sortable id.
	NewID() string
	// Operate applies an operator's event to the instance at key,
	// follows its effects and stores the run's state after it.
	Operate(ctx context.Context, key ledger.InstanceKey, ev statemodel.Event) error
	// AdvanceRun moves a run on; touch stores its state even when it is
	// unchanged (an operator's action).
	AdvanceRun(ctx context.Context, runID string, touch bool) error
}

// Store is what the maps room reads and writes: the maps' items and
// children, the outputs a map's over reads, and the instances and runs
// of its map tasks.
type Store interface {
	ledger.Maps
	ledger.Outputs
	ReadRun(ctx context.Context, id string) (ledger.RunView, error)
	GetRun(ctx context.Context, id string) (ledger.Run, error)
	GetInstance(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, error)
	GetInstanceAndRun(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, ledger.Run, error)
	TransitionFrom(ctx context.Context, held ledger.Instance, e statemodel.Event, now time.Time, p statemodel.Policy) (ledger.Result, error)
	TransitionAll(ctx context.Context, held ledger.Instance, events []statemodel.Event, now time.Time, p statemodel.Policy) (ledger.Result, error)
}

// Params is what New builds a Room of. Every field is required.
type Params[E any] struct {
	// Kernel is the scheduler's kernel, whose effects the room yields.
	Kernel Kernel[E]
	// Store is the storage the room reads and writes.
	Store Store
	// Now is the clock (UTC).
	Now func() time.Time
	// Policy is the argument that makes the store decide with an
	// instance's stored policy and the kernel's jitter source.
	Policy func() statemodel.Policy
	// Logger receives the room's logs.
	Logger *slog.Logger
}

// Room is the maps room of one scheduler: its caches, step gate and
// stall watch are its own, so two schedulers never share them.
type Room[E any] struct {
	k      Kernel[E]
	store  Store
	now    func() time.Time
	policy func() statemodel.Policy
	log    *slog.Logger

	// cache keeps what a map's steps read and never changes, steps runs
	// one round of each map at a time, and stalls remembers what each
	// map task's last backstop found.
	cache  *mapCache
	steps  *stepGate
	stalls *stallWatch
}

// New builds the maps room of p.
func New[E any](p Params[E]) *Room[E] {
	return &Room[E]{k: p.Kernel, store: p.Store, now: p.Now, policy: p.Policy, log: p.Logger,
		cache: newMapCache(), steps: newStepGate(), stalls: newStallWatch()}
}

// maxRounds bounds the tries of a map's conditional write that met
// another's (the kernel's bound on an advance's rounds).
const maxRounds = 8
