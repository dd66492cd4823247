package tests

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// 1. A single task goes CREATED -> SCHEDULED -> QUEUED -> RUNNING ->
// SUCCEEDED, with a history record per transition and metrics from
// transition times.
func TestSingleTaskSucceeds(t *testing.T) {
	s := startStack(t, devstack.Options{})
	var ran atomic.Int32
	s.startWorker("default", "w1", 2, func(ctx context.Context, task worker.Task) error {
		ran.Add(1)
		return nil
	})
	s.createJob(map[string]any{"name": "single", "payload": map[string]any{"n": 1}})
	id := s.trigger("single", nil)
	d := s.waitRun(id, 30*time.Second, "SUCCEEDED")
	if d.Run.Status != "SUCCEEDED" || d.Run.EndedAt == nil {
		t.Fatalf("run %+v", d.Run)
	}
	main := d.task("main")
	if main.State != "SUCCEEDED" || main.Status != "SUCCEEDED" || main.Attempt != 1 || len(main.Attempts) != 1 {
		t.Fatalf("task %+v", main)
	}
	if main.Metrics.QueueWaitMS == nil || main.Metrics.RunMS == nil || main.Metrics.DependencyWaitMS == nil {
		t.Fatalf("metrics missing: %+v", main.Metrics)
	}
	got := states(s.history(id, "main"))
	want := []string{"CREATED", "SCHEDULED", "QUEUED", "RUNNING", "SUCCEEDED"}
	if !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	if ran.Load() != 1 {
		t.Fatalf("handler ran %d times", ran.Load())
	}
	// Nothing is accepted twice: the list shows the run once.
	l := s.call("GET", "/v1/runs?job=single", nil).must(t, http.StatusOK)
	if runs := l.Body["runs"].([]any); len(runs) != 1 {
		t.Fatalf("listed %d runs", len(runs))
	}
}
