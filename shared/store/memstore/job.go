package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/runledger/runledger/shared/ledger"
)

// CreateJob stores a new job at version 1, stamped with the store's clock,
// with its dependency edges.
func (s *jobs) CreateJob(ctx context.Context, j ledger.Job) (ledger.Job, error) {
	op := opError("create job %s", j.Name)
	if err := checkJob(&j); err != nil {
		return ledger.Job{}, op(err)
	}
	if err := s.begin(ctx); err != nil {
		return ledger.Job{}, op(err)
	}
	defer s.mu.Unlock()
	if _, ok := s.jobs[j.Name]; ok {
		return ledger.Job{}, op(ledger.ErrAlreadyExists)
	}
	now := s.clock()
	j.Version, j.CreatedAt, j.UpdatedAt = 1, now, now
	s.putJob(ledger.Job{}, j)
	return cloneJob(j), nil
}

// checkJob refuses a job the DynamoDB store refuses before any I/O and
// normalises its upstream list.
func checkJob(j *ledger.Job) error {
	if err := ledger.CheckJobName(j.Name); err != nil {
		return err
	}
	if err := ledger.CheckUpstream(j); err != nil {
		return err
	}
	return tooLarge("job "+j.Name, len(j.Spec), ledger.MaxItemSize)
}

// putJob stores next over cur (zero: none) and moves the dependency edges
// from cur's upstream jobs to next's.
func (s *jobs) putJob(cur, next ledger.Job) {
	for _, up := range cur.Upstream {
		delete(s.edges[up], cur.Name)
	}
	for _, up := range next.Upstream {
		if s.edges[up] == nil {
			s.edges[up] = map[string]bool{}
		}
		s.edges[up][next.Name] = true
	}
	s.jobs[next.Name] = cloneJob(next)
}

// GetJob reads a job.
func (s *jobs) GetJob(ctx context.Context, name string) (ledger.Job, error) {
	op := opError("get job %s", name)
	if err := s.enter(ctx, ledger.CheckJobName(name)); err != nil {
		return ledger.Job{}, op(err)
	}
	defer s.mu.Unlock()
	j, ok := s.jobs[name]
	if !ok {
		return ledger.Job{}, op(ledger.ErrNotFound)
	}
	return cloneJob(j), nil
}

// ListJobs lists jobs by name, limit per page (0: ledger.DefaultListLimit).
func (s *jobs) ListJobs(ctx context.Context, limit int, token string) ([]ledger.Job, string, error) {
	op := opError("list jobs")
	after, err := decodeToken(token, "jobs")
	if err != nil {
		return nil, "", op(err)
	}
	if err := s.begin(ctx); err != nil {
		return nil, "", op(err)
	}
	defer s.mu.Unlock()
	jobs := slices.SortedFunc(func(yield func(ledger.Job) bool) {
		for _, j := range s.jobs {
			if !yield(j) {
				return
			}
		}
	}, func(a, b ledger.Job) int { return strings.Compare(a.Name, b.Name) })
	got, next := page(jobs, func(j ledger.Job) string { return j.Name }, ascending, "jobs", after, listLimit(limit))
	out := make([]ledger.Job, len(got))
	for i, j := range got {
		out[i] = cloneJob(j)
	}
	return out, next, nil
}

// UpdateJob replaces a job's spec, schedule position and upstream jobs
// with a compare-and-set on its version; paused, the missed slots and the
// creation time stay.
func (s *jobs) UpdateJob(ctx context.Context, j ledger.Job, expected int64) (ledger.Job, error) {
	op := opError("update job %s from version %d", j.Name, expected)
	if err := checkJob(&j); err != nil {
		return ledger.Job{}, op(err)
	}
	if err := s.begin(ctx); err != nil {
		return ledger.Job{}, op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.jobs[j.Name]
	switch {
	case !ok:
		return ledger.Job{}, op(ledger.ErrNotFound)
	case cur.Version != expected:
		return ledger.Job{}, op(fmt.Errorf("%w: stored version is %d", ledger.ErrVersionConflict, cur.Version))
	}
	next := cur
	next.Spec, next.NextFireAt, next.CatchupNext, next.CatchupLast, next.Upstream = j.Spec, j.NextFireAt, j.CatchupNext, j.CatchupLast, j.Upstream
	next.Version, next.UpdatedAt = expected+1, s.clock()
	s.putJob(cur, next)
	return cloneJob(next), nil
}

// SetJobPaused pauses or resumes a job (a paused job has no due timer);
// the version moves unless the flag is already as asked.
func (s *jobs) SetJobPaused(ctx context.Context, name string, paused bool) (ledger.Job, error) {
	op := opError("set job %s paused=%t", name, paused)
	if err := s.enter(ctx, ledger.CheckJobName(name)); err != nil {
		return ledger.Job{}, op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.jobs[name]
	if !ok {
		return ledger.Job{}, op(ledger.ErrNotFound)
	}
	if cur.Paused == paused {
		return cloneJob(cur), nil
	}
	next := cur
	next.Paused, next.Version, next.UpdatedAt = paused, cur.Version+1, s.clock()
	s.putJob(cur, next)
	return cloneJob(next), nil
}

// MoveSchedule moves a running job's schedule from m.From to m.To and adds
// m.Missed to its missed slots; ledger.ErrConflict unless the job is at
// m.Version, not paused, and at m.From. The version stays.
func (s *jobs) MoveSchedule(ctx context.Context, name string, m ledger.ScheduleMove) (ledger.Job, error) {
	op := opError("move schedule of job %s from %s to %s", name, m.From.NextFireAt, m.To.NextFireAt)
	j, err := s.writePosition(ctx, name, m, false)
	if err != nil {
		return ledger.Job{}, op(err)
	}
	return j, nil
}

// ResumeJob resumes a paused job and moves its schedule as m says;
// ledger.ErrConflict unless the job is paused, at m.Version and at m.From.
// The version moves to m.Version+1.
func (s *jobs) ResumeJob(ctx context.Context, name string, m ledger.ScheduleMove) (ledger.Job, error) {
	op := opError("resume job %s from version %d", name, m.Version)
	j, err := s.writePosition(ctx, name, m, true)
	if err != nil {
		return ledger.Job{}, op(err)
	}
	return j, nil
}

// writePosition writes m.To over m.From on a job whose paused flag is
// paused; a paused job is resumed by it.
func (s *jobs) writePosition(ctx context.Context, name string, m ledger.ScheduleMove, paused bool) (ledger.Job, error) {
	if m.Missed < 0 {
		return ledger.Job{}, fmt.Errorf("%w: %d missed slots", ledger.ErrInvalidInput, m.Missed)
	}
	if err := s.enter(ctx, ledger.CheckJobName(name)); err != nil {
		return ledger.Job{}, err
	}
	defer s.mu.Unlock()
	cur, ok := s.jobs[name]
	if !ok || cur.Version != m.Version || cur.Paused != paused || !samePosition(cur.Position(), m.From) {
		return ledger.Job{}, ledger.ErrConflict
	}
	next := cur
	next.NextFireAt, next.CatchupNext, next.CatchupLast = m.To.NextFireAt, m.To.CatchupNext, m.To.CatchupLast
	next.MissedSlots += m.Missed
	if paused {
		next.Paused, next.Version, next.UpdatedAt = false, cur.Version+1, s.clock()
	}
	s.jobs[name] = next
	return cloneJob(next), nil
}

func samePosition(a, b ledger.SchedulePosition) bool {
	return a.NextFireAt.Equal(b.NextFireAt) && a.CatchupNext.Equal(b.CatchupNext) && a.CatchupLast.Equal(b.CatchupLast)
}

// ListDependents lists the jobs that depend on job, by name.
func (s *jobs) ListDependents(ctx context.Context, job string) ([]string, error) {
	op := opError("list dependents of job %s", job)
	if err := s.enter(ctx, ledger.CheckJobName(job)); err != nil {
		return nil, op(err)
	}
	defer s.mu.Unlock()
	var out []string
	for down := range s.edges[job] {
		out = append(out, down)
	}
	slices.Sort(out)
	return out, nil
}

// DeleteJobIfIdle deletes a job only when it has no unfinished run
// (ledger.ErrUnfinishedRuns otherwise): the check and the delete are one
// step under the store's lock, as the conditional writes of the DynamoDB
// store make them one.
func (s *jobs) DeleteJobIfIdle(ctx context.Context, name string) error {
	op := opError("delete job %s", name)
	if err := s.enter(ctx, ledger.CheckJobName(name)); err != nil {
		return op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.jobs[name]
	if !ok {
		return op(ledger.ErrNotFound)
	}
	if len(s.unfinished(name)) > 0 {
		return op(fmt.Errorf("%w: job %s", ledger.ErrUnfinishedRuns, name))
	}
	for _, up := range cur.Upstream {
		delete(s.edges[up], name)
	}
	delete(s.jobs, name)
	return nil
}
