package tests

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/shared/api/apitest"
	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/statemodel"
)

// newClient is a typed client of the stack's API. Its requests and the
// answers it gets are checked against the OpenAPI document: the client
// agrees with the document (the server's side of every answer is checked
// by the stack itself, see checkAnswers).
func (s *stack) newClient() *client.Client {
	s.t.Helper()
	v, err := apitest.New()
	if err != nil {
		s.t.Fatal(err)
	}
	rt := v.Transport(nil, func(err error) { s.t.Errorf("client vs OpenAPI: %v", err) }, nil)
	c, err := client.New(context.Background(), client.Options{URL: s.url, APIKey: s.key, HTTPClient: &http.Client{Transport: rt}})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) || e.Code != code || e.Message == "" {
		t.Fatalf("error %v, want an *client.Error with code %s and a message", err, code)
	}
}

// TestClientFirstJob runs the package example's lines against the local
// stack: define a job, run it, wait for it.
func TestClientFirstJob(t *testing.T) {
	s := startStack(t, devstack.Options{DemoWorker: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.newClient()
	_, err := c.CreateJob(ctx, json.RawMessage(`{"name": "hello", "pool": "demo", "payload": {"sleep": "1s"}}`))
	if err != nil && client.ErrorCode(err) != client.CodeConflict {
		t.Fatal(err)
	}
	run, _, err := c.TriggerRun(ctx, "hello", client.Trigger{})
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.WaitRun(ctx, run.Run.ID, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if done.Run.Status != statemodel.StatusSucceeded || len(done.Tasks) != 1 || done.Tasks[0].Attempts[0].OutputRef == "" {
		t.Fatalf("run %+v", done)
	}
}

func TestClientJobs(t *testing.T) {
	s := startStack(t, devstack.Options{})
	ctx := context.Background()
	c := s.newClient()
	for _, name := range []string{"a-job", "b-job"} {
		j, err := c.CreateJob(ctx, map[string]any{"name": name, "schedule": map[string]string{"rate": "5m"}, "pool": "default"})
		if err != nil {
			t.Fatal(err)
		}
		if j.Job.Name != name || j.Version != 1 || j.Paused || j.NextFireTime.IsZero() || j.CreatedAt.IsZero() {
			t.Fatalf("created %+v", j)
		}
	}
	_, err := c.CreateJob(ctx, map[string]any{"name": "a-job"})
	wantCode(t, err, client.CodeConflict)
	_, err = c.CreateJob(ctx, map[string]any{"name": "c-job", "schedule": map[string]string{"cron": "not a cron"}})
	wantCode(t, err, client.CodeInvalidCron)

	var names []string
	page := client.Page{Limit: 1}
	for {
		p, err := c.ListJobs(ctx, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range p.Jobs {
			names = append(names, j.Job.Name)
		}
		if p.NextToken == "" {
			break
		}
		page.NextToken = p.NextToken
	}
	if len(names) != 2 {
		t.Fatalf("listed %v over pages of one, want both jobs", names)
	}

	j, err := c.GetJob(ctx, "a-job")
	if err != nil || j.Job.Pool != "default" {
		t.Fatalf("get: %+v %v", j, err)
	}
	upd, err := c.UpdateJob(ctx, "a-job", j.Version, map[string]any{"schedule": map[string]string{"rate": "10m"}, "pool": "demo"})
	if err != nil || upd.Version != j.Version+1 || upd.Job.Pool != "demo" || upd.Job.Schedule.Rate != 10*time.Minute {
		t.Fatalf("update: %+v %v", upd, err)
	}
	_, err = c.UpdateJob(ctx, "a-job", j.Version, map[string]any{"pool": "default"})
	wantCode(t, err, client.CodeVersionConflict)

	if p, err := c.PauseJob(ctx, "a-job"); err != nil || !p.Paused || !p.NextFireTime.IsZero() {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if r, err := c.ResumeJob(ctx, "a-job"); err != nil || r.Paused || r.NextFireTime.IsZero() {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if err := c.DeleteJob(ctx, "a-job"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetJob(ctx, "a-job")
	wantCode(t, err, client.CodeNotFound)
}

func TestClientRuns(t *testing.T) {
	s := startStack(t, devstack.Options{DemoWorker: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.newClient()
	mustCreate := func(def string) {
		t.Helper()
		if _, err := c.CreateJob(ctx, json.RawMessage(def)); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(`{"name": "ok", "pool": "demo"}`)
	mustCreate(`{"name": "bad", "pool": "demo", "payload": {"fail": true, "permanent": true}, "retry": {"max_attempts": 1}}`)
	mustCreate(`{"name": "slow", "pool": "demo", "tasks": [
		{"id": "first", "payload": {"sleep": "1m"}}, {"id": "second", "depends_on": ["first"]}]}`)

	// Trigger with params, logical time and an idempotency key; the same
	// key again answers the same run without creating one.
	lt := time.Date(2026, 5, 1, 2, 0, 0, 0, time.UTC)
	tr := client.Trigger{IdempotencyKey: "once", Params: map[string]string{"day": "2026-05-01"}, LogicalTime: lt}
	first, created, err := c.TriggerRun(ctx, "ok", tr)
	if err != nil || !created || !first.Run.LogicalTime.Equal(lt) || string(first.Run.Params) != `{"day":"2026-05-01"}` {
		t.Fatalf("trigger: %+v created=%v %v", first.Run, created, err)
	}
	again, created, err := c.TriggerRun(ctx, "ok", tr)
	if err != nil || created || again.Run.ID != first.Run.ID {
		t.Fatalf("trigger again: %s created=%v %v, want %s not created", again.Run.ID, created, err, first.Run.ID)
	}
	okRun, err := c.WaitRun(ctx, first.Run.ID, 100*time.Millisecond)
	if err != nil || okRun.Run.ExecutionState != statemodel.RunSucceeded {
		t.Fatalf("ok run: %+v %v", okRun.Run, err)
	}
	h, err := c.History(ctx, first.Run.ID, "main", client.Page{})
	if err != nil || len(h.Transitions) < 4 || h.Transitions[0].To != statemodel.StateCreated ||
		h.Transitions[len(h.Transitions)-1].To != statemodel.StateSucceeded {
		t.Fatalf("history: %+v %v", h, err)
	}
	h2, err := c.History(ctx, first.Run.ID, "main", client.Page{Limit: 2})
	if err != nil || len(h2.Transitions) != 2 || h2.NextToken == "" {
		t.Fatalf("history page of 2: %+v %v", h2, err)
	}

	// A failed run: retry gives a new attempt; mark-succeeded ends it.
	bad, _, err := c.TriggerRun(ctx, "bad", client.Trigger{})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := c.WaitRun(ctx, bad.Run.ID, 100*time.Millisecond); err != nil || d.Run.Status != statemodel.StatusFailed {
		t.Fatalf("bad run: %+v %v", d.Run, err)
	}
	retried, err := c.RetryTask(ctx, bad.Run.ID, "main", client.Retry{Operator: "ann", Reason: "try again"})
	if err != nil || retried.Tasks[0].Attempt != 2 || retried.Run.Ended() {
		t.Fatalf("retry: %+v %v", retried, err)
	}
	if d, err := c.WaitRun(ctx, bad.Run.ID, 100*time.Millisecond); err != nil || d.Run.Status != statemodel.StatusFailed {
		t.Fatalf("retried run: %+v %v", d.Run, err)
	}
	// A request the document refuses (an override needs operator and
	// reason): sent without the client-side check, the server refuses it.
	plain, err := client.New(ctx, client.Options{URL: s.url, APIKey: s.key})
	if err != nil {
		t.Fatal(err)
	}
	_, err = plain.MarkSucceeded(ctx, bad.Run.ID, "main", "", "")
	wantCode(t, err, client.CodeInvalidField)
	marked, err := c.MarkSucceeded(ctx, bad.Run.ID, "main", "ann", "checked by hand")
	if err != nil || marked.Tasks[0].State != statemodel.StateSucceeded || marked.Run.Status != statemodel.StatusSucceeded {
		t.Fatalf("mark succeeded: %+v %v", marked, err)
	}
	marked, err = c.MarkFailed(ctx, bad.Run.ID, "main", "ann", "it was wrong after all")
	if err != nil || marked.Tasks[0].State != statemodel.StateFailed {
		t.Fatalf("mark failed: %+v %v", marked, err)
	}
	_, err = c.RetryTask(ctx, okRun.Run.ID, "main", client.Retry{})
	wantCode(t, err, client.CodeIllegalTransition)

	// A long run: pause holds its waiting task, resume returns it, cancel
	// ends it.
	slow, _, err := c.TriggerRun(ctx, "slow", client.Trigger{})
	if err != nil {
		t.Fatal(err)
	}
	paused, err := c.PauseRun(ctx, slow.Run.ID, "hold")
	if err != nil || taskState(paused, "second") != statemodel.StatePaused {
		t.Fatalf("pause: %+v %v", paused.Tasks, err)
	}
	resumed, err := c.ResumeRun(ctx, slow.Run.ID, "go on")
	if err != nil || taskState(resumed, "second") != statemodel.StateCreated {
		t.Fatalf("resume: %+v %v", resumed.Tasks, err)
	}
	if _, err := c.CancelTask(ctx, slow.Run.ID, "second", "not needed"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CancelRun(ctx, slow.Run.ID, "enough"); err != nil {
		t.Fatal(err)
	}
	if d, err := c.WaitRun(ctx, slow.Run.ID, 100*time.Millisecond); err != nil || d.Run.Status != statemodel.StatusCancelled {
		t.Fatalf("cancelled run: %+v %v", d.Run, err)
	}

	// Lists: by job, by status, every page.
	failed, err := c.ListRuns(ctx, client.RunFilter{Status: statemodel.StatusFailed})
	if err != nil || len(failed.Runs) != 1 || failed.Runs[0].ID != bad.Run.ID {
		t.Fatalf("failed runs: %+v %v", failed, err)
	}
	ofOK, err := c.ListRuns(ctx, client.RunFilter{Job: "ok"})
	if err != nil || len(ofOK.Runs) != 1 {
		t.Fatalf("runs of ok: %+v %v", ofOK, err)
	}
	var all []string
	for r, err := range c.AllRuns(ctx, client.RunFilter{Page: client.Page{Limit: 1}}) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, r.ID)
	}
	if len(all) != 3 || all[0] != slow.Run.ID {
		t.Fatalf("all runs newest first over pages of one: %v", all)
	}
	_, err = c.GetRun(ctx, "nope")
	if client.ErrorCode(err) == "" {
		t.Fatalf("an unknown run: %v", err)
	}
}

func taskState(d client.RunDetail, task string) statemodel.InstanceState {
	for _, t := range d.Tasks {
		if t.Task == task {
			return t.State
		}
	}
	return ""
}
