package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// CrossJob is what a run's depends_on_jobs say now.
type CrossJob struct {
	// Verdict is the run's root tasks' verdict on the upstream jobs' runs.
	Verdict statemodel.DepVerdict
	// TimedOut: the verdict is DepsWait and the run's dependency timeout,
	// counted from its creation, has passed.
	TimedOut bool
	// Waiting lists the upstream jobs' runs the run still waits for.
	Waiting []protocol.WaitingFor
}

// CrossJobVerdict decides a run's root tasks against its job's
// depends_on_jobs: each upstream job's run with the same logical time must
// be PUBLISHED (or SUCCEEDED, as required). No such run yet: wait; one that
// finished without meeting the requirement: upstream failed. It fails
// closed: a spec that cannot be read counts as not met, so the run waits
// until its dependency timeout (the default one) ends it.
func (r *Room) CrossJobVerdict(ctx context.Context, run ledger.Run) (CrossJob, error) {
	c, err := r.k.CompiledJob(run.Spec)
	if err != nil {
		r.log.WarnContext(ctx, "run spec unreadable: its job dependencies count as not met", "run_id", run.ID, "error", err.Error())
		return r.waitOrTimeOut(run, jobspec.DefaultDependencyTimeout, nil), nil
	}
	j := c.Job
	if len(j.DependsOnJobs) == 0 {
		return CrossJob{Verdict: statemodel.DepsMet}, nil
	}
	var waiting []protocol.WaitingFor
	for _, dep := range j.DependsOnJobs {
		w, failed, err := r.upstream(ctx, run, dep)
		switch {
		case err != nil:
			return CrossJob{Verdict: statemodel.DepsWait}, err
		case failed:
			return CrossJob{Verdict: statemodel.DepsUpstreamFailed}, nil
		case w != nil:
			waiting = append(waiting, *w)
		}
	}
	if len(waiting) == 0 {
		return CrossJob{Verdict: statemodel.DepsMet}, nil
	}
	return r.waitOrTimeOut(run, j.DependencyTimeout(), waiting), nil
}

// upstream judges one of run's job dependencies by the upstream job's run
// of the same logical time: what the run waits for (nil: met), or failed
// when that run finished without meeting the requirement.
func (r *Room) upstream(ctx context.Context, run ledger.Run, dep jobspec.JobDependency) (*protocol.WaitingFor, bool, error) {
	up, found, err := r.k.RunAt(ctx, dep.Job, run.LogicalTime)
	if err != nil {
		return nil, false, err
	}
	w := protocol.WaitingFor{Job: dep.Job, LogicalTime: run.LogicalTime, Require: dep.Require}
	if !found {
		return &w, false, nil
	}
	if statemodel.DependencySatisfied(dep.Require, up.ExecutionState, up.PublicationState) {
		return nil, false, nil
	}
	pubOpen := up.PublicationState == statemodel.PublicationPending
	if up.ExecutionState.Terminal() && !pubOpen {
		return nil, true, nil
	}
	w.Run = up.ID
	return &w, false, nil
}

func (r *Room) waitOrTimeOut(run ledger.Run, timeout time.Duration, waiting []protocol.WaitingFor) CrossJob {
	return CrossJob{Verdict: statemodel.DepsWait, Waiting: waiting, TimedOut: !r.now().Before(dependencyTimeoutAt(run, timeout))}
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

// ArmDependencyTimeout sends a delay message for the run's dependency
// timeout when a root task of the new run view still waits on other jobs,
// so that the timeout fires on time rather than at the next scan of the
// timers (the run's timer is there too, for a lost message or a timeout
// beyond SQS's longest delay).
func (r *Room) ArmDependencyTimeout(ctx context.Context, view ledger.RunView) {
	if view.Run.DependencyTimeoutAt.IsZero() || view.Run.ExecutionState.Terminal() {
		return
	}
	if heldRoot(view) {
		r.k.ArmTimer(ctx, ledger.InstanceKey{Run: view.Run.ID}, view.Run.DependencyTimeoutAt)
	}
}

// heldRoot reports whether a root task of view is still CREATED: held by
// the run's job dependencies.
func heldRoot(view ledger.RunView) bool {
	for _, t := range view.Tasks {
		if len(t.Instance.DependsOn) == 0 && t.Instance.Snapshot.State == statemodel.StateCreated {
			return true
		}
	}
	return false
}

// WaitingFor lists what a run waits for among its job dependencies: nil
// unless the run is unfinished and a root task is still CREATED.
func (r *Room) WaitingFor(ctx context.Context, view ledger.RunView) ([]protocol.WaitingFor, error) {
	if view.Run.ExecutionState.Terminal() || !heldRoot(view) {
		return nil, nil
	}
	c, err := r.CrossJobVerdict(ctx, view.Run)
	if err != nil || c.Verdict != statemodel.DepsWait {
		return nil, err
	}
	return c.Waiting, nil
}

// Dependents lists the runs of other jobs that wait on run (same logical
// time), for the kernel to advance at once instead of leaving them to
// their re-evaluation timer. It reads the finished run's dependency edges
// and each dependent job's unfinished runs: its cost follows the
// dependents and their live runs, not how many jobs are defined.
func (r *Room) Dependents(ctx context.Context, run ledger.Run) ([]string, error) {
	jobs, err := r.dependentJobs(ctx, run.Job)
	if err != nil {
		return nil, fmt.Errorf("wake dependents of run %s: %w", run.ID, err)
	}
	var out []string
	for _, job := range jobs {
		live, err := r.store.ListUnfinishedRuns(ctx, job)
		if err != nil {
			r.log.WarnContext(ctx, "wake dependents", "run_id", run.ID, "job", job, "error", err.Error())
			continue
		}
		for _, down := range live {
			if down.LogicalTime.Equal(run.LogicalTime) {
				out = append(out, down.ID)
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
// (timeouts.deps_recheck) instead. Job writes through this room forget
// the cache at once.
const dependentsTTL = 30 * time.Second

type dependentsEntry struct {
	jobs []string
	read time.Time
}

// dependentJobs lists the jobs that depend on job, from the cache when it
// was read within dependentsTTL.
func (r *Room) dependentJobs(ctx context.Context, job string) ([]string, error) {
	now := time.Now() // an operational bound on real time, not domain time
	r.depsMu.Lock()
	e, ok := r.deps[job]
	r.depsMu.Unlock()
	if ok && now.Sub(e.read) < dependentsTTL {
		return e.jobs, nil
	}
	jobs, err := r.store.ListDependents(ctx, job)
	if err != nil {
		return nil, err
	}
	r.depsMu.Lock()
	if r.deps == nil {
		r.deps = map[string]dependentsEntry{}
	}
	r.deps[job] = dependentsEntry{jobs: jobs, read: now}
	r.depsMu.Unlock()
	return jobs, nil
}

// forgetDependents drops the cached dependency edges: a job was written.
func (r *Room) forgetDependents() {
	r.depsMu.Lock()
	r.deps = nil
	r.depsMu.Unlock()
}
