package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
	"github.com/runledger/runledger/statemodel/limiter"
)

// admissionOf reads a run answer's admission and, when admitted, its
// interval [admitted_at, ended_at) (To zero while unfinished).
func admissionOf(t *testing.T, run map[string]any) (map[string]any, limiter.Span) {
	t.Helper()
	a, _ := run["admission"].(map[string]any)
	var sp limiter.Span
	if at, ok := a["admitted_at"].(string); ok {
		var err error
		if sp.From, err = protocol.ParseTime(at); err != nil {
			t.Fatalf("admitted_at %q: %v", at, err)
		}
	}
	if end, ok := run["ended_at"].(string); ok {
		sp.To, _ = protocol.ParseTime(end)
	}
	return a, sp
}

// A limited job's runs, triggered in a burst and all ended, each answer
// admitted_at through GET, the list and (when admitted at once) the
// trigger's answer; with concurrency.limit 2 no instant lies inside more
// than two intervals [admitted_at, ended_at), and with rate_limit 2 per
// second no second holds more than two admitted_at.
func TestFlowEndedRunsAnswerAdmittedAt(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(map[string]any{"name": "conc", "concurrency": map[string]any{"limit": 2}})
	s.createJob(map[string]any{"name": "paced", "rate_limit": map[string]any{"runs": 2, "per": "1s"}})
	s.startWorker("default", "burst", 8, func(ctx context.Context, task worker.Task) error {
		select { // work that takes a while, so the limit has something to hold
		case <-time.After(30 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	for _, job := range []string{"conc", "paced"} {
		var runs []string
		atOnce := 0
		for range 6 {
			r := s.call("POST", "/v1/jobs/"+job+"/runs", nil).must(t, http.StatusCreated)
			run := r.Body["run"].(map[string]any)
			runs = append(runs, run["id"].(string))
			if a, sp := admissionOf(t, run); a["state"] == "admitted" {
				atOnce++
				if sp.From.IsZero() {
					t.Fatalf("%s: trigger answer admitted without admitted_at: %v", job, a)
				}
			}
		}
		if atOnce == 0 {
			t.Fatalf("%s: no trigger's answer was admitted at once", job)
		}
		for _, id := range runs {
			s.waitRun(id, 60*time.Second, "SUCCEEDED")
		}
		var spans []limiter.Span
		for _, id := range runs {
			run := s.call("GET", "/v1/runs/"+id, nil).must(t, http.StatusOK).Body["run"].(map[string]any)
			a, sp := admissionOf(t, run)
			if a["state"] != "admitted" || a["limiter"] != job+"/" || sp.From.IsZero() || sp.To.Before(sp.From) {
				t.Fatalf("%s: ended run %s answers admission %v (ended %v)", job, id, a, run["ended_at"])
			}
			spans = append(spans, sp)
		}
		page := s.call("GET", "/v1/runs?job="+job, nil).must(t, http.StatusOK).Body["runs"].([]any)
		if len(page) != len(runs) {
			t.Fatalf("%s: list has %d runs, want %d", job, len(page), len(runs))
		}
		for _, it := range page {
			if a, sp := admissionOf(t, it.(map[string]any)); a["state"] != "admitted" || sp.From.IsZero() {
				t.Fatalf("%s: listed run answers admission %v", job, a)
			}
		}
		switch job {
		case "conc":
			if beyond := limiter.MostBeyond(spans, 2); beyond != 0 {
				t.Fatalf("%d runs beyond concurrency 2 at once: %v", beyond, spans)
			}
		case "paced":
			for _, a := range spans {
				in := 0
				for _, b := range spans {
					if !b.From.Before(a.From) && b.From.Before(a.From.Add(time.Second)) {
						in++
					}
				}
				if in > 2 {
					t.Fatalf("%d runs admitted within a second of %s, rate 2/s: %v", in, a.From, spans)
				}
			}
		}
	}
}

// Limit 1: R0 runs, R1, R2 and R3 wait; R1 is cancelled and R2 paused
// while they wait; when R0 ends, R3 is admitted and R2 keeps waiting
// (paused, passed over). Resumed, R2 waits at place 1 and is admitted when
// R3 ends.
func TestFlowPausedWaitingRunPassedOver(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(map[string]any{"name": "solo", "concurrency": map[string]any{"limit": 1}})
	var mu sync.Mutex
	gates := map[string]chan struct{}{}
	gate := func(run string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if gates[run] == nil {
			gates[run] = make(chan struct{})
		}
		return gates[run]
	}
	s.startWorker("default", "held", 4, func(ctx context.Context, task worker.Task) error {
		select {
		case <-gate(task.Run):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	var r []string
	for range 4 {
		r = append(r, s.trigger("solo", nil))
	}
	s.waitTask(r[0], "main", "RUNNING", 30*time.Second)
	s.call("POST", "/v1/runs/"+r[1]+"/cancel", map[string]any{"reason": "not needed"}).must(t, http.StatusOK)
	s.call("POST", "/v1/runs/"+r[2]+"/pause", map[string]any{"reason": "hold"}).must(t, http.StatusOK)
	close(gate(r[0]))
	s.waitTask(r[3], "main", "RUNNING", 30*time.Second)
	admission := func(id string) map[string]any {
		run := s.call("GET", "/v1/runs/"+id, nil).must(t, http.StatusOK).Body["run"].(map[string]any)
		a, _ := run["admission"].(map[string]any)
		return a
	}
	if a := admission(r[2]); a["state"] != "waiting" {
		t.Fatalf("paused waiting run R2 answers admission %v; want waiting", a)
	}
	if d := s.run(r[2]); d.task("main").State != "PAUSED" || d.task("main").Attempt != 0 {
		t.Fatalf("paused waiting run R2's task: %+v", d.task("main"))
	}
	s.call("POST", "/v1/runs/"+r[2]+"/resume", map[string]any{"reason": "go"}).must(t, http.StatusOK)
	if a := admission(r[2]); a["state"] != "waiting" || a["place"] != 1.0 {
		t.Fatalf("resumed R2 answers admission %v; want waiting at place 1", a)
	}
	close(gate(r[3]))
	s.waitTask(r[2], "main", "RUNNING", 30*time.Second)
	close(gate(r[2]))
	for i, want := range []string{"SUCCEEDED", "CANCELLED", "SUCCEEDED", "SUCCEEDED"} {
		s.waitRun(r[i], 30*time.Second, want)
	}
	var seen []string
	for i, id := range r {
		seen = append(seen, fmt.Sprintf("R%d %v", i, admission(id)))
	}
	if a := admission(r[1]); a != nil {
		t.Fatalf("cancelled waiting run R1 answers admission %v; want none: %s", a, strings.Join(seen, "; "))
	}
}
