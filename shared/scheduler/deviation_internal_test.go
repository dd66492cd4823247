package scheduler

import (
	"fmt"
	"testing"
	"time"
)

// TestDeviationAgainstRecentMedian: the first run of a job has nothing to
// compare with; later ones are measured against the median of the ones
// before them, over the last RecentRunsPerJob only.
func TestDeviationAgainstRecentMedian(t *testing.T) {
	var r recentDurations
	if _, ok := r.deviation("j", 10*time.Second); ok {
		t.Fatal("the first run of a job has a deviation")
	}
	r.deviation("j", 30*time.Second)
	// Kept: 10 s, 30 s: median 20 s.
	if d, ok := r.deviation("j", 25*time.Second); !ok || d != 5*time.Second {
		t.Errorf("deviation = %v, %v; want 5s", d, ok)
	}
	// Kept: 10, 30, 25: median 25 s.
	if d, _ := r.deviation("j", 20*time.Second); d != -5*time.Second {
		t.Errorf("deviation = %v; want -5s", d)
	}
	// Fill the ring with 1 s runs: the early ones fall out.
	for range RecentRunsPerJob {
		r.deviation("j", time.Second)
	}
	if d, _ := r.deviation("j", 3*time.Second); d != 2*time.Second {
		t.Errorf("after a ring of 1 s runs: deviation = %v; want 2s", d)
	}
	if n := len(r.jobs["j"].d); n != RecentRunsPerJob {
		t.Errorf("kept %d durations, want %d", n, RecentRunsPerJob)
	}
}

// TestDeviationForgetsLeastRecentJob: at RecentJobs jobs, a new job
// forgets the one that ended a run least recently, never a busy one.
func TestDeviationForgetsLeastRecentJob(t *testing.T) {
	var r recentDurations
	for i := range RecentJobs {
		r.deviation(fmt.Sprintf("job%d", i), time.Second)
	}
	r.deviation("job0", time.Second) // job0 is now the most recent
	r.deviation("new", time.Second)
	if len(r.jobs) != RecentJobs {
		t.Fatalf("%d jobs kept, want %d", len(r.jobs), RecentJobs)
	}
	if _, ok := r.jobs["job1"]; ok {
		t.Error("job1, the least recent, is still kept")
	}
	if _, ok := r.jobs["job0"]; !ok {
		t.Error("job0 was forgotten although it ended a run recently")
	}
}
