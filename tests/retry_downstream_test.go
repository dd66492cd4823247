package tests

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// Retry with downstream, as an operator does it with the CLI: the middle
// task of a chain extract -> transform -> load fails, load ends
// UPSTREAM_FAILED and the run FAILED. `runledger runs retry RUN transform
// --downstream` gives transform a new attempt and clears load back to
// CREATED; the run ends SUCCEEDED, extract is not run again, and every
// task's history is whole: extract's unchanged, transform's with both
// attempts, load's with its first end, the clear, and its run.
func TestRetryWithDownstreamRerunsTheBranch(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Options{})
	c := newCLI(t, s)
	log := newHandlerLog()
	var broken atomic.Bool
	broken.Store(true)
	s.startWorker("default", "chain", 2, func(ctx context.Context, task worker.Task) error {
		log.record(task)
		if task.Task == "transform" && broken.Load() {
			return worker.Permanent(errors.New("bad input"))
		}
		return nil
	})
	s.createJob(quickJob("chain", map[string]any{"tasks": []any{
		map[string]any{"id": "extract"},
		map[string]any{"id": "transform", "depends_on": []string{"extract"}},
		map[string]any{"id": "load", "depends_on": []string{"transform"}},
	}}))
	run := s.trigger("chain", nil)
	failed := s.waitRun(run, 30*time.Second, "FAILED")
	if got := failed.task("load").State; got != "UPSTREAM_FAILED" {
		t.Fatalf("load is %s after transform failed, want UPSTREAM_FAILED", got)
	}
	extractBefore := s.history(run, "extract")

	// A task that did not fail is refused, and nothing is cleared.
	r := c.must(t, 1, "runs", "retry", run, "extract", "--downstream")
	mustContain(t, "retry of a succeeded task", r.stderr, "illegal_transition")
	if got := s.run(run).task("load").State; got != "UPSTREAM_FAILED" {
		t.Fatalf("a refused retry moved load to %s", got)
	}

	broken.Store(false)
	c.must(t, 0, "runs", "retry", run, "transform", "--downstream", "--operator", "ann", "--reason", "input fixed")
	done := s.waitRun(run, 30*time.Second, "SUCCEEDED")
	for _, task := range []string{"extract", "transform", "load"} {
		if got := done.task(task).State; got != "SUCCEEDED" {
			t.Fatalf("%s is %s, want SUCCEEDED", task, got)
		}
	}
	if n := log.count(run, "extract"); n != 1 {
		t.Fatalf("extract ran %d times, want once", n)
	}

	if got := s.history(run, "extract"); len(got) != len(extractBefore) {
		t.Fatalf("extract's history changed: %v, was %v", states(got), states(extractBefore))
	}
	want := map[string][]string{
		"transform": {"CREATED", "SCHEDULED", "QUEUED", "RUNNING", "FAILED", "SCHEDULED", "QUEUED", "RUNNING", "SUCCEEDED"},
		"load":      {"CREATED", "UPSTREAM_FAILED", "CREATED", "SCHEDULED", "QUEUED", "RUNNING", "SUCCEEDED"},
	}
	for task, w := range want {
		h := s.history(run, task)
		if !slices.Equal(states(h), w) {
			t.Fatalf("%s's history %v, want %v", task, states(h), w)
		}
		for i, tr := range h {
			if tr.Seq != int64(i+1) {
				t.Fatalf("%s's record %d has seq %d: the history has a gap", task, i, tr.Seq)
			}
		}
	}
	clear := s.history(run, "load")[2]
	if clear.Event != "override.cleared" || clear.Actor != "operator" || clear.Scope != "downstream" || clear.Operator != "ann" || clear.Reason != "input fixed" {
		t.Fatalf("load's clear record: %+v", clear)
	}
}
