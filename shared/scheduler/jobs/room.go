// Package jobs is the scheduler's jobs room: job definitions (create,
// update, read, list, pause, delete, each validated against the options
// of now) and the dependencies between jobs (a run's verdict on the
// upstream jobs' runs of its logical time, its dependency timeout, and the
// dependents a finished run wakes). It reaches the kernel only through its
// Kernel interface and the store only through Store.
package jobs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
)

// Kernel is what the jobs room needs of the scheduler's kernel and, through
// it, of the other rooms.
type Kernel interface {
	// CompiledJob is the compiled form of a stored spec (a job's, or a run's
	// copy of it), from the kernel's cache of compiled job versions.
	CompiledJob(spec []byte) (*jobspec.Compiled, error)
	// CheckGroupLimits refuses j when a job of a group it names gives that
	// group another limit, before anything is written.
	CheckGroupLimits(ctx context.Context, j jobspec.Job) error
	// ApplyLimit stores an updated job's concurrency limit in the limiters
	// its unfinished runs stand in.
	ApplyLimit(ctx context.Context, j jobspec.Job)
	// ForgetEventIndex makes the on_event index stale: a job was written.
	ForgetEventIndex()
	// RunAt finds a job's run with the given logical time among its
	// newest runs.
	RunAt(ctx context.Context, job string, logical time.Time) (ledger.Run, bool, error)
	// ArmTimer sends a delay message so that a run's or a task's timer
	// fires on time instead of on the next scan.
	ArmTimer(ctx context.Context, key ledger.InstanceKey, at time.Time)
}

// Store is what the jobs room reads and writes: the job definitions, a
// job's unfinished runs and its dependency edges.
type Store interface {
	ledger.Jobs
	// ListUnfinishedRuns lists a job's unfinished runs, oldest first.
	ListUnfinishedRuns(ctx context.Context, job string) ([]ledger.UnfinishedRun, error)
	// ListDependents lists the jobs whose depends_on_jobs name job.
	ListDependents(ctx context.Context, job string) ([]string, error)
}

// Params are a Room's dependencies; New needs every one of them.
type Params struct {
	// Kernel is the scheduler's kernel, as the room sees it.
	Kernel Kernel
	// Store keeps the jobs and their runs.
	Store Store
	// Pools maps each configured worker pool to its dispatch queue URL: a
	// definition naming another pool is refused.
	Pools map[string]string
	// Allowed is what definitions may name outside the queues.
	Allowed jobspec.Allowed
	// Now is the scheduler's clock (domain time).
	Now func() time.Time
	// Log receives the room's logs.
	Log *slog.Logger
}

// Room keeps job definitions and the dependencies between jobs.
type Room struct {
	k       Kernel
	store   Store
	pools   map[string]string
	allowed jobspec.Allowed
	now     func() time.Time
	log     *slog.Logger

	// deps caches the dependency edges read per job (dependentJobs).
	depsMu sync.Mutex
	deps   map[string]dependentsEntry
}

// New builds the jobs room of p.
func New(p Params) *Room {
	return &Room{k: p.Kernel, store: p.Store, pools: p.Pools, allowed: p.Allowed, now: p.Now, log: p.Log}
}
