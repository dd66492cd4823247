package tests

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// 2. Attempt 1 fails; the instance waits UP_FOR_RETRY until the retry_at
// the policy computed (no jitter: exactly the initial interval after the
// failure), attempt 2 runs and succeeds, and attempt 1's record stays as it
// ended: its worker, times, error category and exit code.
func TestRetryAfterFailedAttempt(t *testing.T) {
	s := startStack(t, devstack.Options{})
	var calls atomic.Int32
	w := s.startLoggedWorker("default", "w1", s.opts.Logger, func(ctx context.Context, task worker.Task) error {
		if calls.Add(1) == 1 {
			return worker.WithCategory(worker.WithExitCode(errors.New("upstream refused the connection"), 3), "upstream_unavailable")
		}
		return nil
	})
	// The interval is long enough for the test to see UP_FOR_RETRY and its
	// retry_at, short enough to keep the test quick.
	const interval = 1500 * time.Millisecond
	s.createJob(quickJob("retried", map[string]any{
		"retry": map[string]any{"max_attempts": 3, "initial_interval": interval.String(), "jitter": "none"},
	}))
	id := s.trigger("retried", nil)

	waiting := s.waitDetail(id, "main", "UP_FOR_RETRY", 30*time.Second)
	if waiting.Attempt != 1 || waiting.Status != "PENDING" {
		t.Fatalf("waiting for the retry: %+v", waiting)
	}
	failed := waiting.attempt(t, 1)
	retryAt := at(t, "retry_at", waiting.RetryAt)
	if gap := retryAt.Sub(at(t, "attempt 1 ended_at", failed.EndedAt)); gap != interval {
		t.Fatalf("retry_at is %s after attempt 1 ended, want the initial interval %s", gap, interval)
	}

	d := s.waitRun(id, 30*time.Second, "SUCCEEDED", "FAILED")
	if d.Run.ExecutionState != "SUCCEEDED" || d.Run.Status != "SUCCEEDED" {
		t.Fatalf("run %+v", d.Run)
	}
	main := s.runDetail(id).task("main")
	if main.State != "SUCCEEDED" || main.Attempt != 2 || len(main.Attempts) != 2 || main.RetryAt != nil {
		t.Fatalf("task %+v", main)
	}
	a1, a2 := main.attempt(t, 1), main.attempt(t, 2)
	if a1.State != "FAILED" || str(a1.WorkerID) != w.ID() || str(a1.ErrorCategory) != "upstream_unavailable" ||
		a1.ExitCode == nil || *a1.ExitCode != 3 || str(a1.EndedAt) != str(failed.EndedAt) {
		t.Fatalf("attempt 1 is not as it ended: %+v (worker %s, category %s, ended %s; when it failed: ended %s)",
			a1, str(a1.WorkerID), str(a1.ErrorCategory), str(a1.EndedAt), str(failed.EndedAt))
	}
	if started, ended := at(t, "attempt 1 started_at", a1.StartedAt), at(t, "attempt 1 ended_at", a1.EndedAt); ended.Before(started) {
		t.Fatalf("attempt 1 ended %s before it started %s", ended, started)
	}
	if a2.State != "SUCCEEDED" || str(a2.WorkerID) != w.ID() || a2.ErrorCategory != nil || a2.ExitCode != nil {
		t.Fatalf("attempt 2 %+v (category %s)", a2, str(a2.ErrorCategory))
	}
	if q := at(t, "attempt 2 queued_at", a2.QueuedAt); q.Before(retryAt) {
		t.Fatalf("attempt 2 was queued at %s, before retry_at %s", q, retryAt)
	}

	h := s.records(id, "main")
	expectStates(t, h, "CREATED", "SCHEDULED", "QUEUED", "RUNNING",
		"UP_FOR_RETRY", "SCHEDULED", "QUEUED", "RUNNING", "SUCCEEDED")
	for i, want := range []struct {
		event, actor string
		attempt      int
	}{
		4: {"attempt.failed", "worker", 1},
		5: {"retry.due", "scheduler", 1},
		6: {"dispatch.accepted", "executor", 2},
		7: {"attempt.started", "worker", 2},
		8: {"attempt.succeeded", "worker", 2},
	} {
		if i < 4 {
			continue
		}
		if r := h[i]; r.Event != want.event || r.Actor != want.actor || r.Attempt != want.attempt {
			t.Fatalf("record %d: %s by %s for attempt %d, want %s by %s for attempt %d\n%s",
				i, r.Event, r.Actor, r.Attempt, want.event, want.actor, want.attempt, describe(h))
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

// 3. A worker claims and then falls silent. The reconciler finds its lease
// expired (LOST), no evidence provider can tell (no process lease names the
// worker), the evidence window ends empty, and the retry policy retries
// with error category lost; attempt 2 succeeds on a live worker.
func TestLostWorkerRetriedAfterEvidenceWindow(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(quickJob("ghosted", nil))
	id := s.trigger("ghosted", nil)

	m := s.manualWorker("default")
	env, _ := m.receive(id, "main", 1)
	m.mustClaim(env, "ghost@boot1")
	// The ghost never beats. A live worker joins the pool for the retry.
	var ran atomic.Int32
	w := s.startLoggedWorker("default", "w2", s.opts.Logger, func(ctx context.Context, task worker.Task) error {
		ran.Add(1)
		return nil
	})

	d := s.waitRun(id, 30*time.Second, "SUCCEEDED", "FAILED")
	if d.Run.ExecutionState != "SUCCEEDED" {
		t.Fatalf("run %+v", d.Run)
	}
	h := s.records(id, "main")
	expectStates(t, h, "CREATED", "SCHEDULED", "QUEUED", "RUNNING",
		"LOST", "UP_FOR_RETRY", "SCHEDULED", "QUEUED", "RUNNING", "SUCCEEDED")
	lost, resolved := h[4], h[5]
	if lost.Event != "lease.expired" || lost.Actor != "reconciler" || lost.Attempt != 1 {
		t.Fatalf("LOST by %s from %s for attempt %d, want lease.expired from the reconciler for attempt 1", lost.Event, lost.Actor, lost.Attempt)
	}
	if resolved.Event != "evidence.window_expired" || resolved.Actor != "reconciler" || resolved.Attempt != 1 {
		t.Fatalf("LOST resolved by %s from %s for attempt %d, want evidence.window_expired from the reconciler", resolved.Event, resolved.Actor, resolved.Attempt)
	}

	main := s.runDetail(id).task("main")
	if main.Attempt != 2 || len(main.Attempts) != 2 {
		t.Fatalf("task %+v", main)
	}
	a1, a2 := main.attempt(t, 1), main.attempt(t, 2)
	if a1.State != "LOST" || str(a1.WorkerID) != "ghost@boot1" || str(a1.ErrorCategory) != "lost" || a1.ExitCode != nil || a1.EndedAt == nil {
		t.Fatalf("attempt 1 %+v (worker %s, category %s)", a1, str(a1.WorkerID), str(a1.ErrorCategory))
	}
	// The lease ran out a heartbeat timeout after the claim, and the window
	// was waited out in full.
	claimed := at(t, "attempt 1 started_at", a1.StartedAt)
	lostAt := at(t, "LOST observed_at", lost.ObservedAt)
	if gap := lostAt.Sub(claimed); gap < 2*time.Second {
		t.Fatalf("LOST %s after the claim, before the 2s heartbeat timeout", gap)
	}
	if gap := at(t, "resolution observed_at", resolved.ObservedAt).Sub(lostAt); gap < time.Second {
		t.Fatalf("LOST resolved %s after it began, before the 1s evidence window ended", gap)
	}
	if a2.State != "SUCCEEDED" || str(a2.WorkerID) != w.ID() {
		t.Fatalf("attempt 2 %+v (worker %s)", a2, str(a2.WorkerID))
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("the live worker ran %d attempts, want 1", n)
	}
	// The ghost coming back finds its attempt superseded.
	if _, err := m.heartbeat(env); !errors.Is(err, worker.ErrStaleAttempt) {
		t.Fatalf("heartbeat of the lost attempt 1: %v, want 409 stale_attempt", err)
	}
}

// 4. The current attempt's worker was silent long enough to be LOST, but
// its success arrives while the instance is still LOST (a long evidence
// window): the success is accepted and the run succeeds.
func TestLateSuccessWhileLostIsAccepted(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(quickJob("late-success", map[string]any{"evidence_window": "1m"}))
	id := s.trigger("late-success", nil)

	m := s.manualWorker("default")
	env, _ := m.receive(id, "main", 1)
	m.mustClaim(env, "slow@boot1")
	lost := s.waitDetail(id, "main", "LOST", 30*time.Second)
	if lost.Status != "RUNNING" || lost.Attempt != 1 {
		t.Fatalf("LOST task %+v, want compat status RUNNING on attempt 1", lost)
	}
	if r := s.runDetail(id).Run; r.ExecutionState != "RUNNING" {
		t.Fatalf("run %+v while its task is LOST, want RUNNING", r)
	}

	zero := 0
	eventID, resp, err := m.complete(env, worker.Completion{Outcome: worker.OutcomeSucceeded, ExitCode: &zero})
	if err != nil {
		t.Fatalf("late success: %v", err)
	}
	if resp.Result != worker.ResultApplied || resp.State != "SUCCEEDED" {
		t.Fatalf("late success answered %+v, want applied and SUCCEEDED", resp)
	}
	d := s.waitRun(id, 30*time.Second, "SUCCEEDED", "FAILED")
	if d.Run.ExecutionState != "SUCCEEDED" {
		t.Fatalf("run %+v", d.Run)
	}
	main := s.runDetail(id).task("main")
	a1 := main.attempt(t, 1)
	if main.State != "SUCCEEDED" || len(main.Attempts) != 1 || a1.State != "SUCCEEDED" || a1.ErrorCategory != nil ||
		a1.ExitCode == nil || *a1.ExitCode != 0 || len(a1.LateEvents) != 0 {
		t.Fatalf("task %+v, attempt 1 %+v", main, a1)
	}
	h := s.records(id, "main")
	expectStates(t, h, "CREATED", "SCHEDULED", "QUEUED", "RUNNING", "LOST", "SUCCEEDED")
	if r := h[4]; r.Event != "lease.expired" || r.Actor != "reconciler" {
		t.Fatalf("LOST by %s from %s", r.Event, r.Actor)
	}
	// A worker's event id is recorded scoped by route and attempt.
	if r := h[5]; r.Event != "attempt.succeeded" || r.Actor != "worker" || r.Attempt != 1 || r.EventID != eventID {
		t.Fatalf("SUCCEEDED by %s from %s for attempt %d (event %s), want the worker's attempt.succeeded %s",
			r.Event, r.Actor, r.Attempt, r.EventID, eventID)
	}
}

// 5. Attempt 1 is lost and retried; attempt 2 runs. Then attempt 1's
// success arrives: it is answered stale, recorded as a late event on
// attempt 1 and never applied. The task's outcome is attempt 2's (here a
// failure), not attempt 1's success.
func TestStaleSuccessFromOlderAttemptIsIgnored(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(quickJob("stale-success", nil))
	id := s.trigger("stale-success", nil)

	m := s.manualWorker("default")
	env1, _ := m.receive(id, "main", 1)
	m.mustClaim(env1, "ghost@boot1")
	// Attempt 1 goes LOST, the window ends empty, the retry dispatches 2.
	env2, _ := m.receive(id, "main", 2)
	if env2.Token == env1.Token {
		t.Fatal("attempt 2 carries attempt 1's token")
	}
	m.mustClaim(env2, "ghost@boot2")
	stopBeating := m.keepBeating(env2, 500*time.Millisecond)

	eventID, resp, err := m.complete(env1, worker.Completion{Outcome: worker.OutcomeSucceeded})
	if err != nil {
		t.Fatalf("attempt 1's late success: %v", err)
	}
	if resp.Result != worker.ResultStale || resp.State != "RUNNING" {
		t.Fatalf("attempt 1's late success answered %+v, want stale with the instance RUNNING", resp)
	}
	main := s.runDetail(id).task("main")
	if main.State != "RUNNING" || main.Attempt != 2 {
		t.Fatalf("after the stale success the task is %s on attempt %d, want RUNNING on attempt 2", main.State, main.Attempt)
	}
	a1 := main.attempt(t, 1)
	if a1.State != "LOST" || str(a1.ErrorCategory) != "lost" {
		t.Fatalf("attempt 1 %+v (category %s), want LOST with category lost", a1, str(a1.ErrorCategory))
	}
	i := slices.IndexFunc(a1.LateEvents, func(l lateEvent) bool { return l.EventID == eventID })
	if i < 0 || len(a1.LateEvents) != 1 {
		t.Fatalf("attempt 1's late events %+v, want exactly %s", a1.LateEvents, eventID)
	}
	if l := a1.LateEvents[i]; l.Event != "attempt.succeeded" || l.Outcome != "succeeded" || l.Actor != "worker" {
		t.Fatalf("late event %+v", l)
	}
	if a2 := main.attempt(t, 2); a2.State != "RUNNING" || str(a2.WorkerID) != "ghost@boot2" || len(a2.LateEvents) != 0 {
		t.Fatalf("attempt 2 %+v", a2)
	}
	if r := s.runDetail(id).Run; r.ExecutionState != "RUNNING" {
		t.Fatalf("run %+v while attempt 2 runs", r)
	}
	// The rest of attempt 1's worker protocol is refused as stale too.
	if _, err := m.claim(env1, "ghost@boot1"); !errors.Is(err, worker.ErrStaleAttempt) {
		t.Fatalf("claim of attempt 1 after attempt 2 began: %v, want 409 stale_attempt", err)
	}
	if _, err := m.heartbeat(env1); !errors.Is(err, worker.ErrStaleAttempt) {
		t.Fatalf("heartbeat of attempt 1 after attempt 2 began: %v, want 409 stale_attempt", err)
	}

	if err := stopBeating(); err != nil {
		t.Fatalf("attempt 2's heartbeats: %v", err)
	}
	seven, permanent := 7, false
	_, resp, err = m.complete(env2, worker.Completion{Outcome: worker.OutcomeFailed, ExitCode: &seven,
		ErrorCategory: "bad_input", Retryable: &permanent})
	if err != nil {
		t.Fatalf("attempt 2's failure: %v", err)
	}
	if resp.Result != worker.ResultApplied || resp.State != "FAILED" {
		t.Fatalf("attempt 2's failure answered %+v, want applied and FAILED", resp)
	}
	d := s.waitRun(id, 30*time.Second, "SUCCEEDED", "FAILED")
	if d.Run.ExecutionState != "FAILED" || d.Run.Status != "FAILED" {
		t.Fatalf("run %+v, want FAILED: attempt 2's outcome", d.Run)
	}
	main = s.runDetail(id).task("main")
	a1, a2 := main.attempt(t, 1), main.attempt(t, 2)
	if main.State != "FAILED" || main.Attempt != 2 || len(main.Attempts) != 2 {
		t.Fatalf("task %+v", main)
	}
	if a2.State != "FAILED" || str(a2.ErrorCategory) != "bad_input" || a2.ExitCode == nil || *a2.ExitCode != 7 {
		t.Fatalf("attempt 2 %+v (category %s)", a2, str(a2.ErrorCategory))
	}
	if a1.State != "LOST" || str(a1.ErrorCategory) != "lost" || !slices.ContainsFunc(a1.LateEvents, func(l lateEvent) bool { return l.EventID == eventID }) {
		t.Fatalf("attempt 1 changed after the task ended: %+v", a1)
	}
	expectStates(t, s.records(id, "main"), "CREATED", "SCHEDULED", "QUEUED", "RUNNING",
		"LOST", "UP_FOR_RETRY", "SCHEDULED", "QUEUED", "RUNNING", "FAILED")
}

// 2b. retry.intervals space the retries as listed: attempt 1's failure
// waits the first interval exactly (jitter none), attempt 2's at least
// the second; the job answer shows the list as written, with jitter none.
func TestRetryIntervalsSpaceTheRetries(t *testing.T) {
	s := startStack(t, devstack.Options{})
	var calls atomic.Int32
	s.startLoggedWorker("default", "w1", s.opts.Logger, func(ctx context.Context, task worker.Task) error {
		if calls.Add(1) <= 2 {
			return worker.WithCategory(errors.New("not yet"), "not_ready")
		}
		return nil
	})
	// The first wait is long enough to be seen UP_FOR_RETRY; the second
	// is shorter than the first, which no backoff gives.
	first, second := 4*time.Second, 2*time.Second
	s.createJob(quickJob("spaced", map[string]any{
		"retry": map[string]any{"max_attempts": 3, "intervals": []string{first.String(), second.String()}},
	}))
	var job struct {
		Job struct {
			Retry struct {
				Intervals []string `json:"intervals"`
				Jitter    string   `json:"jitter"`
			} `json:"retry"`
		} `json:"job"`
	}
	if err := json.Unmarshal(s.call("GET", "/v1/jobs/spaced", nil).must(t, 200).Raw, &job); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(job.Job.Retry.Intervals, []string{"4s", "2s"}) || job.Job.Retry.Jitter != "none" {
		t.Fatalf("job answer's retry: %+v", job.Job.Retry)
	}
	id := s.trigger("spaced", nil)
	waiting := s.waitDetail(id, "main", "UP_FOR_RETRY", 30*time.Second)
	if gap := at(t, "retry_at", waiting.RetryAt).Sub(at(t, "ended_at", waiting.attempt(t, 1).EndedAt)); waiting.Attempt != 1 || gap != first {
		t.Fatalf("attempt %d waits %s for its retry, want attempt 1 and intervals[0] = %s", waiting.Attempt, gap, first)
	}
	if d := s.waitRun(id, 30*time.Second, "SUCCEEDED", "FAILED"); d.Run.ExecutionState != "SUCCEEDED" {
		t.Fatalf("run %+v", d.Run)
	}
	main := s.runDetail(id).task("main")
	if main.Attempt != 3 {
		t.Fatalf("task %+v, want 3 attempts", main)
	}
	if gap := at(t, "queued_at", main.attempt(t, 3).QueuedAt).Sub(at(t, "ended_at", main.attempt(t, 2).EndedAt)); gap < second {
		t.Fatalf("attempt 3 was queued %s after attempt 2 ended, before intervals[1] = %s", gap, second)
	}
}

// A job's retention is taken, answered as written, and its answer holds
// to the OpenAPI document (the stack checks every answer against it).
func TestJobRetentionIsAnswered(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(quickJob("kept", map[string]any{"retention": "720h"}))
	var job struct {
		Job struct {
			Retention string `json:"retention"`
		} `json:"job"`
	}
	if err := json.Unmarshal(s.call("GET", "/v1/jobs/kept", nil).must(t, 200).Raw, &job); err != nil {
		t.Fatal(err)
	}
	if job.Job.Retention != "720h" {
		t.Fatalf("retention %q, want 720h", job.Job.Retention)
	}
}
