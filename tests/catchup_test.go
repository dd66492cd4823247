package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/protocol"
)

// The catch-up of missed slots, end to end under an injected clock: the
// stack's own ticker (every 250 ms of real time) reads the frozen clock, so
// moving the clock is the ticker finding the slots late, or the job
// resumed after them.

// slotRun is what the catch-up tests read of a run.
type slotRun struct {
	LogicalTime string `json:"logical_time"`
	Trigger     string `json:"trigger"`
}

// slotRunsOf lists a job's runs, oldest slot first.
func (s *stack) slotRunsOf(job string) []slotRun {
	s.t.Helper()
	r := s.call("GET", "/v1/runs?job="+url.QueryEscape(job)+"&limit=500", nil).must(s.t, http.StatusOK)
	var l struct {
		Runs []slotRun `json:"runs"`
	}
	if err := json.Unmarshal(r.Raw, &l); err != nil {
		s.t.Fatal(err)
	}
	slices.SortFunc(l.Runs, func(a, b slotRun) int { return strings.Compare(a.LogicalTime, b.LogicalTime) })
	return l.Runs
}

// describeRuns is "time:trigger" per run.
func describeRuns(runs []slotRun) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.LogicalTime + ":" + r.Trigger
	}
	return out
}

// slotsOf are n slots step apart from first, each with trigger.
func slotsOf(first time.Time, step time.Duration, n int, trigger string) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = protocol.FormatTime(first.Add(time.Duration(i)*step)) + ":" + trigger
	}
	return out
}

// jobState is what the catch-up tests read of a job.
type jobState struct {
	Paused       bool    `json:"paused"`
	NextFireTime *string `json:"next_fire_time"`
	MissedSlots  int64   `json:"missed_slots"`
}

func (s *stack) jobState(name string) jobState {
	s.t.Helper()
	r := s.call("GET", "/v1/jobs/"+name, nil).must(s.t, http.StatusOK)
	var v struct {
		Job jobState `json:"job"`
	}
	if err := json.Unmarshal(r.Raw, &v); err != nil {
		s.t.Fatal(err)
	}
	return v.Job
}

// settleTicks waits for two more completed passes of the stack's own
// ticker: passes never overlap, so any that read the old clock is over.
func (s *stack) settleTicks() {
	s.t.Helper()
	before := s.Counters.Snapshot().Functions["ticker"].Invocations
	eventually(s.t, 30*time.Second, "ticker passes", func() (bool, string) {
		n := s.Counters.Snapshot().Functions["ticker"].Invocations
		return n >= before+2, fmt.Sprintf("%d invocations since %d", n, before)
	})
}

// Hourly jobs paused for 30 days, one per policy, resumed with
// `runledger jobs resume`: each answer has the schedule back on time and
// the skipped slots counted; latest ran the last hour, all the 24 hours of
// the default window (the rest created by the ticker), none nothing.
func TestCatchupPoliciesOnResume(t *testing.T) {
	// 30 days ago, five minutes past an hour: the resume lands near real
	// time.
	start := time.Now().UTC().Truncate(time.Hour).Add(-30*24*time.Hour + 5*time.Minute)
	clock := frozenAt(start)
	s := startStack(t, devstack.Options{Now: clock.Now})
	c := newCLI(t, s)
	policies := []string{"none", "latest", "all"}
	for _, p := range policies {
		s.createJob(map[string]any{
			"name": "hourly-" + p, "schedule": map[string]any{"cron": "0 * * * *", "catchup": p},
			// No worker serves the pool: the runs stay QUEUED.
			"timeouts": map[string]any{"queue": "1h"},
		})
		c.must(t, 0, "jobs", "pause", "hourly-"+p)
	}
	s.settleTicks()
	end := start.Add(30 * 24 * time.Hour)
	clock.Set(end)
	s.settleTicks()
	for _, p := range policies {
		if n := len(s.slotRunsOf("hourly-" + p)); n != 0 {
			t.Fatalf("hourly-%s: %d runs while paused", p, n)
		}
	}

	last := end.Truncate(time.Hour) // the last slot before the resume
	next := protocol.FormatTime(last.Add(time.Hour))
	want := map[string]struct {
		runs   []string
		missed int64
	}{
		"none":   {nil, 720},
		"latest": {slotsOf(last, time.Hour, 1, "catchup"), 719},
		"all":    {slotsOf(last.Add(-23*time.Hour), time.Hour, 24, "catchup"), 696},
	}
	for _, p := range policies {
		out := c.must(t, 0, "jobs", "resume", "hourly-"+p, "-o", "json")
		var answer struct {
			Job jobState `json:"job"`
		}
		if err := json.Unmarshal([]byte(out.stdout), &answer); err != nil {
			t.Fatalf("resume hourly-%s: %v\n%s", p, err, out)
		}
		got := answer.Job
		if got.Paused || got.NextFireTime == nil || *got.NextFireTime != next || got.MissedSlots != want[p].missed {
			t.Errorf("resume hourly-%s answered paused %v, next_fire_time %v (want %s), missed_slots %d (want %d)",
				p, got.Paused, got.NextFireTime, next, got.MissedSlots, want[p].missed)
		}
	}
	// The rest of the catch-up is the ticker's; then nothing more.
	eventually(t, 30*time.Second, "the catch-up runs of hourly-all", func() (bool, string) {
		n := len(s.slotRunsOf("hourly-all"))
		return n == 24, fmt.Sprintf("%d runs", n)
	})
	s.settleTicks()
	for _, p := range policies {
		if got := describeRuns(s.slotRunsOf("hourly-" + p)); !slices.Equal(got, want[p].runs) {
			t.Errorf("hourly-%s: runs %v\nwant %v", p, got, want[p].runs)
		}
		if j := s.jobState("hourly-" + p); j.NextFireTime == nil || *j.NextFireTime != next || j.MissedSlots != want[p].missed {
			t.Errorf("hourly-%s after the ticks: next_fire_time %v, missed_slots %d", p, j.NextFireTime, j.MissedSlots)
		}
	}
	// The CLI's list shows the count.
	if out := c.must(t, 0, "jobs", "list"); !strings.Contains(out.stdout, "MISSED") || !strings.Contains(out.stdout, "719") {
		t.Errorf("jobs list does not show missed slots:\n%s", out.stdout)
	}
}

// The ticker was down ten minutes (the clock jumps, nothing is paused):
// for every-minute jobs, the slots over a minute late are decided by each
// policy, the one still on time runs as scheduled, and each job is back on
// time at once.
func TestCatchupTickerDown(t *testing.T) {
	base := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	clock := frozenAt(base.Add(-30 * time.Second))
	s := startStack(t, devstack.Options{Now: clock.Now})
	policies := []string{"none", "latest", "all"}
	for _, p := range policies {
		s.createJob(map[string]any{
			"name": "minutely-" + p, "schedule": map[string]any{"cron": "* * * * *", "catchup": p},
			"timeouts": map[string]any{"queue": "1h"},
		})
	}
	clock.Set(base.Add(time.Second))
	for _, p := range policies {
		eventually(t, 30*time.Second, "the first slot's run", func() (bool, string) {
			n := len(s.slotRunsOf("minutely-" + p))
			return n == 1, fmt.Sprintf("minutely-%s: %d runs", p, n)
		})
	}
	s.settleTicks()

	// Down from base+1s to base+10m+1s. The stack's tick period is 250 ms,
	// so the threshold is 60 s: base+1m .. base+9m are missed, base+10m is
	// on time.
	clock.Set(base.Add(10*time.Minute + time.Second))
	next := protocol.FormatTime(base.Add(11 * time.Minute))
	for _, p := range policies {
		eventually(t, 30*time.Second, "back on time", func() (bool, string) {
			j := s.jobState("minutely-" + p)
			return j.NextFireTime != nil && *j.NextFireTime == next, fmt.Sprintf("minutely-%s: next_fire_time %v", p, j.NextFireTime)
		})
	}
	s.settleTicks()
	first := slotsOf(base, time.Minute, 1, "schedule")
	onTime := slotsOf(base.Add(10*time.Minute), time.Minute, 1, "schedule")
	want := map[string]struct {
		runs   []string
		missed int64
	}{
		"none":   {append(slices.Clone(first), onTime...), 9},
		"latest": {slices.Concat(first, slotsOf(base.Add(9*time.Minute), time.Minute, 1, "catchup"), onTime), 8},
		"all":    {slices.Concat(first, slotsOf(base.Add(time.Minute), time.Minute, 9, "catchup"), onTime), 0},
	}
	for _, p := range policies {
		if got := describeRuns(s.slotRunsOf("minutely-" + p)); !slices.Equal(got, want[p].runs) {
			t.Errorf("minutely-%s: runs %v\nwant %v", p, got, want[p].runs)
		}
		if j := s.jobState("minutely-" + p); j.MissedSlots != want[p].missed || j.NextFireTime == nil || *j.NextFireTime != next {
			t.Errorf("minutely-%s: missed_slots %d (want %d), next_fire_time %v", p, j.MissedSlots, want[p].missed, j.NextFireTime)
		}
	}
}
