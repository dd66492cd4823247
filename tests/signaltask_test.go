package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
)

// approvalJob is load -> gate (a signal task) -> publish, plus cleanup
// after gate whatever its outcome (all_done).
func approvalJob(name string, gate map[string]any) map[string]any {
	g := map[string]any{"id": "gate", "depends_on": []string{"load"}, "executor": map[string]any{"type": "signal"}}
	for k, v := range gate {
		g[k] = v
	}
	return quickJob(name, map[string]any{
		"tasks": []any{
			map[string]any{"id": "load"},
			g,
			map[string]any{"id": "publish", "depends_on": []string{"gate"}},
			map[string]any{"id": "cleanup", "depends_on": []string{"gate"}, "trigger_rule": "all_done"},
		},
	})
}

// signalToken waits for the task.signal_requested notice of attempt n and
// returns its token.
func (s *stack) signalToken(run, task string, n int) string {
	s.t.Helper()
	token := ""
	eventually(s.t, 20*time.Second, fmt.Sprintf("task.signal_requested of %s/%s#%d", run, task, n), func() (bool, string) {
		page := s.notices(time.Time{})
		for _, note := range page.Notices {
			if note.Type == protocol.NoticeTaskSignalRequested && note.Run == run && note.Task == task && note.Attempt == n {
				token = note.Token
				return token != "", "token " + token
			}
		}
		return false, noticeTypes(page.Notices)
	})
	return token
}

func (s *stack) signal(auth, run, task string, body any) reply {
	s.t.Helper()
	return s.callAs(auth, "POST", "/v1/runs/"+run+"/tasks/"+task+"/signal", body)
}

// A DAG with a signal task waits at it: the attempt starts at once
// (QUEUED then RUNNING by the scheduler, executor signal, no lease) and
// nothing downstream is dispatched; the task.signal_requested token
// authorizes its signal and nothing else; bad signals are refused with
// nothing written; the approval through the token, once and again with
// the same event id, finishes the run, with who decided in the history.
func TestSignalTaskApprovedThroughToken(t *testing.T) {
	s := startStack(t, devstack.Options{})
	log := newHandlerLog()
	s.startWorker("default", "approval", 2, func(_ context.Context, task worker.Task) error {
		log.record(task)
		return nil
	})
	s.createJob(approvalJob("approval", nil))
	run := s.trigger("approval", nil)
	token := s.signalToken(run, "gate", 1)
	s.waitTask(run, "gate", "RUNNING", 10*time.Second)

	h := s.history(run, "gate")
	var actors []string
	for _, tr := range h {
		actors = append(actors, tr.Event+"/"+tr.Actor)
	}
	if got := strings.Join(actors, " "); !strings.HasSuffix(got, "dispatch.accepted/executor signal.requested/scheduler") ||
		h[len(h)-2].To != "QUEUED" || h[len(h)-1].To != "RUNNING" {
		t.Fatalf("gate's history %s, want QUEUED then RUNNING by the scheduler", got)
	}
	d := s.runDetail(run)
	if a := d.task("gate").attempt(t, 1); a.LastHeartbeatAt != nil || a.WorkerID != nil {
		t.Fatalf("signal attempt has a worker or a heartbeat: %+v", a)
	}
	for _, down := range []string{"publish", "cleanup"} {
		if st := d.task(down).State; st != "CREATED" || log.count(run, down) != 0 {
			t.Fatalf("%s is %s, ran %d times while gate waits", down, st, log.count(run, down))
		}
	}

	// The token authorizes this signal only.
	if r := s.callAs("Bearer "+token, "GET", "/v1/runs/"+run, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("token read the run: %d %s", r.Status, r.Raw)
	}
	hb := map[string]any{"run": run, "task": "gate", "attempt": 1, "event_id": "hb-1"}
	if r := s.callAs("Bearer "+token, "POST", "/v1/attempts/heartbeat", hb); r.code() != "invalid_token" {
		t.Fatalf("token heartbeat: %d %s", r.Status, r.Raw)
	}
	if r := s.signal("Bearer "+token, run, "publish", map[string]any{"outcome": "succeeded", "by": "x"}); r.code() != "invalid_token" {
		t.Fatalf("token on another task: %d %s", r.Status, r.Raw)
	}

	// Bad input: a 4xx with a code and a sentence, nothing written.
	before := len(s.history(run, "gate"))
	for name, tc := range map[string]struct {
		auth   string
		body   any
		status int
		code   string
	}{
		"no bearer":      {"", map[string]any{"outcome": "succeeded", "by": "a"}, 401, "unauthorized"},
		"wrong token":    {"Bearer nope", map[string]any{"outcome": "succeeded", "by": "a"}, 401, "invalid_token"},
		"bad outcome":    {"Bearer " + token, map[string]any{"outcome": "maybe", "by": "a"}, 422, "invalid_field"},
		"no by":          {"Bearer " + token, map[string]any{"outcome": "succeeded"}, 422, "invalid_field"},
		"by too long":    {"Bearer " + token, map[string]any{"outcome": "succeeded", "by": strings.Repeat("b", 129)}, 413, "payload_too_large"},
		"reason too big": {"Bearer " + token, map[string]any{"outcome": "failed", "by": "a", "reason": strings.Repeat("r", 4097)}, 413, "payload_too_large"},
		"bad event id":   {"Bearer " + token, map[string]any{"outcome": "succeeded", "by": "a", "event_id": "a:b"}, 422, "invalid_field"},
		"unknown field":  {"Bearer " + token, map[string]any{"outcome": "succeeded", "by": "a", "colour": "red"}, 422, "invalid_field"},
		"not json":       {"Bearer " + token, "{", 400, "invalid_json"},
	} {
		r := s.signal(tc.auth, run, "gate", tc.body)
		if r.Status != tc.status || r.code() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", name, r.Status, r.Raw, tc.status, tc.code)
		}
		oneSentence(t, name, r)
	}
	op := map[string]any{"outcome": "succeeded", "by": "ana"}
	if r := s.signal("Bearer "+s.key, run, "cleanup", op); r.Status != http.StatusConflict || r.code() != "illegal_transition" {
		t.Errorf("signal of a waiting CREATED task: %d %s", r.Status, r.Raw)
	}
	if r := s.signal("Bearer "+s.key, "no-such-run", "gate", op); r.Status != http.StatusNotFound || r.code() != "not_found" {
		t.Errorf("signal of an unknown run: %d %s", r.Status, r.Raw)
	}
	if after := len(s.history(run, "gate")); after != before {
		t.Fatalf("bad signals wrote %d records", after-before)
	}

	approve := map[string]any{"outcome": "succeeded", "by": "partner-system", "reason": "order confirmed", "event_id": "cb-1"}
	r := s.signal("Bearer "+token, run, "gate", approve).must(t, http.StatusOK)
	if r.Body["run"].(map[string]any)["id"] != run {
		t.Fatalf("signal answered %s, want the run", r.Raw)
	}
	s.signal("Bearer "+token, run, "gate", approve).must(t, http.StatusOK)
	s.waitRun(run, 30*time.Second, "SUCCEEDED")
	h = s.history(run, "gate")
	last := h[len(h)-1]
	if last.Event != "signal.succeeded" || last.Actor != "operator" || last.Evidence["by"] != "partner-system" || last.To != "SUCCEEDED" {
		t.Fatalf("gate's last record %+v", last)
	}
	if n := strings.Count(strings.Join(states(h), ","), "SUCCEEDED"); n != 1 {
		t.Fatalf("approval applied %d times", n)
	}
	if log.count(run, "publish") != 1 || log.count(run, "cleanup") != 1 {
		t.Fatalf("publish ran %d, cleanup %d times", log.count(run, "publish"), log.count(run, "cleanup"))
	}
	// Settled: another signal is refused.
	again := map[string]any{"outcome": "failed", "by": "ana", "event_id": "cb-2"}
	if r := s.signal("Bearer "+s.key, run, "gate", again); r.Status != http.StatusConflict || r.code() != "illegal_transition" {
		t.Fatalf("signal of a settled task: %d %s", r.Status, r.Raw)
	}
	if r := s.signal("Bearer "+s.key, run, "publish", again); r.Status != http.StatusConflict || r.code() != "illegal_transition" {
		t.Fatalf("signal of a worker's task: %d %s", r.Status, r.Raw)
	}
}

// A rejection (by the operator, through the CLI) fails the signal task with no
// retry left; its downstream follows the trigger rules: publish
// (all_success) ends UPSTREAM_FAILED, cleanup (all_done) runs.
func TestSignalTaskRejectedFailsDownstream(t *testing.T) {
	s := startStack(t, devstack.Options{})
	log := newHandlerLog()
	s.startWorker("default", "rejection", 2, func(_ context.Context, task worker.Task) error {
		log.record(task)
		return nil
	})
	s.createJob(approvalJob("rejection", map[string]any{"retry": map[string]any{"max_attempts": 1}}))
	run := s.trigger("rejection", nil)
	s.signalToken(run, "gate", 1)
	c := newCLI(t, s)
	c.must(t, 2, "runs", "signal", run, "gate", "--approve", "--reject")
	c.must(t, 0, "runs", "signal", run, "gate", "--reject", "--by", "ana", "--reason", "numbers look wrong")
	d := s.waitRun(run, 30*time.Second, "FAILED")
	if st := d.task("gate").State; st != "FAILED" {
		t.Fatalf("gate %s", st)
	}
	if st := d.task("publish").State; st != "UPSTREAM_FAILED" || log.count(run, "publish") != 0 {
		t.Fatalf("publish %s, ran %d times", st, log.count(run, "publish"))
	}
	if st := d.task("cleanup").State; st != "SUCCEEDED" || log.count(run, "cleanup") != 1 {
		t.Fatalf("cleanup %s, ran %d times", st, log.count(run, "cleanup"))
	}
	h := s.history(run, "gate")
	last := h[len(h)-1]
	if last.Event != "signal.failed" || last.Actor != "operator" || last.Evidence["by"] != "ana" || last.Reason != "numbers look wrong" {
		t.Fatalf("gate's last record %+v", last)
	}
	if c := s.runDetail(run).task("gate").attempt(t, 1).ErrorCategory; c == nil || *c != "rejected" {
		t.Fatalf("error category %v, want rejected", c)
	}
}

// The run timeout bounds the wait: the attempt ends with category timeout,
// the retry policy gives a new attempt with a new token and a new event;
// the old token is then refused (409 stale_attempt, recorded as a late
// event) and the new one approves it. The reconciler never makes it LOST.
func TestSignalTaskTimesOutAndRetriesWithNewToken(t *testing.T) {
	clock := runningClock()
	s := startStack(t, devstack.Options{Now: clock.Now})
	s.startWorker("default", "timeout", 2, func(context.Context, worker.Task) error { return nil })
	s.createJob(approvalJob("timeout", map[string]any{"timeouts": map[string]any{"run": "1h"}}))
	run := s.trigger("timeout", nil)
	first := s.signalToken(run, "gate", 1)
	s.waitTask(run, "gate", "RUNNING", 10*time.Second)
	clock.Add(time.Hour + time.Second) // the run timeout passes
	second := s.signalToken(run, "gate", 2)
	if first == second {
		t.Fatal("the retry's token is the first attempt's")
	}
	s.waitTask(run, "gate", "RUNNING", 10*time.Second)
	d := s.runDetail(run)
	if c := d.task("gate").attempt(t, 1).ErrorCategory; c == nil || *c != "timeout" {
		t.Fatalf("attempt 1 category %v, want timeout", c)
	}
	r := s.signal("Bearer "+first, run, "gate", map[string]any{"outcome": "succeeded", "by": "late-partner", "event_id": "late-1"})
	if r.Status != http.StatusConflict || r.code() != "stale_attempt" {
		t.Fatalf("old token: %d %s", r.Status, r.Raw)
	}
	late := s.runDetail(run).task("gate").attempt(t, 1).LateEvents
	if len(late) != 1 || late[0].Event != "signal.succeeded" {
		t.Fatalf("late events of attempt 1: %+v", late)
	}
	s.signal("Bearer "+second, run, "gate", map[string]any{"outcome": "succeeded", "by": "partner"}).must(t, http.StatusOK)
	s.waitRun(run, 30*time.Second, "SUCCEEDED")
	for _, st := range states(s.history(run, "gate")) {
		if st == "LOST" || st == "CANCELLING" {
			t.Fatalf("gate went %s: %v", st, states(s.history(run, "gate")))
		}
	}
}
