package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/wire"
)

// PoolNames lists the configured pools (jobs naming others are refused).
func (r *Room) PoolNames() []string {
	out := make([]string, 0, len(r.pools))
	for p := range r.pools {
		out = append(out, p)
	}
	return out
}

// ParseOptions are the options a definition is validated against now.
func (r *Room) ParseOptions() jobspec.Options {
	return jobspec.Options{Pools: r.PoolNames(), Allowed: r.allowed, Now: r.now()}
}

// CreateJob stores a new job with its first fire time.
func (r *Room) CreateJob(ctx context.Context, j jobspec.Job) (ledger.Job, error) {
	if err := r.k.CheckGroupLimits(ctx, j); err != nil {
		return ledger.Job{}, err
	}
	spec, err := wire.Marshal(j)
	if err != nil {
		return ledger.Job{}, fmt.Errorf("create job %s: %w", j.Name, err)
	}
	now := r.now()
	next, _ := j.NextFire(now)
	defer r.forgetDependents()
	defer r.k.ForgetEventIndex()
	return r.store.CreateJob(ctx, ledger.Job{Name: j.Name, Version: 1, Spec: spec, NextFireAt: next, CreatedAt: now, UpdatedAt: now, Upstream: upstreamOf(j)})
}

// UpdateJob replaces a job's definition if its version is still expected.
// The schedule starts again from now.
func (r *Room) UpdateJob(ctx context.Context, j jobspec.Job, expected int64) (ledger.Job, error) {
	if err := r.k.CheckGroupLimits(ctx, j); err != nil {
		return ledger.Job{}, err
	}
	cur, err := r.store.GetJob(ctx, j.Name)
	if err != nil {
		return ledger.Job{}, err
	}
	if err := r.redefine(&cur, j); err != nil {
		return ledger.Job{}, err
	}
	defer r.forgetDependents()
	defer r.k.ForgetEventIndex()
	out, err := r.store.UpdateJob(ctx, cur, expected)
	if err == nil {
		r.k.ApplyLimit(ctx, j)
	}
	return out, err
}

// redefine puts j's definition into the stored job cur, its schedule
// starting from now.
func (r *Room) redefine(cur *ledger.Job, j jobspec.Job) error {
	spec, err := wire.Marshal(j)
	if err != nil {
		return fmt.Errorf("update job %s: %w", j.Name, err)
	}
	now := r.now()
	next, _ := j.NextFire(now)
	cur.Spec, cur.NextFireAt, cur.UpdatedAt, cur.Upstream = spec, next, now, upstreamOf(j)
	// The new definition's schedule starts from now: catch-up runs the old
	// one decided and had not started yet are dropped with it.
	cur.CatchupNext, cur.CatchupLast = time.Time{}, time.Time{}
	return nil
}

// upstreamOf names the jobs j's runs wait on: the store keeps an edge per
// upstream job, so a finished run finds its dependents in one Query.
func upstreamOf(j jobspec.Job) []string {
	var out []string
	for _, d := range j.DependsOnJobs {
		out = append(out, d.Job)
	}
	return out
}

// LoadJob reads a job and its definition.
func (r *Room) LoadJob(ctx context.Context, name string) (ledger.Job, jobspec.Job, error) {
	sj, err := r.store.GetJob(ctx, name)
	if err != nil {
		return ledger.Job{}, jobspec.Job{}, err
	}
	c, err := r.k.CompiledJob(sj.Spec)
	if err != nil {
		return sj, jobspec.Job{}, fmt.Errorf("load job %s: %w", name, err)
	}
	return sj, c.Job, nil
}

// GetJob reads a job as stored.
func (r *Room) GetJob(ctx context.Context, name string) (ledger.Job, error) {
	return r.store.GetJob(ctx, name)
}

// ListJobs lists jobs by name, a page at a time.
func (r *Room) ListJobs(ctx context.Context, limit int, token string) ([]ledger.Job, string, error) {
	return r.store.ListJobs(ctx, limit, token)
}

// PauseJob pauses a job: its schedule stops firing until the scheduler's
// ResumeJob.
func (r *Room) PauseJob(ctx context.Context, name string) (ledger.Job, error) {
	defer r.k.ForgetEventIndex()
	return r.store.SetJobPaused(ctx, name, true)
}

// DeleteJob deletes a job only when it has no unfinished run
// (ledger.ErrUnfinishedRuns otherwise), in the store's conditional writes:
// a run created meanwhile either is found, or its creating write fails.
func (r *Room) DeleteJob(ctx context.Context, name string) error {
	defer r.k.ForgetEventIndex()
	return r.store.DeleteJobIfIdle(ctx, name)
}
