package metricspage_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/runledger/runledger/shared/metricspage"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// parse scrapes the page from loopback and parses it as Prometheus does.
func parse(t *testing.T, m *metricspage.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	_, page := scrape(t, m.Handler(), "127.0.0.1:5555")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		t.Fatalf("the page does not parse: %v\n%s", err, page)
	}
	return fams
}

// sample finds the metric of fam whose labels are labels.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, fam string, labels map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[fam]
	if !ok {
		t.Fatalf("the page has no %s", fam)
	}
next:
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
				continue next
			}
		}
		return m
	}
	t.Fatalf("%s has no sample %v", fam, labels)
	return nil
}

// clock is an injected clock a test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// oldestAges reads the oldest-in-state gauge of every state it shows.
func oldestAges(t *testing.T, fams map[string]*dto.MetricFamily) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range fams["runledger_oldest_in_state_seconds"].GetMetric() {
		out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	return out
}

// TestOldestInStateFollowsARun: two instances go through their states on
// an injected clock; at each step the gauge shows, for every non-terminal
// state and no other, the age of the oldest instance in it by the page's
// clock, 0 for a state none is in, and forgets an instance once it ends.
func TestOldestInStateFollowsARun(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	m := metricspage.New(metricspage.WithClock(c.now))
	move := func(task string, from, to statemodel.InstanceState) {
		m.Moved(scheduler.Moved{Job: "j", Run: "r", Task: task, From: from, To: to, At: c.t, EventTime: c.t})
	}
	move("a", "", statemodel.StateCreated)
	move("b", "", statemodel.StateCreated)
	c.t = c.t.Add(5 * time.Second)
	move("a", statemodel.StateCreated, statemodel.StateQueued)
	c.t = c.t.Add(3 * time.Second)

	ages := oldestAges(t, parse(t, m))
	want := map[string]float64{"CREATED": 8, "SCHEDULED": 0, "QUEUED": 3, "RUNNING": 0, "UP_FOR_RETRY": 0, "LOST": 0, "CANCELLING": 0, "PAUSED": 0}
	if fmt.Sprint(ages) != fmt.Sprint(want) {
		t.Fatalf("oldest in state %v, want %v", ages, want)
	}
	move("a", statemodel.StateQueued, statemodel.StateRunning)
	move("b", statemodel.StateCreated, statemodel.StatePaused)
	c.t = c.t.Add(time.Minute)
	ages = oldestAges(t, parse(t, m))
	if ages["QUEUED"] != 0 || ages["CREATED"] != 0 || ages["RUNNING"] != 60 || ages["PAUSED"] != 60 {
		t.Fatalf("after a start and a pause: %v", ages)
	}
	move("a", statemodel.StateRunning, statemodel.StateSucceeded)
	if ages := oldestAges(t, parse(t, m)); ages["RUNNING"] != 0 || ages["PAUSED"] != 60 {
		t.Fatalf("after a's end: %v, want RUNNING 0 and b PAUSED 60", ages)
	}
}

// TestTransitionLagByEvent: each applied change with an event time is a
// sample of its event's lag, the worker's late report as late as it was.
func TestTransitionLagByEvent(t *testing.T) {
	m := metricspage.New()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	m.Moved(scheduler.Moved{Job: "j", Run: "r", Task: "a", To: statemodel.StateCreated, At: t0, Event: statemodel.EvCreated, EventTime: t0})
	m.Moved(scheduler.Moved{Job: "j", Run: "r", Task: "a", From: statemodel.StateRunning, To: statemodel.StateSucceeded,
		At: t0.Add(2500 * time.Millisecond), Event: statemodel.EvSucceeded, EventTime: t0})
	// A change without an event time (an observer that knows none) is no sample.
	m.Moved(scheduler.Moved{Job: "j", Run: "r", Task: "b", To: statemodel.StateCreated, At: t0, Event: statemodel.EvCreated})
	fams := parse(t, m)
	if h := sample(t, fams, "runledger_transition_lag_seconds", map[string]string{"event": string(statemodel.EvSucceeded)}).GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 2.5 {
		t.Errorf("succeeded lag: %d samples, sum %v; want 1 of 2.5 s", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := sample(t, fams, "runledger_transition_lag_seconds", map[string]string{"event": string(statemodel.EvCreated)}).GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0 {
		t.Errorf("created lag: %d samples, sum %v; want 1 of 0 s", h.GetSampleCount(), h.GetSampleSum())
	}
}

// TestCompletionDeviationSamples: a run end with a deviation is a sample
// under its job, negative ones included; one without is none.
func TestCompletionDeviationSamples(t *testing.T) {
	m := metricspage.New()
	m.RunEnded(scheduler.RunEnded{Job: "nightly", Run: "r1", State: statemodel.RunSucceeded, Duration: time.Minute})
	m.RunEnded(scheduler.RunEnded{Job: "nightly", Run: "r2", State: statemodel.RunSucceeded, Duration: 70 * time.Second, Deviation: 10 * time.Second, HasDeviation: true})
	m.RunEnded(scheduler.RunEnded{Job: "nightly", Run: "r3", State: statemodel.RunSucceeded, Duration: 40 * time.Second, Deviation: -25 * time.Second, HasDeviation: true})
	h := sample(t, parse(t, m), "runledger_completion_deviation_seconds", map[string]string{"job": "nightly"}).GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() != -15 {
		t.Errorf("deviation: %d samples, sum %v; want 2 summing to -15 s", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 0 && b.GetCumulativeCount() != 1 {
			t.Errorf("le=0 holds %d, want the one faster run", b.GetCumulativeCount())
		}
	}
}

// BenchmarkOldestInState is a scrape's cost with 100,000 live instances
// tracked: the oldest-in-state pass is linear in them.
func BenchmarkOldestInState(b *testing.B) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	m := metricspage.New(metricspage.WithClock(func() time.Time { return t0.Add(time.Hour) }))
	states := []statemodel.InstanceState{statemodel.StateCreated, statemodel.StateQueued, statemodel.StateRunning}
	for i := range 100_000 {
		m.Moved(scheduler.Moved{Job: "j", Run: fmt.Sprint("r", i), Task: "a", To: states[i%3], At: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	h := m.Handler()
	b.ResetTimer()
	for range b.N {
		scrape(b, h, "127.0.0.1:5555")
	}
}
