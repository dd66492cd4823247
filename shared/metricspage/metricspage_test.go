package metricspage_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/metricspage"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

func scrape(t testing.TB, h http.Handler, remote string) (int, string) {
	t.Helper()
	req := httptest.NewRequest("GET", metricspage.Path, nil)
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// TestPageCountsTransitions: one instance's life is counted by job, from
// and to; the time in each state it was seen to enter is a histogram
// sample; the instances gauge follows; callers off loopback get 404.
func TestPageCountsTransitions(t *testing.T) {
	m := metricspage.New()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	steps := []struct {
		from, to statemodel.InstanceState
		after    time.Duration
	}{
		{"", statemodel.StateCreated, 0},
		{statemodel.StateCreated, statemodel.StateScheduled, 0},
		{statemodel.StateScheduled, statemodel.StateQueued, 10 * time.Millisecond},
		{statemodel.StateQueued, statemodel.StateRunning, 2 * time.Second},
		{statemodel.StateRunning, statemodel.StateFailed, 3 * time.Second},
	}
	at := t0
	for _, s := range steps {
		at = at.Add(s.after)
		m.Moved(scheduler.Moved{Job: "nightly", Run: "r1", Task: "load", From: s.from, To: s.to, At: at})
	}
	m.Moved(scheduler.Moved{Job: "nightly", Run: "r2", Task: "load", To: statemodel.StateCreated, At: at})
	code, page := scrape(t, m.Handler(), "127.0.0.1:5555")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	for _, want := range []string{
		`runledger_state_transitions_total{from="",job="nightly",to="CREATED"} 2`,
		`runledger_state_transitions_total{from="RUNNING",job="nightly",to="FAILED"} 1`,
		`runledger_state_duration_seconds_count{job="nightly",state="QUEUED"} 1`,
		`runledger_state_duration_seconds_sum{job="nightly",state="QUEUED"} 2`,
		`runledger_state_duration_seconds_sum{job="nightly",state="RUNNING"} 3`,
		`runledger_instances{state="CREATED"} 1`,
		`runledger_instances{state="RUNNING"} 0`,
		`runledger_instances{state="FAILED"} 1`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("the page lacks %s:\n%s", want, page)
		}
	}
	if code, _ := scrape(t, m.Handler(), "10.1.2.3"); code != http.StatusNotFound {
		t.Errorf("a caller off loopback: %d, want 404", code)
	}
	if code, _ := scrape(t, m.Handler(), "::1"); code != http.StatusOK {
		t.Errorf("IPv6 loopback: %d, want 200", code)
	}
}

// TestInstancesNeverBelowZero: after a restart on a kept table the page
// sees instances leave states it never saw them enter; they are counted
// in where they go, never out of where they were.
func TestInstancesNeverBelowZero(t *testing.T) {
	m := metricspage.New()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	// Created before this process started: first seen leaving RUNNING.
	m.Moved(scheduler.Moved{Job: "j", Run: "old", Task: "a", From: statemodel.StateRunning, To: statemodel.StateFailed, At: at})
	// And an older FAILED one cleared by an operator.
	m.Moved(scheduler.Moved{Job: "j", Run: "older", Task: "b", From: statemodel.StateUpstreamFailed, To: statemodel.StateCreated, At: at})
	// An override out of the FAILED state this process counted.
	m.Moved(scheduler.Moved{Job: "j", Run: "old", Task: "a", From: statemodel.StateFailed, To: statemodel.StateSucceeded, At: at})
	_, page := scrape(t, m.Handler(), "127.0.0.1:5555")
	for _, want := range []string{
		`runledger_instances{state="FAILED"} 0`,
		`runledger_instances{state="SUCCEEDED"} 1`,
		`runledger_instances{state="CREATED"} 1`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "runledger_instances{") && strings.Contains(line, "} -") {
			t.Errorf("a gauge went below zero: %s", line)
		}
	}
}
