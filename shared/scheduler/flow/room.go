// Package flow is the scheduler's flow room: the limiters a run enters
// (concurrency and rate limits, by job or group and key), the task pools
// whose slots a task holds while in flight, the turns their writes take
// and batch in (ledger.Turns, handed in at the composition root) and the
// hand-offs that admit the next runs and tasks. One Room owns them:
// nothing here is a package global, and what one admission needs travels
// in the call or on the work it asks for (HandOff).
//
// The room reaches the run's lifecycle (compiled job versions, the effect
// runner, timers, operator writes, dependency verdicts) only through the
// Kernel it is given.
package flow

import (
	"context"
	"log/slog"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// Kernel is what the room needs of the run's lifecycle.
type Kernel interface {
	// Compiled is a job version's spec compiled, once per version.
	Compiled(spec []byte) (*jobspec.Compiled, error)
	// Perform carries out work, and what it yields, in order.
	Perform(ctx context.Context, work ...Work)
	// ArmTimer arms the timer of key to fall due at at (a delay message;
	// the scan is its backstop).
	ArmTimer(ctx context.Context, key ledger.InstanceKey, at time.Time)
	// Operate applies an operator's event to one task, follows its
	// effects and stores the run's state after it.
	Operate(ctx context.Context, key ledger.InstanceKey, ev statemodel.Event) (ledger.Result, error)
	// WriteVerdict writes a CREATED instance's dependency verdict on its
	// own, and reports whether this call's write won (the instance as it
	// stands either way).
	WriteVerdict(ctx context.Context, inst ledger.Instance) (ledger.Instance, bool, error)
}

// Store is what the room reads and writes: the limiters, and the runs,
// tasks and jobs whose admission it decides.
type Store interface {
	ledger.Limiters
	GetRun(ctx context.Context, id string) (ledger.Run, error)
	ReadRun(ctx context.Context, id string) (ledger.RunView, error)
	ListUnfinishedRuns(ctx context.Context, job string) ([]ledger.UnfinishedRun, error)
	GetInstance(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, error)
	GetJob(ctx context.Context, name string) (ledger.Job, error)
	ListJobs(ctx context.Context, limit int, token string) ([]ledger.Job, string, error)
}

// Params are a Room's dependencies.
type Params struct {
	// Kernel is the run's lifecycle the room calls back.
	Kernel Kernel
	// Store holds the limiters, runs, tasks and jobs.
	Store Store
	// Turns is the registry in which this process's limiter writes take
	// turns and are batched. Defaults to a registry of the room's own.
	Turns *ledger.Turns
	// Now is the clock. Defaults to time.Now, in UTC.
	Now func() time.Time
	// Logger receives the room's warnings. Defaults to slog.Default().
	Logger *slog.Logger
}

// Room is the flow room: admission to limiters and task pools.
type Room struct {
	k     Kernel
	store Store
	turns *ledger.Turns
	now   func() time.Time
	log   *slog.Logger
	// slots remembers which jobs' tasks may hold task slots (taskslots.go).
	slots slotJobs
}

// New builds a Room of p with its defaults.
func New(p Params) *Room {
	r := &Room{k: p.Kernel, store: p.Store, turns: p.Turns, now: p.Now, log: p.Logger}
	if r.turns == nil {
		r.turns = ledger.NewTurns()
	}
	if r.now == nil {
		r.now = func() time.Time { return time.Now().UTC() }
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r
}

// WorkKind names what a Work asks of the kernel.
type WorkKind int

const (
	// Dispatch sends the next attempt of Work.Inst.
	Dispatch WorkKind = iota + 1
	// Advance evaluates run Work.RunID's CREATED tasks and derives its
	// state.
	Advance
)

// Work is one thing the room asks the kernel's effect runner to do: the
// dispatch of a task an admission released, or the advance of a run a
// hand-off admitted.
type Work struct {
	Kind WorkKind
	// Inst is the instance to dispatch as written; Run its run as held
	// (nil: the kernel reads it).
	Inst ledger.Instance
	Run  *ledger.Run
	// DepsMet: the dispatch also records the task's dependency verdict;
	// SoleVerdict: the admission's own write decided it (the verdict rides
	// in the dispatch's write).
	DepsMet, SoleVerdict bool
	// Answer is the new run's view the dispatch completes at Task (nil:
	// nobody waits for an answer).
	Answer *ledger.RunView
	Task   int
	// RunID is the run to advance; View, when not nil, the run as read
	// after the hand-off's write, which the advance decides on as on its
	// own read.
	RunID string
	View  *ledger.RunView
	// HandOff is the hand-off this work is part of (nil: none).
	HandOff *HandOff
}
