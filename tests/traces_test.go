package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/tracing/tracingtest"
	"github.com/runledger/runledger/shared/worker"
)

// A 3-task run traced from its trigger to its attempts: the trigger's
// traceparent sets the run's trace_id, its answer and every history
// record show it, each handler gets its attempt's traceparent in its ctx
// (as the W3C propagator reads it), and the spans exported to an
// OTLP/HTTP receiver are one trace: the run's span, one span per attempt
// as its child, a retried task's two attempts siblings.
func TestTracesOfARunFromTriggerToAttempts(t *testing.T) {
	t.Parallel()
	rcv := tracingtest.Start()
	t.Cleanup(rcv.Close)
	s := startStack(t, devstack.Options{OTLPEndpoint: rcv.URL()})

	var mu sync.Mutex
	seen := map[string]string{}     // task#attempt -> the handler's traceparent
	fromOtel := map[string]string{} // task#attempt -> span id the propagator put in ctx
	s.startWorker("default", "traced", 3, func(ctx context.Context, task worker.Task) error {
		key := fmt.Sprintf("%s#%d", task.Task, task.Attempt)
		mu.Lock()
		seen[key] = worker.TraceParent(ctx)
		fromOtel[key] = trace.SpanContextFromContext(ctx).SpanID().String()
		mu.Unlock()
		if task.Task == "b" && task.Attempt == 1 {
			return errors.New("first try fails")
		}
		return nil
	})
	s.createJob(quickJob("traced", map[string]any{"tasks": []any{
		map[string]any{"id": "a"},
		map[string]any{"id": "b", "depends_on": []string{"a"}},
		map[string]any{"id": "c", "depends_on": []string{"a"}},
	}}))
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := s.call("POST", "/v1/jobs/traced/runs", map[string]any{}, "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01").must(t, http.StatusCreated)
	run := r.Body["run"].(map[string]any)
	runID := run["id"].(string)
	if got := run["trace_id"]; got != traceID {
		t.Fatalf("the trigger's answer has trace_id %v, want the traceparent's %s", got, traceID)
	}
	s.waitRun(runID, 30*time.Second, "SUCCEEDED")
	if got := s.call("GET", "/v1/runs/"+runID, nil).must(t, http.StatusOK).Body["run"].(map[string]any)["trace_id"]; got != traceID {
		t.Fatalf("GET run: trace_id %v, want %s", got, traceID)
	}
	for _, task := range []string{"a", "b", "c"} {
		h := s.call("GET", "/v1/runs/"+runID+"/tasks/"+task+"/history", nil).must(t, http.StatusOK)
		recs := h.Body["transitions"].([]any)
		if len(recs) == 0 {
			t.Fatalf("%s has no history", task)
		}
		for _, rec := range recs {
			if got := rec.(map[string]any)["trace_id"]; got != traceID {
				t.Fatalf("%s's history record %v has trace_id %v, want %s", task, rec, got, traceID)
			}
		}
	}

	attempts := map[string]int{"a": 1, "b": 2, "c": 1}
	mu.Lock()
	for task, n := range attempts {
		for i := 1; i <= n; i++ {
			key := fmt.Sprintf("%s#%d", task, i)
			span := protocol.AttemptSpanID(protocol.AttemptRef{Run: runID, Task: task, Attempt: i})
			if want := "00-" + traceID + "-" + span + "-01"; seen[key] != want {
				t.Errorf("%s's handler got traceparent %q, want %q", key, seen[key], want)
			}
			if fromOtel[key] != span {
				t.Errorf("%s's ctx holds span %s for the propagator, want %s", key, fromOtel[key], span)
			}
		}
	}
	mu.Unlock()

	// The spans: polled until all five are in (the exporter batches).
	runSpan := protocol.RunSpanID(runID)
	var spans map[string]tracingtest.Span
	eventually(t, 15*time.Second, "the run's five spans", func() (bool, string) {
		spans = map[string]tracingtest.Span{}
		for _, sp := range rcv.Spans() {
			if sp.Attrs["runledger.run"] == runID {
				spans[sp.SpanID] = sp
			}
		}
		return len(spans) == 5, fmt.Sprintf("%d spans: %v", len(spans), spans)
	})
	root, ok := spans[runSpan]
	if !ok || root.ParentID != "" || root.Name != "run traced" {
		t.Fatalf("the run's span %s: %+v (present %t), want a root named \"run traced\"", runSpan, root, ok)
	}
	for id, sp := range spans {
		if sp.TraceID != traceID {
			t.Errorf("span %s (%s) is in trace %s, want %s", id, sp.Name, sp.TraceID, traceID)
		}
		if sp.EndNanos < sp.StartNanos {
			t.Errorf("span %s ends before it starts", sp.Name)
		}
	}
	for task, n := range attempts {
		for i := 1; i <= n; i++ {
			id := protocol.AttemptSpanID(protocol.AttemptRef{Run: runID, Task: task, Attempt: i})
			sp, ok := spans[id]
			switch {
			case !ok:
				t.Errorf("no span for %s#%d", task, i)
			case sp.ParentID != runSpan:
				t.Errorf("%s#%d's span has parent %s, want the run's %s (retries are siblings)", task, i, sp.ParentID, runSpan)
			case sp.Attrs["runledger.task"] != task || sp.Attrs["runledger.attempt"] != fmt.Sprint(i):
				t.Errorf("span %s is named %s#%s, want %s#%d", id, sp.Attrs["runledger.task"], sp.Attrs["runledger.attempt"], task, i)
			}
		}
	}
	if got := spans[protocol.AttemptSpanID(protocol.AttemptRef{Run: runID, Task: "b", Attempt: 1})].Attrs["runledger.outcome"]; got != "failed" {
		t.Errorf("b#1's span has outcome %q, want failed", got)
	}

	// Without a traceparent, or with one that is not, a run gets a trace
	// of its own.
	other := map[string]bool{traceID: true}
	for _, header := range []string{"", "00-not-a-traceparent-01"} {
		r := s.call("POST", "/v1/jobs/traced/runs", map[string]any{}, "traceparent", header).must(t, http.StatusCreated)
		got, _ := r.Body["run"].(map[string]any)["trace_id"].(string)
		if !protocol.CheckTraceID(got) || other[got] {
			t.Fatalf("traceparent %q: trace_id %q, want a new one", header, got)
		}
		other[got] = true
	}
}
