package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/store"
)

// CreateJob stores a new job at version 1, stamped with the store's clock,
// with its dependency edges.
func (s *Store) CreateJob(ctx context.Context, j store.Job) (store.Job, error) {
	op := opError("create job %s", j.Name)
	if err := checkJob(&j); err != nil {
		return store.Job{}, op(err)
	}
	if err := s.begin(ctx); err != nil {
		return store.Job{}, op(err)
	}
	defer s.mu.Unlock()
	if _, ok := s.jobs[j.Name]; ok {
		return store.Job{}, op(store.ErrAlreadyExists)
	}
	now := s.clock()
	j.Version, j.CreatedAt, j.UpdatedAt = 1, now, now
	s.putJob(store.Job{}, j)
	return cloneJob(j), nil
}

// checkJob refuses a job the DynamoDB store refuses before any I/O and
// normalises its upstream list.
func checkJob(j *store.Job) error {
	if err := store.CheckJobName(j.Name); err != nil {
		return err
	}
	if err := store.CheckUpstream(j); err != nil {
		return err
	}
	return tooLarge("job "+j.Name, len(j.Spec), store.MaxItemSize)
}

// putJob stores next over cur (zero: none) and moves the dependency edges
// from cur's upstream jobs to next's.
func (s *Store) putJob(cur, next store.Job) {
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
func (s *Store) GetJob(ctx context.Context, name string) (store.Job, error) {
	op := opError("get job %s", name)
	if err := s.enter(ctx, store.CheckJobName(name)); err != nil {
		return store.Job{}, op(err)
	}
	defer s.mu.Unlock()
	j, ok := s.jobs[name]
	if !ok {
		return store.Job{}, op(store.ErrNotFound)
	}
	return cloneJob(j), nil
}

// ListJobs lists jobs by name, limit per page (0: store.DefaultListLimit).
func (s *Store) ListJobs(ctx context.Context, limit int, token string) ([]store.Job, string, error) {
	op := opError("list jobs")
	after, err := decodeToken(token, "jobs")
	if err != nil {
		return nil, "", op(err)
	}
	if err := s.begin(ctx); err != nil {
		return nil, "", op(err)
	}
	defer s.mu.Unlock()
	jobs := slices.SortedFunc(func(yield func(store.Job) bool) {
		for _, j := range s.jobs {
			if !yield(j) {
				return
			}
		}
	}, func(a, b store.Job) int { return strings.Compare(a.Name, b.Name) })
	got, next := page(jobs, func(j store.Job) string { return j.Name }, ascending, "jobs", after, listLimit(limit))
	out := make([]store.Job, len(got))
	for i, j := range got {
		out[i] = cloneJob(j)
	}
	return out, next, nil
}

// UpdateJob replaces a job's spec, next fire and upstream jobs with a
// compare-and-set on its version; paused and the creation time stay.
func (s *Store) UpdateJob(ctx context.Context, j store.Job, expected int64) (store.Job, error) {
	op := opError("update job %s from version %d", j.Name, expected)
	if err := checkJob(&j); err != nil {
		return store.Job{}, op(err)
	}
	if err := s.begin(ctx); err != nil {
		return store.Job{}, op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.jobs[j.Name]
	switch {
	case !ok:
		return store.Job{}, op(store.ErrNotFound)
	case cur.Version != expected:
		return store.Job{}, op(fmt.Errorf("%w: stored version is %d", store.ErrVersionConflict, cur.Version))
	}
	next := cur
	next.Spec, next.NextFireAt, next.Upstream = j.Spec, j.NextFireAt, j.Upstream
	next.Version, next.UpdatedAt = expected+1, s.clock()
	s.putJob(cur, next)
	return cloneJob(next), nil
}

// SetJobPaused pauses or resumes a job (a paused job has no due timer);
// the version moves unless the flag is already as asked.
func (s *Store) SetJobPaused(ctx context.Context, name string, paused bool) (store.Job, error) {
	op := opError("set job %s paused=%t", name, paused)
	if err := s.enter(ctx, store.CheckJobName(name)); err != nil {
		return store.Job{}, op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.jobs[name]
	if !ok {
		return store.Job{}, op(store.ErrNotFound)
	}
	if cur.Paused == paused {
		return cloneJob(cur), nil
	}
	next := cur
	next.Paused, next.Version, next.UpdatedAt = paused, cur.Version+1, s.clock()
	s.putJob(cur, next)
	return cloneJob(next), nil
}

// SetNextFire moves a job's next fire from prev (zero: none) to next;
// store.ErrConflict when prev is not the stored one. The version stays.
func (s *Store) SetNextFire(ctx context.Context, name string, prev, next time.Time) (store.Job, error) {
	op := opError("set next fire of job %s from %s to %s", name, prev, next)
	if err := s.enter(ctx, store.CheckJobName(name)); err != nil {
		return store.Job{}, op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.jobs[name]
	if !ok {
		return store.Job{}, op(store.ErrNotFound)
	}
	if !cur.NextFireAt.Equal(prev) {
		return store.Job{}, op(store.ErrConflict)
	}
	cur.NextFireAt = next
	s.jobs[name] = cur
	return cloneJob(cur), nil
}

// DeleteJob deletes a job and its dependency edges; its runs stay.
func (s *Store) DeleteJob(ctx context.Context, name string) error {
	op := opError("delete job %s", name)
	if err := s.enter(ctx, store.CheckJobName(name)); err != nil {
		return op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.jobs[name]
	if !ok {
		return op(store.ErrNotFound)
	}
	for _, up := range cur.Upstream {
		delete(s.edges[up], name)
	}
	delete(s.jobs, name)
	return nil
}

// ListDependents lists the jobs that depend on job, by name.
func (s *Store) ListDependents(ctx context.Context, job string) ([]string, error) {
	op := opError("list dependents of job %s", job)
	if err := s.enter(ctx, store.CheckJobName(job)); err != nil {
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
