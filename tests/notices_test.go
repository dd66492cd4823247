package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/protocol"
)

// notices reads GET /v1/events from since and decodes the page.
func (s *stack) notices(since time.Time) protocol.NoticePage {
	s.t.Helper()
	r := s.call("GET", "/v1/events?since="+url.QueryEscape(protocol.FormatTime(since)), nil).must(s.t, http.StatusOK)
	var page protocol.NoticePage
	if err := json.Unmarshal(r.Raw, &page); err != nil {
		s.t.Fatalf("notices: %v: %s", err, r.Raw)
	}
	return page
}

func noticeTypes(notices []protocol.Notice) string {
	var out []string
	for _, n := range notices {
		out = append(out, string(n.Type))
	}
	return strings.Join(out, ",")
}

// scrape reads GET /metrics with no credentials, as Prometheus would.
func (s *stack) scrape() string {
	s.t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		s.t.Fatalf("GET /metrics: %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return string(b)
}

// TestNoticesOfAFailingRun runs a job whose task fails for good on the
// local stack, then reads GET /v1/events (task.failed, then run.failed,
// with the run's job, id, state and reason) and GET /metrics (the
// transitions of its one task counted by job, from and to; the time it
// spent running; the instances gauge).
func TestNoticesOfAFailingRun(t *testing.T) {
	s := startStack(t, devstack.Options{DemoWorker: true})
	before := time.Now().Add(-time.Second)
	s.createJob(map[string]any{"name": "bad", "pool": "demo", "retry": map[string]any{"max_attempts": 1},
		"payload": map[string]any{"fail": true, "permanent": true}})
	run := s.trigger("bad", nil)
	s.waitRun(run, 30*time.Second, "FAILED")

	var page protocol.NoticePage
	eventually(t, 10*time.Second, "the run's notices", func() (bool, string) {
		page = s.notices(before)
		return noticeTypes(page.Notices) == "task.failed,run.failed", noticeTypes(page.Notices)
	})
	task, ended := page.Notices[0], page.Notices[1]
	if task.Job != "bad" || task.Run != run || task.Task != "main" || task.Attempt != 1 || task.State != "FAILED" || task.Reason == "" {
		t.Errorf("task.failed %+v", task)
	}
	if ended.Job != "bad" || ended.Run != run || ended.Task != "" || ended.State != "FAILED" || ended.Reason != "tasks: main FAILED" || page.NextToken != "" {
		t.Errorf("run.failed %+v, next token %q", ended, page.NextToken)
	}
	if later := s.notices(ended.Time.Add(time.Millisecond)); len(later.Notices) != 0 {
		t.Errorf("notices after the last: %s", noticeTypes(later.Notices))
	}
	if r := s.callAs("", "GET", "/v1/events", nil); r.Status != http.StatusUnauthorized {
		t.Errorf("notices without the key: %d, want 401", r.Status)
	}
	if r := s.call("GET", "/v1/events?since=yesterday", nil); r.Status != http.StatusUnprocessableEntity || r.code() != "invalid_field" {
		t.Errorf("a bad since: %d %s, want 422 invalid_field", r.Status, r.code())
	}

	page2 := s.scrape()
	for _, want := range []string{
		`runledger_state_transitions_total{from="",job="bad",to="CREATED"} 1`,
		`runledger_state_transitions_total{from="CREATED",job="bad",to="SCHEDULED"} 1`,
		`runledger_state_transitions_total{from="SCHEDULED",job="bad",to="QUEUED"} 1`,
		`runledger_state_transitions_total{from="QUEUED",job="bad",to="RUNNING"} 1`,
		`runledger_state_transitions_total{from="RUNNING",job="bad",to="FAILED"} 1`,
		`runledger_state_duration_seconds_count{job="bad",state="RUNNING"} 1`,
		`runledger_state_duration_seconds_count{job="bad",state="QUEUED"} 1`,
		`runledger_instances{state="FAILED"} 1`,
		`runledger_instances{state="RUNNING"} 0`,
		// The run's one instance ended: no state holds an instance.
		`runledger_oldest_in_state_seconds{state="RUNNING"} 0`,
		`runledger_oldest_in_state_seconds{state="PAUSED"} 0`,
		`runledger_transition_lag_seconds_count{event="instance.created"} 1`,
		`runledger_transition_lag_seconds_count{event="attempt.started"} 1`,
	} {
		if !strings.Contains(page2, want+"\n") {
			t.Errorf("GET /metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("GET /metrics:\n%s", page2)
	}
}

// TestDeadlineMissedNotice: a run still running at its job's deadline gets
// one run.deadline_missed notice and goes on to succeed.
func TestDeadlineMissedNotice(t *testing.T) {
	s := startStack(t, devstack.Options{DemoWorker: true})
	before := time.Now().Add(-time.Second)
	s.createJob(map[string]any{"name": "slow", "pool": "demo", "deadline": "1s", "payload": map[string]any{"sleep": "3s"}})
	run := s.trigger("slow", nil)
	s.waitRun(run, 30*time.Second, "SUCCEEDED")
	var page protocol.NoticePage
	eventually(t, 10*time.Second, "the run's notices", func() (bool, string) {
		page = s.notices(before)
		return noticeTypes(page.Notices) == "run.deadline_missed,run.succeeded", noticeTypes(page.Notices)
	})
	if d := page.Notices[0]; d.Run != run || d.State != "RUNNING" || !strings.Contains(d.Reason, "1s") {
		t.Errorf("run.deadline_missed %+v", d)
	}
	if r := s.call("GET", "/v1/jobs/slow", nil).must(t, http.StatusOK); fmt.Sprint(r.Body["job"].(map[string]any)["deadline"]) != "1s" {
		t.Errorf("the job's deadline: %s", r.Raw)
	}
}
