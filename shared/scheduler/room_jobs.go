package scheduler

import (
	"context"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/scheduler/jobs"
)

// jobsKernel is the kernel as the jobs room sees it (jobs.Kernel).
type jobsKernel struct{ s *Service }

func (k jobsKernel) CompiledJob(spec []byte) (*jobspec.Compiled, error) { return k.s.compiled.of(spec) }

func (k jobsKernel) CheckGroupLimits(ctx context.Context, j jobspec.Job) error {
	return k.s.flow.CheckGroupLimits(ctx, j)
}

func (k jobsKernel) ApplyLimit(ctx context.Context, j jobspec.Job) { k.s.flow.ApplyLimit(ctx, j) }

func (k jobsKernel) ForgetEventIndex() { k.s.triggers.ForgetEventIndex() }

func (k jobsKernel) RunAt(ctx context.Context, job string, logical time.Time) (ledger.Run, bool, error) {
	return k.s.triggers.RunAt(ctx, job, logical, maxDependencyScan)
}

func (k jobsKernel) ArmTimer(ctx context.Context, key ledger.InstanceKey, at time.Time) {
	delays{k.s}.arm(ctx, key, at)
}

// newJobsRoom builds the Service's jobs room.
func newJobsRoom(s *Service) *jobs.Room {
	return jobs.New(jobs.Params{Kernel: jobsKernel{s}, Store: s.store, Pools: s.cfg.Pools, Allowed: s.cfg.Allowed, Now: s.now, Log: s.log})
}

// Jobs is the jobs room: job definitions and the dependencies between
// jobs.
func (s *Service) Jobs() *jobs.Room { return s.jobs }
