package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/protocol"
)

// Dependencies between jobs through the API: a manual run of a dependent
// job needs an explicit logical_time (422 otherwise, nothing written);
// while it waits, the run answer carries waiting_for; past its
// timeouts.dependency its waiting task ends UPSTREAM_FAILED with reason
// dependency_timeout.
func TestJobDependencyWaitAndTimeout(t *testing.T) {
	clock := runningClock()
	s := startStack(t, devstack.Options{Now: clock.Now})
	s.createJob(map[string]any{"name": "up"})
	s.createJob(map[string]any{
		"name": "down", "timeouts": map[string]any{"dependency": "1h"},
		"depends_on_jobs": []any{map[string]any{"job": "up"}},
	})

	r := s.call("POST", "/v1/jobs/down/runs", map[string]any{"params": map[string]any{"a": 1}})
	if r.Status != http.StatusUnprocessableEntity || r.code() != "invalid_field" || !strings.Contains(r.Body["message"].(string), "logical_time") {
		t.Fatalf("manual run without logical_time: %d %s", r.Status, r.Raw)
	}
	oneSentence(t, "missing logical_time", r)
	if runs := s.runsOf("down"); len(runs) != 0 {
		t.Fatalf("a refused trigger created %d runs", len(runs))
	}

	logical := protocol.FormatTime(time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC))
	down := s.trigger("down", map[string]any{"logical_time": logical})
	waiting := func() []map[string]any {
		t.Helper()
		var doc struct {
			Run struct {
				WaitingFor []map[string]any `json:"waiting_for"`
			} `json:"run"`
		}
		if err := json.Unmarshal(s.call("GET", "/v1/runs/"+down, nil).must(t, http.StatusOK).Raw, &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Run.WaitingFor
	}
	w := waiting()
	if len(w) != 1 || w[0]["job"] != "up" || w[0]["logical_time"] != logical || w[0]["require"] != "published" || w[0]["run"] != nil {
		t.Fatalf("waiting_for before the upstream run: %v", w)
	}
	if _, ok := w[0]["run"]; !ok {
		t.Fatalf("waiting_for has no run key (want null): %v", w)
	}
	up := s.trigger("up", map[string]any{"logical_time": logical}) // no worker: it stays QUEUED
	if w := waiting(); len(w) != 1 || w[0]["run"] != up {
		t.Fatalf("waiting_for with the upstream run %s queued: %v", up, w)
	}

	clock.Add(61 * time.Minute)
	if _, err := s.Service.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	d := s.waitRun(down, 30*time.Second, "FAILED", "SUCCEEDED", "CANCELLED")
	if d.Run.ExecutionState != "FAILED" || d.task("main").State != "UPSTREAM_FAILED" {
		t.Fatalf("after the dependency timeout: run %s main %s, want FAILED and UPSTREAM_FAILED", d.Run.ExecutionState, d.task("main").State)
	}
	h := s.history(down, "main")
	if got := states(h); !slices.Equal(got, []string{"CREATED", "UPSTREAM_FAILED"}) || h[1].Reason != "dependency_timeout" || h[1].Event != "deps.timeout" {
		t.Fatalf("main history %v, last %s reason %q", got, h[len(h)-1].Event, h[len(h)-1].Reason)
	}
	if w := waiting(); w != nil {
		t.Fatalf("a finished run still carries waiting_for %v", w)
	}
}

// timeouts.dependency fires at its time on the local stack: a run waiting
// on a job that never runs, with a 3 s timeout, has its task end
// UPSTREAM_FAILED (dependency_timeout) within one ticker period (the local
// stack's 2 s) of creation + 3 s, as the record's time says; before, it
// waited for the task's one-minute recheck or the run's backstop.
func TestDependencyTimeoutFiresOnTime(t *testing.T) {
	const tick = 2 * time.Second // make run's ticker period
	s := startStack(t, devstack.Options{TickInterval: tick})
	s.createJob(map[string]any{"name": "never"})
	s.createJob(map[string]any{
		"name": "waits", "timeouts": map[string]any{"dependency": "3s"},
		"depends_on_jobs": []any{map[string]any{"job": "never"}},
	})
	run := s.trigger("waits", map[string]any{"logical_time": protocol.FormatTime(time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC))})
	var doc struct {
		Run struct {
			CreatedAt time.Time `json:"created_at"`
		} `json:"run"`
	}
	if err := json.Unmarshal(s.call("GET", "/v1/runs/"+run, nil).must(t, http.StatusOK).Raw, &doc); err != nil {
		t.Fatal(err)
	}
	timeout := doc.Run.CreatedAt.Add(3 * time.Second)

	// Well before the task's one-minute dependency recheck.
	s.waitTask(run, "main", "UPSTREAM_FAILED", 20*time.Second)
	var hist struct {
		Transitions []struct {
			To         string    `json:"to"`
			Event      string    `json:"event"`
			Reason     string    `json:"reason"`
			ObservedAt time.Time `json:"observed_at"`
		} `json:"transitions"`
	}
	if err := json.Unmarshal(s.call("GET", "/v1/runs/"+run+"/tasks/main/history", nil).must(t, http.StatusOK).Raw, &hist); err != nil {
		t.Fatal(err)
	}
	last := hist.Transitions[len(hist.Transitions)-1]
	if last.To != "UPSTREAM_FAILED" || last.Event != "deps.timeout" || last.Reason != "dependency_timeout" {
		t.Fatalf("main's last record %+v, want deps.timeout to UPSTREAM_FAILED with reason dependency_timeout", last)
	}
	late := last.ObservedAt.Sub(timeout)
	t.Logf("UPSTREAM_FAILED recorded %s after creation + 3 s", late)
	if late < 0 || late > tick {
		t.Fatalf("UPSTREAM_FAILED recorded at %s, %s after creation + 3 s (%s); want within one ticker period (%s) after it",
			protocol.FormatTime(last.ObservedAt), late, protocol.FormatTime(timeout), tick)
	}
	if d := s.run(run); d.Run.ExecutionState != "FAILED" {
		t.Fatalf("run %s after the dependency timeout, want FAILED", d.Run.ExecutionState)
	}
}
