// Package triggers is the scheduler's room that starts runs: a manual
// trigger, a schedule's slots and their catch-up, backfills, and trigger
// events matched against the jobs' on_event patterns. It decides when a
// run starts and with what; the kernel (Kernel) lays out the run's tasks,
// checks its admission, and moves the runs it created on.
package triggers

import (
	"context"
	"log/slog"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
)

// Kernel is what the room needs of the scheduler's kernel; E is the
// kernel's effect (the first dispatch of a new run's task, its
// admission), which the room carries from the kernel's call that made it
// to the kernel's runner and never looks inside.
type Kernel[E any] interface {
	// Now is the scheduler's clock, in UTC.
	Now() time.Time
	// NewID returns a new run's id: unique, sortable by creation time.
	NewID() string
	// DeadlineReached reports whether a pass should stop starting new work.
	DeadlineReached(ctx context.Context) bool
	// LoadJob reads a job and its definition.
	LoadJob(ctx context.Context, name string) (ledger.Job, jobspec.Job, error)
	// CompiledJob is the definition a job's stored spec holds, compiled
	// once per version.
	CompiledJob(spec []byte) (jobspec.Job, error)

	// NewSecret returns a new instance's attempt secret.
	NewSecret() (ledger.Secret, error)
	// ExecutorJSON is how an instance keeps its task's executor.
	ExecutorJSON(e jobspec.Executor) []byte
	// WithMap makes nt a map task's NewTask when t is one.
	WithMap(nt *ledger.NewTask, t jobspec.Task)
	// CheckEnvelopes refuses a new run whose tasks' dispatch messages the
	// queue would refuse.
	CheckEnvelopes(nr ledger.NewRun, now time.Time) error
	// StartPriority is the priority a new run is stored with.
	StartPriority(j jobspec.Job, req TriggerRequest) int
	// CheckAdmissible refuses a new run of a limited job before anything
	// is written (ledger.ErrLimitQueueFull when its limiter's queue is full).
	CheckAdmissible(ctx context.Context, j jobspec.Job, nr ledger.NewRun) error
	// Created tells the observers of the instances a new run created.
	Created(view ledger.RunView)
	// NewRunEffects are what moves a new run of j on.
	NewRunEffects(view ledger.RunView, j jobspec.Job) []E
	// Perform carries out effects and the effects they yield; with answer
	// set, a new run's effects complete it as they are performed.
	Perform(ctx context.Context, effs []E, answer *ledger.RunView)

	// CancelRun cancels a run as the operator's cancel does.
	CancelRun(ctx context.Context, runID, reason string) error
	// CancelUnfinished cancels the job's unfinished runs of slots before
	// at, backfill runs excepted (the overlap policy cancel_previous).
	CancelUnfinished(ctx context.Context, job string, at time.Time) error
	// Notice tells people of n (the kernel's notice sink and log).
	Notice(ctx context.Context, n protocol.Notice)
	// Transient reports whether an error may go away by itself, so that
	// the work that met it is retried by redelivery.
	Transient(err error) bool
}

// Store is what the room reads and writes: jobs and their schedule
// positions, runs, backfills.
type Store interface {
	ledger.Jobs
	ledger.Runs
	ledger.Backfills
}

// Params are a Room's dependencies, each required.
type Params[E any] struct {
	// Kernel is the scheduler's kernel.
	Kernel Kernel[E]
	// Store is the scheduler's store.
	Store Store
	// Logger receives the room's logs.
	Logger *slog.Logger
	// TickerPeriod is how often the ticker runs (it shapes when a slot
	// counts as missed: lateAfter).
	TickerPeriod time.Duration
	// BadMessage is the kernel's error for a trigger event that can never
	// start a run (no id, a time out of range); the room wraps it.
	BadMessage error
}

// Room starts runs: triggers, schedules and their catch-up, backfills,
// trigger events.
type Room[E any] struct {
	k            Kernel[E]
	store        Store
	log          *slog.Logger
	tickerPeriod time.Duration
	badMessage   error

	// events caches the on_event index (eventIndex).
	events eventIndexCache
}

// New builds the room from its dependencies.
func New[E any](p Params[E]) *Room[E] {
	return &Room[E]{k: p.Kernel, store: p.Store, log: p.Logger, tickerPeriod: p.TickerPeriod,
		badMessage: p.BadMessage}
}
