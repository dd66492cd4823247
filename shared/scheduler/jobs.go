package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// PoolNames lists the configured pools (jobs naming others are refused).
func (s *Service) PoolNames() []string {
	out := make([]string, 0, len(s.cfg.Pools))
	for p := range s.cfg.Pools {
		out = append(out, p)
	}
	return out
}

// ParseOptions are the options a definition is validated against now.
func (s *Service) ParseOptions() jobspec.Options {
	return jobspec.Options{Pools: s.PoolNames(), Allowed: s.cfg.Allowed, Now: s.now()}
}

// CreateJob stores a new job with its first fire time.
func (s *Service) CreateJob(ctx context.Context, j jobspec.Job) (ledger.Job, error) {
	if err := s.checkGroupLimits(ctx, j); err != nil {
		return ledger.Job{}, err
	}
	spec, err := wire.Marshal(j)
	if err != nil {
		return ledger.Job{}, fmt.Errorf("create job %s: %w", j.Name, err)
	}
	now := s.now()
	next, _ := j.NextFire(now)
	defer s.forgetDependents()
	defer s.forgetEventIndex()
	return s.store.CreateJob(ctx, ledger.Job{Name: j.Name, Version: 1, Spec: spec, NextFireAt: next, CreatedAt: now, UpdatedAt: now, Upstream: upstreamOf(j)})
}

// UpdateJob replaces a job's definition if its version is still expected.
// The schedule starts again from now.
func (s *Service) UpdateJob(ctx context.Context, j jobspec.Job, expected int64) (ledger.Job, error) {
	if err := s.checkGroupLimits(ctx, j); err != nil {
		return ledger.Job{}, err
	}
	cur, err := s.store.GetJob(ctx, j.Name)
	if err != nil {
		return ledger.Job{}, err
	}
	spec, err := wire.Marshal(j)
	if err != nil {
		return ledger.Job{}, fmt.Errorf("update job %s: %w", j.Name, err)
	}
	now := s.now()
	next, _ := j.NextFire(now)
	cur.Spec, cur.NextFireAt, cur.UpdatedAt, cur.Upstream = spec, next, now, upstreamOf(j)
	// The new definition's schedule starts from now: catch-up runs the old
	// one decided and had not started yet are dropped with it.
	cur.CatchupNext, cur.CatchupLast = time.Time{}, time.Time{}
	defer s.forgetDependents()
	defer s.forgetEventIndex()
	out, err := s.store.UpdateJob(ctx, cur, expected)
	if err == nil {
		s.applyLimit(ctx, j)
	}
	return out, err
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
func (s *Service) LoadJob(ctx context.Context, name string) (ledger.Job, jobspec.Job, error) {
	sj, err := s.store.GetJob(ctx, name)
	if err != nil {
		return ledger.Job{}, jobspec.Job{}, err
	}
	c, err := s.compiled.of(sj.Spec)
	if err != nil {
		return sj, jobspec.Job{}, fmt.Errorf("load job %s: %w", name, err)
	}
	return sj, c.Job, nil
}

// newRunEffects are what moves a new run of j on. When its root tasks
// wait on other jobs' runs, advance decides them and yields their
// dispatches, and after those the run's dependency timeout is armed if a
// root task still waits. A run of a limited job enters its limiters and,
// admitted, dispatches its roots (admitNewRun). Otherwise each task
// created SCHEDULED is dispatched from the view the creating write
// returned; a dispatch that fails leaves its task SCHEDULED, and the
// task's timer tries again.
func newRunEffects(view ledger.RunView, j jobspec.Job) []effect {
	run := view.Run
	switch {
	case len(j.DependsOnJobs) > 0:
		return []effect{{kind: effAdvanceRun, runID: run.ID, armDeps: true}}
	case j.Limited():
		return []effect{{kind: effAdmitNewRun, runID: run.ID, view: &view}}
	}
	var effs []effect
	for i, t := range view.Tasks {
		if t.Instance.Snapshot.State != statemodel.StateScheduled {
			continue
		}
		effs = append(effs, effect{kind: effDispatch, key: t.Instance.Key, inst: t.Instance, run: &run, runID: run.ID, task: i})
	}
	return effs
}

// executorJSON is how an instance keeps its task's executor: nil for the
// pool's queue, so queue tasks' items carry nothing more.
func executorJSON(e jobspec.Executor) []byte {
	if e.IsQueue() {
		return nil
	}
	b, _ := wire.Marshal(e) // plain strings: cannot fail
	return b
}

// cancelUnfinished cancels the job's unfinished runs of slots before at,
// backfill runs excepted. A
// run of the slot at itself is left alone: a ticker racing this one may
// have created it already. It reads the live index, so its cost follows
// the job's unfinished runs, not the runs it finished before.
func (s *Service) cancelUnfinished(ctx context.Context, job string, at time.Time) error {
	runs, err := s.store.ListUnfinishedRuns(ctx, job)
	if err != nil {
		return err
	}
	for _, r := range runs {
		// The overlap policy does not govern backfill runs: max_active does.
		if r.LogicalTime.Before(at) && r.Trigger != statemodel.TriggerBackfill {
			if err := s.CancelRun(ctx, r.ID, "overlap: cancel_previous"); err != nil && !errors.Is(err, statemodel.ErrIllegalTransition) {
				return err
			}
		}
	}
	return nil
}

// maxDependencyScan bounds how many of an upstream job's newest runs are
// searched for the run with the same logical time.
const maxDependencyScan = 500

// crossJob is what a run's depends_on_jobs say now.
type crossJob struct {
	Verdict statemodel.DepVerdict
	// TimedOut: the verdict is DepsWait and the run's dependency timeout,
	// counted from its creation, has passed.
	TimedOut bool
	Waiting  []protocol.WaitingFor
}

// crossJobVerdict decides a run's root tasks against its job's
// depends_on_jobs: each upstream job's run with the same logical time must
// be PUBLISHED (or SUCCEEDED, as required). No such run yet: wait; one that
// finished without meeting the requirement: upstream failed. It fails
// closed: a spec that cannot be read counts as not met, so the run waits
// until its dependency timeout (the default one) ends it.
func (s *Service) crossJobVerdict(ctx context.Context, run ledger.Run) (crossJob, error) {
	c, err := s.compiled.of(run.Spec)
	if err != nil {
		s.log.WarnContext(ctx, "run spec unreadable: its job dependencies count as not met", "run_id", run.ID, "error", err.Error())
		return s.waitOrTimeOut(run, jobspec.DefaultDependencyTimeout, nil), nil
	}
	j := c.Job
	if len(j.DependsOnJobs) == 0 {
		return crossJob{Verdict: statemodel.DepsMet}, nil
	}
	var waiting []protocol.WaitingFor
	for _, dep := range j.DependsOnJobs {
		up, found, err := s.runAt(ctx, dep.Job, run.LogicalTime)
		if err != nil {
			return crossJob{Verdict: statemodel.DepsWait}, err
		}
		w := protocol.WaitingFor{Job: dep.Job, LogicalTime: run.LogicalTime, Require: dep.Require}
		if !found {
			waiting = append(waiting, w)
			continue
		}
		if statemodel.DependencySatisfied(dep.Require, up.ExecutionState, up.PublicationState) {
			continue
		}
		pubOpen := up.PublicationState == statemodel.PublicationPending
		if up.ExecutionState.Terminal() && !pubOpen {
			return crossJob{Verdict: statemodel.DepsUpstreamFailed}, nil
		}
		w.Run = up.ID
		waiting = append(waiting, w)
	}
	if len(waiting) == 0 {
		return crossJob{Verdict: statemodel.DepsMet}, nil
	}
	return s.waitOrTimeOut(run, j.DependencyTimeout(), waiting), nil
}

func (s *Service) waitOrTimeOut(run ledger.Run, timeout time.Duration, waiting []protocol.WaitingFor) crossJob {
	return crossJob{Verdict: statemodel.DepsWait, Waiting: waiting, TimedOut: !s.now().Before(dependencyTimeoutAt(run, timeout))}
}

// dependencyTimeoutAt is when run's tasks still waiting on other jobs
// end: the time stored at its creation (the one its timer falls due at),
// or, for a run stored before runs kept it, its creation plus timeout.
func dependencyTimeoutAt(run ledger.Run, timeout time.Duration) time.Time {
	if !run.DependencyTimeoutAt.IsZero() {
		return run.DependencyTimeoutAt
	}
	return run.CreatedAt.Add(timeout)
}

// armDependencyTimeout sends a delay message for the run's dependency
// timeout when a root task of the new run view still waits on other jobs,
// so that the timeout fires on time rather than at the next scan of the
// timers (the run's timer is there too, for a lost message or a timeout
// beyond SQS's longest delay).
func (s *Service) armDependencyTimeout(ctx context.Context, view ledger.RunView) {
	if view.Run.DependencyTimeoutAt.IsZero() || view.Run.ExecutionState.Terminal() {
		return
	}
	for _, t := range view.Tasks {
		if len(t.Instance.DependsOn) == 0 && t.Instance.Snapshot.State == statemodel.StateCreated {
			s.armTimer(ctx, ledger.InstanceKey{Run: view.Run.ID}, view.Run.DependencyTimeoutAt)
			return
		}
	}
}

// WaitingFor lists what a run waits for among its job dependencies: nil
// unless the run is unfinished and a root task is still CREATED.
func (s *Service) WaitingFor(ctx context.Context, view ledger.RunView) ([]protocol.WaitingFor, error) {
	if view.Run.ExecutionState.Terminal() {
		return nil, nil
	}
	held := false
	for _, t := range view.Tasks {
		if len(t.Instance.DependsOn) == 0 && t.Instance.Snapshot.State == statemodel.StateCreated {
			held = true
			break
		}
	}
	if !held {
		return nil, nil
	}
	c, err := s.crossJobVerdict(ctx, view.Run)
	if err != nil || c.Verdict != statemodel.DepsWait {
		return nil, err
	}
	return c.Waiting, nil
}

// dependents yields the advance, at once, of the runs of other jobs that
// wait on run (same logical time), instead of leaving them to their
// re-evaluation timer. It reads the finished run's dependency edges and
// each dependent job's unfinished runs: its cost follows the dependents
// and their live runs, not how many jobs are defined.
func (s *Service) dependents(ctx context.Context, run ledger.Run) ([]effect, error) {
	jobs, err := s.dependentJobs(ctx, run.Job)
	if err != nil {
		return nil, fmt.Errorf("wake dependents of run %s: %w", run.ID, err)
	}
	var out []effect
	for _, job := range jobs {
		live, err := s.store.ListUnfinishedRuns(ctx, job)
		if err != nil {
			s.log.WarnContext(ctx, "wake dependents", "run_id", run.ID, "job", job, "error", err.Error())
			continue
		}
		for _, down := range live {
			if down.LogicalTime.Equal(run.LogicalTime) {
				out = append(out, effect{kind: effAdvanceRun, runID: down.ID})
			}
		}
	}
	return out, nil
}

// dependentsTTL is how long a process trusts the dependency edges it read
// for a job. Most jobs have no dependents, and a finish would pay a Query
// to learn so; within the TTL it pays nothing. A job defined meanwhile in
// another process (another Lambda instance) is missed by that wake only:
// its waiting run is advanced by its own recheck timer
// (timeouts.deps_recheck) instead. Job writes through this service forget
// the cache at once.
const dependentsTTL = 30 * time.Second

type dependentsEntry struct {
	jobs []string
	read time.Time
}

// dependentJobs lists the jobs that depend on job, from the cache when it
// was read within dependentsTTL.
func (s *Service) dependentJobs(ctx context.Context, job string) ([]string, error) {
	now := time.Now() // an operational bound on real time, not domain time
	s.depsMu.Lock()
	e, ok := s.deps[job]
	s.depsMu.Unlock()
	if ok && now.Sub(e.read) < dependentsTTL {
		return e.jobs, nil
	}
	jobs, err := s.store.ListDependents(ctx, job)
	if err != nil {
		return nil, err
	}
	s.depsMu.Lock()
	if s.deps == nil {
		s.deps = map[string]dependentsEntry{}
	}
	s.deps[job] = dependentsEntry{jobs: jobs, read: now}
	s.depsMu.Unlock()
	return jobs, nil
}

// forgetDependents drops the cached dependency edges: a job was written.
func (s *Service) forgetDependents() {
	s.depsMu.Lock()
	s.deps = nil
	s.depsMu.Unlock()
}
