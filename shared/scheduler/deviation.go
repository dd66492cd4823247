package scheduler

import (
	"slices"
	"sync"
	"time"
)

// Bounds of the recent durations a process keeps for the completion
// deviation: each job's last RecentRunsPerJob succeeded runs, for at most
// RecentJobs jobs (the job that ended a run least recently is forgotten
// first). At the bounds that is 50,000 durations, under a megabyte.
const (
	RecentRunsPerJob = 50
	RecentJobs       = 1000
)

// recentDurations keeps, per job, the durations of the last succeeded runs
// this process ended: memory of one process only, so "recent" is the runs
// this process saw end (docs/api.md, "Metrics").
type recentDurations struct {
	mu    sync.Mutex
	jobs  map[string]*ring
	clock uint64 // counts ends, to find the job that ended a run least recently
}

// ring is one job's last durations, oldest overwritten first.
type ring struct {
	d    []time.Duration
	next int
	used uint64 // recentDurations.clock at the job's latest end
}

// deviation adds a succeeded run's duration to its job's recent ones and
// answers it minus the median of those before it; false when this
// process has seen none of the job's runs end yet.
func (r *recentDurations) deviation(job string, d time.Duration) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs == nil {
		r.jobs = map[string]*ring{}
	}
	r.clock++
	j, ok := r.jobs[job]
	if !ok {
		r.evict()
		j = &ring{}
		r.jobs[job] = j
	}
	j.used = r.clock
	median, had := j.median()
	j.add(d)
	if !had {
		return 0, false
	}
	return d - median, true
}

// evict forgets the least recently ended job when RecentJobs are kept: a
// linear pass, made only when a job not kept ends a run.
func (r *recentDurations) evict() {
	if len(r.jobs) < RecentJobs {
		return
	}
	var oldest string
	var at uint64
	for name, j := range r.jobs {
		if oldest == "" || j.used < at {
			oldest, at = name, j.used
		}
	}
	delete(r.jobs, oldest)
}

func (j *ring) add(d time.Duration) {
	if len(j.d) < RecentRunsPerJob {
		j.d = append(j.d, d)
		return
	}
	j.d[j.next] = d
	j.next = (j.next + 1) % RecentRunsPerJob
}

// median of the kept durations: the middle one, or the mean of the two
// middle ones of an even count.
func (j *ring) median() (time.Duration, bool) {
	n := len(j.d)
	if n == 0 {
		return 0, false
	}
	s := slices.Clone(j.d)
	slices.Sort(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}
