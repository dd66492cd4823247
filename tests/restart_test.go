package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// 12. The local stack restarts while a chain first -> second -> third is
// half way: second is RUNNING on a worker whose handler the test holds.
// Every handler of the stack stops and starts again on the same table and
// queues; the old worker (bound to the old URL) is drained and a new one
// joins the new URL. When the test lets second finish, its completion
// (sent to the events queue) is taken by the new stack, third runs on the
// new worker, and the run SUCCEEDS with a consistent history: every task
// SUCCEEDED, attempts that never overlap, and no task with two RUNNING
// attempts at once.
func TestRestartMidRunCompletes(t *testing.T) {
	s := startStack(t, devstack.Options{})
	log := newHandlerLog()
	release := make(chan struct{})
	handler := func(ctx context.Context, task worker.Task) error {
		log.record(task)
		if task.Task == "second" {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	stopOld := s.launchWorker("default", "before", 2, nil, handler)
	s.createJob(map[string]any{
		"name": "chain",
		"tasks": []any{
			map[string]any{"id": "first"},
			map[string]any{"id": "second", "depends_on": []string{"first"}},
			map[string]any{"id": "third", "depends_on": []string{"second"}},
		},
	})
	id := s.trigger("chain", nil)
	s.waitTask(id, "second", "RUNNING", 30*time.Second)
	oldURL := s.url

	s.restart()
	if s.url == oldURL {
		t.Fatalf("the restarted stack answers on the old URL %s", oldURL)
	}
	// The state survived in the table: the new handlers see second RUNNING.
	d := s.run(id)
	if d.task("first").State != "SUCCEEDED" || d.task("second").State != "RUNNING" || d.task("third").State != "CREATED" || d.Run.ExecutionState != "RUNNING" {
		t.Fatalf("after restart: run %s, first %s, second %s, third %s", d.Run.ExecutionState,
			d.task("first").State, d.task("second").State, d.task("third").State)
	}
	stopOld() // it takes no new envelopes; second may still finish and report
	s.launchWorker("default", "after", 2, nil, handler)
	close(release)

	d = s.waitRun(id, 90*time.Second, "SUCCEEDED", "FAILED", "CANCELLED")
	if d.Run.ExecutionState != "SUCCEEDED" || d.Run.Status != "SUCCEEDED" || d.Run.EndedAt == nil {
		t.Fatalf("run %+v", d.Run)
	}
	var prevEnd time.Time
	for _, name := range []string{"first", "second", "third"} {
		td := d.task(name)
		if td.State != "SUCCEEDED" || len(td.Attempts) == 0 || td.Attempts[len(td.Attempts)-1].State != "SUCCEEDED" {
			t.Errorf("%s: %s, attempts %+v", name, td.State, td.Attempts)
			continue
		}
		if n := log.count(id, name); n < 1 || n > len(td.Attempts) {
			t.Errorf("%s: handler ran %d times for %d attempts", name, n, len(td.Attempts))
		}
		// Attempts follow one another: each started after the one before
		// it ended, and only the last one succeeded.
		var end time.Time
		for i, a := range td.Attempts {
			if a.EndedAt == nil {
				t.Errorf("%s attempt %d never ended: %+v", name, a.N, a)
				continue
			}
			if i < len(td.Attempts)-1 && a.State == "SUCCEEDED" {
				t.Errorf("%s attempt %d SUCCEEDED but attempt %d followed", name, a.N, a.N+1)
			}
			if a.StartedAt != nil {
				start := parseTime(t, a.StartedAt, fmt.Sprintf("%s attempt %d started_at", name, a.N))
				if start.Before(end) {
					t.Errorf("%s attempt %d started %s, before attempt %d ended %s", name, a.N, start, a.N-1, end)
				}
			}
			end = parseTime(t, a.EndedAt, fmt.Sprintf("%s attempt %d ended_at", name, a.N))
		}
		// Tasks of the chain follow one another too.
		if first := td.Attempts[0]; first.StartedAt != nil && parseTime(t, first.StartedAt, name).Before(prevEnd) {
			t.Errorf("%s started before its upstream ended at %s", name, prevEnd)
		}
		prevEnd = end
		checkHistory(t, s, id, name)
	}
}

// checkHistory checks that a task's history is one unbroken chain of
// transitions (each from the state the last one left, seq 1, 2, 3, ...)
// ending in SUCCEEDED, in which RUNNING is entered only from a state that
// holds no running attempt, so no two attempts were ever RUNNING at once.
func checkHistory(t *testing.T, s *stack, run, task string) {
	t.Helper()
	h := s.history(run, task)
	state, running := "", 0
	for i, tr := range h {
		if tr.Seq != int64(i+1) || tr.From != state {
			t.Errorf("%s history broken at record %d: %+v after %s", task, i, tr, state)
			return
		}
		if tr.To == "RUNNING" {
			// A claim, or a lost attempt's heartbeat: no other attempt may
			// hold the task.
			if running != 0 && running != tr.Attempt {
				t.Errorf("%s: attempt %d RUNNING while attempt %d ran", task, tr.Attempt, running)
			}
			running = tr.Attempt
		}
		switch tr.To {
		case "RUNNING", "LOST", "CANCELLING":
		default:
			running = 0
		}
		state = tr.To
	}
	if state != "SUCCEEDED" {
		t.Errorf("%s history ends in %s: %v", task, state, states(h))
	}
}
