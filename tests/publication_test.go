package tests

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
)

// 10. Publication is apart from execution. The upstream job's workflow is
// build -> publish (the publish task) -> notify; the downstream job
// depends on it with require: published. A downstream run triggered first,
// with the same logical time, waits in CREATED (through its re-evaluation
// timer, driven by an injected clock) while no upstream run exists and
// while the upstream has not published; it runs as soon as the upstream is
// PUBLISHED, before the upstream's execution has even finished. When the
// upstream's publish task fails, the downstream root is UPSTREAM_FAILED.
func TestPublicationGatesDependentJob(t *testing.T) {
	clock := runningClock()
	s := startStack(t, devstack.Options{Now: clock.Now})
	log := newHandlerLog()
	gates := map[string]chan struct{}{"publish": make(chan struct{}), "notify": make(chan struct{})}
	s.launchWorker("default", "pub", 4, clock.Now, func(ctx context.Context, task worker.Task) error {
		log.record(task)
		var p struct {
			Hold bool   `json:"hold"`
			Fail string `json:"fail"`
		}
		_ = task.DecodeParams(&p)
		if p.Fail == task.Task {
			return worker.Permanent(errors.New("told to fail: " + task.Task))
		}
		if gate, ok := gates[task.Task]; ok && p.Hold {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	s.createJob(map[string]any{
		"name": "upstream",
		// The test moves the clock two minutes while publish runs: the
		// lease outlasts that.
		"timeouts": map[string]any{"heartbeat": "10m"},
		"tasks": []any{
			map[string]any{"id": "build"},
			map[string]any{"id": "publish", "depends_on": []string{"build"}, "publish": true},
			map[string]any{"id": "notify", "depends_on": []string{"publish"}},
		},
	})
	s.createJob(map[string]any{
		"name":            "downstream",
		"depends_on_jobs": []any{map[string]any{"job": "upstream", "require": "published"}},
	})

	t.Run("waits for PUBLISHED", func(t *testing.T) {
		logical := protocol.FormatTime(time.Date(2031, 1, 2, 3, 0, 0, 0, time.UTC))
		down := s.trigger("downstream", map[string]any{"logical_time": logical})
		d := s.run(down)
		if d.Run.LogicalTime != logical || d.task("main").State != "CREATED" || d.Run.ExecutionState != "QUEUED" {
			t.Fatalf("dependent at trigger: %+v main %s", d.Run, d.task("main").State)
		}
		// No upstream run yet: past the re-evaluation timer (one minute) a
		// tick re-evaluates the root, which keeps waiting.
		clock.Add(2 * time.Minute)
		if _, err := s.Service.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		stillWaiting(t, s, down)

		up := s.trigger("upstream", map[string]any{"logical_time": logical, "params": map[string]any{"hold": true}})
		s.waitTask(up, "publish", "RUNNING", 30*time.Second)
		u := s.run(up)
		if u.Run.ExecutionState != "RUNNING" || u.Run.PublicationState != "PENDING" || u.task("build").State != "SUCCEEDED" {
			t.Fatalf("upstream while publishing: %s/%s build %s", u.Run.ExecutionState, u.Run.PublicationState, u.task("build").State)
		}
		// The upstream run exists and its build succeeded, but nothing is
		// published: the dependent still waits, through another tick.
		clock.Add(2 * time.Minute)
		if _, err := s.Service.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		stillWaiting(t, s, down)

		// Published while notify still runs: the dependent runs at once,
		// without waiting for the upstream's execution to end.
		close(gates["publish"])
		s.waitTask(up, "notify", "RUNNING", 30*time.Second)
		dd := s.waitRun(down, 30*time.Second, "SUCCEEDED", "FAILED")
		u = s.run(up)
		if dd.Run.ExecutionState != "SUCCEEDED" || u.Run.PublicationState != "PUBLISHED" || u.Run.ExecutionState != "RUNNING" || u.task("notify").State != "RUNNING" {
			t.Fatalf("dependent %s while upstream %s/%s notify %s; want SUCCEEDED while PUBLISHED/RUNNING",
				dd.Run.ExecutionState, u.Run.ExecutionState, u.Run.PublicationState, u.task("notify").State)
		}
		got := states(s.history(down, "main"))
		if want := []string{"CREATED", "SCHEDULED", "QUEUED", "RUNNING", "SUCCEEDED"}; !slices.Equal(got, want) {
			t.Errorf("dependent main history %v, want %v", got, want)
		}
		if log.count(down, "main") != 1 {
			t.Errorf("dependent main ran %d times", log.count(down, "main"))
		}

		close(gates["notify"])
		u = s.waitRun(up, 30*time.Second, "SUCCEEDED", "FAILED")
		if u.Run.ExecutionState != "SUCCEEDED" || u.Run.PublicationState != "PUBLISHED" || u.Run.Status != "SUCCEEDED" {
			t.Fatalf("upstream ended %s/%s, want SUCCEEDED/PUBLISHED", u.Run.ExecutionState, u.Run.PublicationState)
		}
		// The dependent started after the publish task succeeded, on one clock.
		pubEnd := parseTime(t, u.task("publish").Attempts[0].EndedAt, "publish ended_at")
		mainStart := parseTime(t, s.run(down).task("main").Attempts[0].StartedAt, "main started_at")
		if mainStart.Before(pubEnd) {
			t.Errorf("dependent main started %s, before publish ended %s", mainStart, pubEnd)
		}
	})

	t.Run("publish fails", func(t *testing.T) {
		logical := protocol.FormatTime(time.Date(2031, 1, 2, 4, 0, 0, 0, time.UTC))
		down := s.trigger("downstream", map[string]any{"logical_time": logical})
		stillWaiting(t, s, down)
		up := s.trigger("upstream", map[string]any{"logical_time": logical, "params": map[string]any{"fail": "publish"}})
		u := s.waitRun(up, 30*time.Second, "SUCCEEDED", "FAILED")
		if u.Run.ExecutionState != "FAILED" || u.Run.PublicationState != "PUBLISH_FAILED" ||
			u.task("publish").State != "FAILED" || u.task("notify").State != "UPSTREAM_FAILED" {
			t.Fatalf("upstream %s/%s publish %s notify %s", u.Run.ExecutionState, u.Run.PublicationState,
				u.task("publish").State, u.task("notify").State)
		}
		d := s.waitRun(down, 30*time.Second, "SUCCEEDED", "FAILED")
		if d.Run.ExecutionState != "FAILED" || d.Run.Status != "FAILED" || d.task("main").State != "UPSTREAM_FAILED" {
			t.Fatalf("dependent %s/%s main %s; want FAILED, main UPSTREAM_FAILED", d.Run.ExecutionState, d.Run.Status, d.task("main").State)
		}
		h := s.history(down, "main")
		if got := states(h); !slices.Equal(got, []string{"CREATED", "UPSTREAM_FAILED"}) || h[1].Event != "deps.upstream_failed" {
			t.Errorf("dependent main history %v (%s)", got, h[len(h)-1].Event)
		}
		if log.count(down, "main") != 0 || len(d.task("main").Attempts) != 0 {
			t.Errorf("dependent main ran %d times with %d attempts; want never", log.count(down, "main"), len(d.task("main").Attempts))
		}
	})
}

// stillWaiting checks that the dependent run's root has not moved from
// CREATED: one history record, no attempt.
func stillWaiting(t *testing.T, s *stack, run string) {
	t.Helper()
	d := s.run(run)
	main := d.task("main")
	if main.State != "CREATED" || len(main.Attempts) != 0 || d.Run.ExecutionState != "QUEUED" {
		t.Fatalf("dependent moved: run %s, main %s with %d attempts", d.Run.ExecutionState, main.State, len(main.Attempts))
	}
	if got := states(s.history(run, "main")); !slices.Equal(got, []string{"CREATED"}) {
		t.Fatalf("dependent main history %v, want [CREATED]", got)
	}
}
