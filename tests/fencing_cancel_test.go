package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// The SDK's log messages for a won and a refused claim (shared/worker).
const (
	logClaimed = "attempt claimed"
	logRefused = "claim refused; dropping the message"
)

// 6. One envelope reaches two workers (SQS delivers at least once): the
// fenced claim lets exactly one proceed, the handler body runs once, and the
// other worker is answered 409 already_claimed and drops its copy.
func TestOneEnvelopeTwoWorkersRunsOnce(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(quickJob("delivered-twice", map[string]any{
		"retry": map[string]any{"max_attempts": 1},
	}))
	id := s.trigger("delivered-twice", nil)

	// Take the dispatch message off the queue and put its body back twice:
	// two deliveries of one envelope, the same token in both.
	m := s.manualWorker("default")
	env, msg := m.receive(id, "main", 1)
	pool := s.Info.Queues["default"]
	for range 2 {
		if _, err := s.Queue.Send(context.Background(), pool, msg.Body, nil); err != nil {
			t.Fatalf("send the envelope again: %v", err)
		}
	}

	book := &logBook{}
	var sideEffects atomic.Int32
	handler := func(ctx context.Context, task worker.Task) error {
		sideEffects.Add(1)
		// Hold the attempt until the other copy's claim has been answered,
		// so that the answer meets a RUNNING instance; each worker runs one
		// attempt at a time, so the other copy is the other worker's.
		deadline := time.Now().Add(20 * time.Second)
		for len(book.find(logRefused)) == 0 {
			if time.Now().After(deadline) {
				return worker.Permanent(errors.New("the second delivery's claim was never answered"))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond): // a poll interval
			}
		}
		return nil
	}
	wa := s.startLoggedWorker("default", "wa", book.logger(), handler)
	wb := s.startLoggedWorker("default", "wb", book.logger(), handler)

	d := s.waitRun(id, 30*time.Second, "SUCCEEDED", "FAILED")
	if d.Run.ExecutionState != "SUCCEEDED" {
		t.Fatalf("run %+v %+v", d.Run, d.Tasks)
	}
	if n := sideEffects.Load(); n != 1 {
		t.Fatalf("the handler body ran %d times, want exactly once", n)
	}
	claimed, refused := book.find(logClaimed), book.find(logRefused)
	if len(claimed) != 1 || len(refused) != 1 {
		t.Fatalf("%d claims won and %d refused, want 1 and 1", len(claimed), len(refused))
	}
	refusal, _ := refused[0].Attrs["err"].(error)
	if !errors.Is(refusal, worker.ErrAlreadyClaimed) {
		t.Fatalf("the losing claim was answered %v, want 409 already_claimed", refusal)
	}
	winner, loser := claimed[0].Attrs["worker_id"], refused[0].Attrs["worker_id"]
	ids := map[any]bool{wa.ID(): true, wb.ID(): true}
	if winner == loser || !ids[winner] || !ids[loser] {
		t.Fatalf("won by %v, refused to %v; want one each of %s and %s", winner, loser, wa.ID(), wb.ID())
	}
	main := s.runDetail(id).task("main")
	if len(main.Attempts) != 1 || str(main.attempt(t, 1).WorkerID) != winner {
		t.Fatalf("attempts %+v, want one, claimed by %v", main.Attempts, winner)
	}
	running := 0
	for _, r := range s.records(id, "main") {
		if r.To == "RUNNING" {
			running++
		}
	}
	if running != 1 {
		t.Fatalf("%d transitions to RUNNING, want 1", running)
	}
	// Both copies are gone from the queue: the loser dropped its copy.
	eventually(t, 20*time.Second, "pool queue empty", func() (bool, string) {
		c, err := s.Queue.Counts(context.Background(), pool)
		return err == nil && c.Total() == 0, fmt.Sprintf("%+v %v", c, err)
	})
	// Any claim of the attempt now meets a terminal instance: 409
	// illegal_transition (docs/api.md, "Workers").
	if _, err := m.claim(env, "late@boot1"); !errors.Is(err, worker.ErrIllegalTransition) {
		t.Fatalf("claim of the finished attempt: %v, want 409 illegal_transition", err)
	}
}

// 7a. Cancel of a task that no worker took yet: CANCELLED at once (in the
// cancel answer itself), and a later claim with its envelope is refused.
func TestCancelQueuedTask(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(quickJob("cancel-queued", nil))
	id := s.trigger("cancel-queued", nil)
	m := s.manualWorker("default")
	env, _ := m.receive(id, "main", 1)
	s.waitTask(id, "main", "QUEUED", 30*time.Second)

	d := s.cancelTask(id, "main", "no longer needed")
	main := d.task("main")
	if main.State != "CANCELLED" || main.Status != "CANCELLED" {
		t.Fatalf("the cancel answer shows the task %s (%s), want CANCELLED at once", main.State, main.Status)
	}
	if d.Run.ExecutionState != "CANCELLED" || d.Run.Status != "CANCELLED" || d.Run.EndedAt == nil {
		t.Fatalf("the cancel answer shows the run %+v, want CANCELLED", d.Run)
	}
	a1 := main.attempt(t, 1)
	if a1.State != "CANCELLED" || str(a1.ErrorCategory) != "cancelled" || a1.WorkerID != nil || a1.StartedAt != nil {
		t.Fatalf("attempt 1 %+v (category %s)", a1, str(a1.ErrorCategory))
	}

	if _, err := m.claim(env, "tardy@boot1"); !errors.Is(err, worker.ErrIllegalTransition) {
		t.Fatalf("claim after the cancel: %v, want 409 illegal_transition", err)
	}
	if st := s.runDetail(id).task("main").State; st != "CANCELLED" {
		t.Fatalf("after the refused claim the task is %s", st)
	}
	h := s.records(id, "main")
	expectStates(t, h, "CREATED", "SCHEDULED", "QUEUED", "CANCELLED")
	if r := h[3]; r.Event != "cancel.requested" || r.Actor != "operator" || r.Reason != "no longer needed" {
		t.Fatalf("CANCELLED by %s from %s (reason %q)", r.Event, r.Actor, r.Reason)
	}
}

// 7b. Cancel of a running task: CANCELLING until the worker acknowledges.
// The SDK learns of the request from a heartbeat answer, ends the handler's
// ctx, and reports "cancelled" when the handler returns ctx.Err().
func TestCancelRunningTaskAcknowledged(t *testing.T) {
	s := startStack(t, devstack.Options{})
	var once sync.Once
	started := make(chan struct{})
	stopped := make(chan struct{})
	w := s.startLoggedWorker("default", "w1", s.opts.Logger, func(ctx context.Context, task worker.Task) error {
		once.Do(func() { close(started) })
		<-ctx.Done()
		close(stopped)
		return ctx.Err()
	})
	// The cancel timeout is long: only the acknowledgement may end
	// CANCELLING. The heartbeat timeout is roomy: on a loaded machine a short
	// lease can lapse, and then the worker stops the handler itself
	// (ErrLeaseLost) and acknowledges nothing.
	s.createJob(quickJob("cancel-running", map[string]any{
		"timeouts": map[string]any{"heartbeat": "15s", "queue": "30s", "cancel": "30s", "run": "1m"},
	}))
	id := s.trigger("cancel-running", nil)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not start within 30s")
	}
	s.waitTask(id, "main", "RUNNING", 30*time.Second)
	// The claim answered before the handler started, and the claim moved
	// the run on: a task has started, so the run is RUNNING, not QUEUED.
	if r := s.runDetail(id).Run; r.ExecutionState != "RUNNING" || r.Status != "RUNNING" {
		t.Fatalf("run %+v while its task runs, want RUNNING", r)
	}

	d := s.cancelTask(id, "main", "operator stop")
	main := d.task("main")
	if main.State != "CANCELLING" || main.Status != "RUNNING" || !main.CancelRequested {
		t.Fatalf("the cancel answer shows the task %+v, want CANCELLING with cancel requested", main)
	}
	if d.Run.ExecutionState != "RUNNING" {
		t.Fatalf("run %+v while its task is CANCELLING, want RUNNING", d.Run)
	}

	s.waitTask(id, "main", "CANCELLED", 30*time.Second)
	select {
	case <-stopped:
	default:
		t.Fatal("the task is CANCELLED but the handler's ctx never ended")
	}
	dr := s.waitRun(id, 30*time.Second, "CANCELLED")
	if dr.Run.Status != "CANCELLED" {
		t.Fatalf("run %+v", dr.Run)
	}
	main = s.runDetail(id).task("main")
	a1 := main.attempt(t, 1)
	if len(main.Attempts) != 1 || a1.State != "CANCELLED" || str(a1.ErrorCategory) != "cancelled" || str(a1.WorkerID) != w.ID() || main.CancelRequested {
		t.Fatalf("task %+v, attempt 1 %+v (category %s)", main, a1, str(a1.ErrorCategory))
	}
	h := s.records(id, "main")
	expectStates(t, h, "CREATED", "SCHEDULED", "QUEUED", "RUNNING", "CANCELLING", "CANCELLED")
	if r := h[4]; r.Event != "cancel.requested" || r.Actor != "operator" || r.Reason != "operator stop" {
		t.Fatalf("CANCELLING by %s from %s (reason %q)", r.Event, r.Actor, r.Reason)
	}
	if r := h[5]; r.Event != "attempt.cancelled" || r.Actor != "worker" || r.Attempt != 1 {
		t.Fatalf("CANCELLED by %s from %s for attempt %d, want the worker's acknowledgement", r.Event, r.Actor, r.Attempt)
	}
}

// 7c. A worker that ignores the cancel request: it hears it on a heartbeat,
// then neither acknowledges nor beats. The cancel timeout makes the instance
// LOST with the cancel still requested; the evidence window ends empty and
// the instance is CANCELLED, not retried.
func TestCancelIgnoredTimesOutThroughLost(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(quickJob("cancel-ignored", map[string]any{
		"timeouts": map[string]any{"heartbeat": "2s", "queue": "30s", "cancel": "1s", "run": "1m"},
		"retry":    map[string]any{"max_attempts": 3, "initial_interval": "200ms", "jitter": "none"},
	}))
	id := s.trigger("cancel-ignored", nil)
	m := s.manualWorker("default")
	env, _ := m.receive(id, "main", 1)
	m.mustClaim(env, "stubborn@boot1")
	hb, err := m.heartbeat(env)
	if err != nil || hb.CancelRequested {
		t.Fatalf("heartbeat before the cancel: %+v, %v", hb, err)
	}

	if st := s.cancelTask(id, "main", "stop it").task("main").State; st != "CANCELLING" {
		t.Fatalf("the cancel answer shows the task %s, want CANCELLING", st)
	}
	hb, err = m.heartbeat(env)
	if err != nil || !hb.CancelRequested {
		t.Fatalf("heartbeat while CANCELLING: %+v, %v; want 200 with cancel_requested", hb, err)
	}
	// From here the worker is silent.

	s.waitTask(id, "main", "CANCELLED", 30*time.Second)
	d := s.waitRun(id, 30*time.Second, "CANCELLED")
	if d.Run.Status != "CANCELLED" {
		t.Fatalf("run %+v", d.Run)
	}
	h := s.records(id, "main")
	expectStates(t, h, "CREATED", "SCHEDULED", "QUEUED", "RUNNING", "CANCELLING", "LOST", "CANCELLED")
	cancelling, lost, cancelled := h[4], h[5], h[6]
	if cancelling.Event != "cancel.requested" || cancelling.Actor != "operator" {
		t.Fatalf("CANCELLING by %s from %s", cancelling.Event, cancelling.Actor)
	}
	if lost.Event != "cancel.timeout" || lost.Actor != "reconciler" || lost.Attempt != 1 {
		t.Fatalf("LOST by %s from %s for attempt %d, want cancel.timeout from the reconciler", lost.Event, lost.Actor, lost.Attempt)
	}
	if cancelled.Event != "evidence.window_expired" || cancelled.Actor != "reconciler" || cancelled.Attempt != 1 {
		t.Fatalf("CANCELLED by %s from %s for attempt %d, want evidence.window_expired from the reconciler",
			cancelled.Event, cancelled.Actor, cancelled.Attempt)
	}
	cancelAt := at(t, "CANCELLING observed_at", cancelling.ObservedAt)
	lostAt := at(t, "LOST observed_at", lost.ObservedAt)
	if gap := lostAt.Sub(cancelAt); gap < time.Second {
		t.Fatalf("LOST %s after the cancel request, before the 1s cancel timeout", gap)
	}
	if gap := at(t, "CANCELLED observed_at", cancelled.ObservedAt).Sub(lostAt); gap < time.Second {
		t.Fatalf("CANCELLED %s after LOST, before the 1s evidence window ended", gap)
	}
	main := s.runDetail(id).task("main")
	if len(main.Attempts) != 1 || main.CancelRequested {
		t.Fatalf("task %+v: want no retry and the cancel request settled", main)
	}
	if a1 := main.attempt(t, 1); a1.EndedAt == nil || str(a1.WorkerID) != "stubborn@boot1" || str(a1.ErrorCategory) != "lost" {
		t.Fatalf("attempt 1 %+v (category %s)", a1, str(a1.ErrorCategory))
	}
	// An acknowledgement that comes after all changes nothing.
	_, resp, err := m.complete(env, worker.Completion{Outcome: worker.OutcomeCancelled, ErrorCategory: "cancelled"})
	if err == nil && (resp.Result == worker.ResultApplied || resp.State != "CANCELLED") {
		t.Fatalf("a late acknowledgement was answered %+v", resp)
	}
	if err != nil && !errors.Is(err, worker.ErrIllegalTransition) {
		t.Fatalf("a late acknowledgement: %v, want 409 illegal_transition", err)
	}
	if n := len(s.records(id, "main")); n != len(h) {
		t.Fatalf("the late acknowledgement added %d history records", n-len(h))
	}
}
