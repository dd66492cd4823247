package tests

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/worker"
)

// 11. Bad input gets the right 4xx status and code with a one-sentence
// message, and writes nothing: the whole table (read with a consistent
// Scan, every attribute of every item) and every queue's counts are the
// same after each bad request as before it. The worker routes are driven
// by hand with real envelopes, so that an attempt 2 exists and attempt 1's
// genuine token is stale.
func TestBadInputWritesNothing(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(map[string]any{
		"name":  "victim",
		"retry": map[string]any{"max_attempts": 3, "initial_interval": "1s", "jitter": "none"},
	})
	// A schedule that fires once a year, so that nothing fires while the
	// cases run.
	s.createJob(map[string]any{"name": "yearly", "schedule": map[string]any{"cron": "0 0 1 1 *", "timezone": "UTC"}})
	run := s.trigger("victim", nil)
	// A job of the concurrency group "warehouse": another job may not give
	// the group another limit.
	s.createJob(map[string]any{"name": "pooled", "concurrency": map[string]any{"limit": 2, "group": "warehouse"}})

	// Attempt 1: claimed and failed by hand; attempt 2 is then queued.
	env1 := takeEnvelope(t, s, run, 1)
	bearerOf := func(env worker.Envelope) string { return "Bearer " + env.Token }
	ref := func(attempt int) map[string]any {
		return map[string]any{"run": run, "task": "main", "attempt": attempt}
	}
	with := func(m map[string]any, kv ...any) map[string]any {
		out := maps.Clone(m)
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	s.callAs(bearerOf(env1), "POST", "/v1/attempts/claim", with(ref(1), "worker_id", "probe", "event_id", "claim-1")).must(t, http.StatusOK)
	s.callAs(bearerOf(env1), "POST", "/v1/attempts/complete",
		with(ref(1), "event_id", "fail-1", "outcome", "failed", "error_category", "probe")).must(t, http.StatusOK)
	s.waitTask(run, "main", "QUEUED", 30*time.Second)
	if td := s.run(run).task("main"); td.Attempt != 2 {
		t.Fatalf("attempt %d queued, want 2", td.Attempt)
	}
	// Quiet: attempt 2's envelope waits in the pool queue and nothing else
	// is in flight anywhere (the retry's delay message is consumed). The
	// delay queue may hold timers still delayed (the attempts' queue
	// timeouts and attempt 1's lease end): when one comes due it finds
	// nothing to do and writes nothing.
	eventually(t, 30*time.Second, "queues settle", func() (bool, string) {
		c := s.queueCounts()
		quiet := c["default"] == queue.Counts{Visible: 1}
		for name, n := range c {
			if name == "delay" {
				n.Delayed = 0
			}
			if name != "default" && n.Total() != 0 {
				quiet = false
			}
		}
		return quiet, fmt.Sprint(c)
	})

	big := func(n int) string { return strings.Repeat("x", n) }
	validJob := map[string]any{"name": "victim", "retry": map[string]any{"max_attempts": 2}}
	forged := "Bearer 0123456789abcdef0123456789abcdef"
	cases := []struct {
		name         string
		auth         string // "" sends none; "key" the API key
		method, path string
		body         any
		headers      []string
		status       int
		code         string
	}{
		{"malformed JSON job", "key", "POST", "/v1/jobs", `{"name": "broken",`, nil, 400, "invalid_json"},
		{"malformed JSON run", "key", "POST", "/v1/jobs/victim/runs", `{"params": {`, nil, 400, "invalid_json"},
		{"malformed JSON claim", bearerOf(env1), "POST", "/v1/attempts/claim", `{"run":`, nil, 400, "invalid_json"},
		{"invalid cron", "key", "POST", "/v1/jobs", map[string]any{"name": "badcron", "schedule": map[string]any{"cron": "61 * * * *"}}, nil, 422, "invalid_cron"},
		{"invalid time zone", "key", "POST", "/v1/jobs", map[string]any{"name": "badtz",
			"schedule": map[string]any{"cron": "0 2 * * *", "timezone": "Mars/Olympus_Mons"}}, nil, 422, "invalid_timezone"},
		{"invalid cron on update", "key", "PUT", "/v1/jobs/victim", map[string]any{"name": "victim",
			"schedule": map[string]any{"cron": "* * * *"}}, []string{"If-Match", "1"}, 422, "invalid_cron"},
		{"retry intervals with an initial interval", "key", "POST", "/v1/jobs", map[string]any{"name": "spaced",
			"retry": map[string]any{"intervals": []string{"30s", "5m"}, "initial_interval": "10s"}}, nil, 422, "invalid_field"},
		{"retry interval over a day on update", "key", "PUT", "/v1/jobs/victim", map[string]any{"name": "victim",
			"tasks": []any{map[string]any{"id": "main", "retry": map[string]any{"intervals": []string{"25h"}}}}}, []string{"If-Match", "1"}, 422, "invalid_field"},
		{"payload over 64 KiB", "key", "POST", "/v1/jobs", map[string]any{"name": "bigpayload",
			"payload": map[string]any{"blob": big(65 * 1024)}}, nil, 413, "payload_too_large"},
		{"params over 64 KiB", "key", "POST", "/v1/jobs/victim/runs", map[string]any{
			"params": map[string]any{"blob": big(65 * 1024)}}, nil, 413, "payload_too_large"},
		{"job body over 1 MiB", "key", "POST", "/v1/jobs", map[string]any{"name": "huge",
			"payload": map[string]any{"blob": big(1<<20 + 1024)}}, nil, 413, "payload_too_large"},
		{"run body over 1 MiB", "key", "POST", "/v1/jobs/victim/runs", map[string]any{
			"params": map[string]any{"blob": big(1<<20 + 1024)}}, nil, 413, "payload_too_large"},
		{"forged token claim", forged, "POST", "/v1/attempts/claim", with(ref(2), "worker_id", "forger", "event_id", "forged-0"), nil, 401, "invalid_token"},
		{"forged token complete", forged, "POST", "/v1/attempts/complete",
			with(ref(2), "event_id", "forged-1", "outcome", "succeeded"), nil, 401, "invalid_token"},
		{"job body not UTF-8", "key", "POST", "/v1/jobs", "{\"name\": \"utf\", \"payload\": \"\xff\"}", nil, 400, "invalid_json"},
		{"run body not UTF-8", "key", "POST", "/v1/jobs/victim/runs", "{\"params\": {\"p\": \"\xff\"}}", nil, 400, "invalid_json"},
		{"params the queue cannot carry", "key", "POST", "/v1/jobs/victim/runs", map[string]any{
			"params": map[string]any{"p": "\uffff"}}, nil, 422, "invalid_field"},
		// Worker routes: bearer, then body shape and limits, then token.
		{"missing bearer before limits", "", "POST", "/v1/attempts/complete",
			with(ref(2), "event_id", "big-ref", "outcome", "succeeded", "output_ref", big(2049)), nil, 401, "unauthorized"},
		{"output_ref over 2 KiB, before the token", forged, "POST", "/v1/attempts/complete",
			with(ref(2), "event_id", "big-ref", "outcome", "succeeded", "output_ref", big(2049)), nil, 413, "payload_too_large"},
		{"error_category over 64 characters", forged, "POST", "/v1/attempts/complete",
			with(ref(2), "event_id", "long-cat", "outcome", "failed", "error_category", big(65)), nil, 413, "payload_too_large"},
		{"error_category not snake_case", forged, "POST", "/v1/attempts/complete",
			with(ref(2), "event_id", "bad-cat", "outcome", "failed", "error_category", "Not Snake"), nil, 422, "invalid_field"},
		{"reason over 4 KiB", forged, "POST", "/v1/attempts/complete",
			with(ref(2), "event_id", "big-reason", "outcome", "failed", "reason", big(4097)), nil, 413, "payload_too_large"},
		{"forged token heartbeat", forged, "POST", "/v1/attempts/heartbeat", with(ref(2), "event_id", "hb-1"), nil, 401, "invalid_token"},
		{"attempt 1's token for attempt 2", bearerOf(env1), "POST", "/v1/attempts/claim", with(ref(2), "worker_id", "probe", "event_id", "c-9"), nil, 401, "invalid_token"},
		{"unknown run", bearerOf(env1), "POST", "/v1/attempts/claim",
			map[string]any{"run": "01NOSUCHRUN0000000000000000", "task": "main", "attempt": 1, "worker_id": "probe", "event_id": "c-9"}, nil, 401, "invalid_token"},
		// Event ids: required on every worker route, the client's alphabet
		// only (the scheduler's ids hold a colon); checked with the body,
		// after the bearer and before the token.
		{"missing bearer before event_id", "", "POST", "/v1/attempts/heartbeat", ref(2), nil, 401, "unauthorized"},
		{"claim without event_id, before the token", forged, "POST", "/v1/attempts/claim", with(ref(2), "worker_id", "probe"), nil, 422, "invalid_field"},
		{"heartbeat without event_id", forged, "POST", "/v1/attempts/heartbeat", ref(2), nil, 422, "invalid_field"},
		{"complete without event_id", forged, "POST", "/v1/attempts/complete", with(ref(2), "outcome", "succeeded"), nil, 422, "invalid_field"},
		{"the scheduler's dispatch id", forged, "POST", "/v1/attempts/claim", with(ref(2), "worker_id", "probe", "event_id", "dispatch:2"), nil, 422, "invalid_field"},
		{"the scheduler's deps id", forged, "POST", "/v1/attempts/complete", with(ref(2), "event_id", "deps", "outcome", "succeeded"), nil, 422, "invalid_field"},
		{"event_id over 128 characters", forged, "POST", "/v1/attempts/heartbeat", with(ref(2), "event_id", big(129)), nil, 422, "invalid_field"},
		{"event_id with a space", bearerOf(env1), "POST", "/v1/attempts/heartbeat", with(ref(1), "event_id", "hb late"), nil, 422, "invalid_field"},
		{"missing bearer on claim", "", "POST", "/v1/attempts/claim", with(ref(2), "worker_id", "anon", "event_id", "c-9"), nil, 401, "unauthorized"},
		{"missing API key", "", "POST", "/v1/jobs", map[string]any{"name": "sneaky"}, nil, 401, "unauthorized"},
		{"wrong API key", "Bearer not-the-key", "POST", "/v1/jobs/victim/runs", nil, nil, 401, "unauthorized"},
		{"stale claim", bearerOf(env1), "POST", "/v1/attempts/claim", with(ref(1), "worker_id", "late", "event_id", "claim-late"), nil, 409, "stale_attempt"},
		{"stale heartbeat", bearerOf(env1), "POST", "/v1/attempts/heartbeat", with(ref(1), "event_id", "hb-late"), nil, 409, "stale_attempt"},
		{"unknown job trigger", "key", "POST", "/v1/jobs/nope/runs", nil, nil, 404, "not_found"},
		{"unknown job get", "key", "GET", "/v1/jobs/nope", nil, nil, 404, "not_found"},
		{"unknown job update", "key", "PUT", "/v1/jobs/nope", map[string]any{"name": "nope"}, []string{"If-Match", "1"}, 404, "not_found"},
		{"wrong If-Match", "key", "PUT", "/v1/jobs/victim", validJob, []string{"If-Match", "7"}, 412, "version_conflict"},
		{"job exists", "key", "POST", "/v1/jobs", map[string]any{"name": "victim"}, nil, 409, "conflict"},
		// Wave 2 additions.
		{"backfill max_active 0", "key", "POST", "/v1/jobs/yearly/backfill", backfill(2000, 2003, 0), nil, 422, "invalid_field"},
		{"backfill max_active 101", "key", "POST", "/v1/jobs/yearly/backfill", backfill(2000, 2003, 101), nil, 422, "invalid_field"},
		{"backfill from after to", "key", "POST", "/v1/jobs/yearly/backfill", backfill(2003, 2000, 1), nil, 422, "invalid_field"},
		{"backfill over 1000 slots", "key", "POST", "/v1/jobs/yearly/backfill", backfill(2000, 3001, 1), nil, 422, "invalid_field"},
		{"backfill from before 1970", "key", "POST", "/v1/jobs/yearly/backfill", backfill(1969, 1971, 1), nil, 422, "invalid_field"},
		{"backfill without a schedule", "key", "POST", "/v1/jobs/victim/backfill", backfill(2000, 2003, 1), nil, 422, "invalid_field"},
		{"backfill of an unknown job", "key", "POST", "/v1/jobs/nope/backfill", backfill(2000, 2003, 1), nil, 404, "not_found"},
		{"unknown backfill", "key", "GET", "/v1/backfills/01NOSUCHBACKFILL00000000000", nil, nil, 404, "not_found"},
		{"retry with downstream of a task not failed", "key", "POST", "/v1/runs/" + run + "/tasks/main/retry",
			map[string]any{"downstream": true, "operator": "ann"}, nil, 409, "illegal_transition"},
		{"unknown catch-up policy", "key", "POST", "/v1/jobs", map[string]any{"name": "badcatchup",
			"schedule": map[string]any{"cron": "0 2 * * *", "catchup": "sometimes"}}, nil, 422, "invalid_field"},
		{"catch-up window over a year", "key", "POST", "/v1/jobs", map[string]any{"name": "longwindow",
			"schedule": map[string]any{"cron": "0 2 * * *", "catchup_window": "8761h"}}, nil, 422, "invalid_field"},
		{"retention under a day", "key", "POST", "/v1/jobs", map[string]any{"name": "shortlived", "retention": "23h"}, nil, 422, "invalid_field"},
		{"retention over ten years", "key", "POST", "/v1/jobs", map[string]any{"name": "forever", "retention": "87601h"}, nil, 422, "invalid_field"},
		{"retention in days", "key", "PUT", "/v1/jobs/victim", map[string]any{"name": "victim", "retention": "90d"},
			[]string{"If-Match", "1"}, 422, "invalid_field"},
		{"a lambda function the deployment does not allow", "key", "POST", "/v1/jobs", map[string]any{"name": "badlambda",
			"executor": map[string]any{"type": "lambda", "function": "not-allowed"}}, nil, 422, "invalid_field"},
		// Wave 3: event-triggered runs.
		{"on_event pattern with a matcher not accepted", "key", "POST", "/v1/jobs", map[string]any{"name": "badpattern",
			"on_event": []any{map[string]any{"pattern": map[string]any{"detail": map[string]any{"x": []any{map[string]any{"wildcard": "a*"}}}}}}}, nil, 422, "invalid_field"},
		{"on_event pattern over a field not named", "key", "POST", "/v1/jobs", map[string]any{"name": "badpattern",
			"on_event": []any{map[string]any{"pattern": map[string]any{"time": []any{"x"}}}}}, nil, 422, "invalid_field"},
		{"on_event params template that does not parse", "key", "POST", "/v1/jobs", map[string]any{"name": "badparams",
			"on_event": []any{map[string]any{"pattern": map[string]any{"source": []any{"shop"}}, "params": map[string]any{"order": "{{.Event"}}}}, nil, 422, "invalid_field"},
		{"on_event bad on update", "key", "PUT", "/v1/jobs/victim", map[string]any{"name": "victim",
			"on_event": []any{map[string]any{"pattern": map[string]any{"source": "shop"}}}}, []string{"If-Match", "1"}, 422, "invalid_field"},
		{"events put malformed JSON", "key", "POST", "/v1/events/put", `{"Entries": [`, nil, 400, "invalid_json"},
		{"events put without the API key", "", "POST", "/v1/events/put", map[string]any{"Entries": []any{
			map[string]any{"Source": "shop", "DetailType": "x", "Detail": "{}"}}}, nil, 401, "unauthorized"},
		{"events put with no entries", "key", "POST", "/v1/events/put", map[string]any{"Entries": []any{}}, nil, 422, "invalid_field"},
		{"events put with 11 entries", "key", "POST", "/v1/events/put", map[string]any{"Entries": slices.Repeat([]any{
			map[string]any{"Source": "shop", "DetailType": "x", "Detail": "{}"}}, 11)}, nil, 422, "invalid_field"},
		{"events put Detail not a JSON object", "key", "POST", "/v1/events/put", map[string]any{"Entries": []any{
			map[string]any{"Source": "shop", "DetailType": "x", "Detail": "[1]"}}}, nil, 422, "invalid_field"},
		{"events put without a source", "key", "POST", "/v1/events/put", map[string]any{"Entries": []any{
			map[string]any{"DetailType": "x", "Detail": "{}"}}}, nil, 422, "invalid_field"},
		{"events put Detail over 64 KiB", "key", "POST", "/v1/events/put", map[string]any{"Entries": []any{
			map[string]any{"Source": "shop", "DetailType": "x", "Detail": `{"b":"` + big(65*1024) + `"}`}}}, nil, 413, "payload_too_large"},
		{"events put with an unknown field", "key", "POST", "/v1/events/put", map[string]any{"Entries": []any{
			map[string]any{"Source": "shop", "DetailType": "x", "Detail": "{}", "Extra": 1}}}, nil, 422, "invalid_field"},
		{"events put Time in year 1", "key", "POST", "/v1/events/put", map[string]any{"Entries": []any{
			map[string]any{"Source": "shop", "DetailType": "x", "Detail": "{}", "Time": "0001-01-01T00:00:00Z"}}}, nil, 422, "invalid_field"},
		// Wave 3: flow control.
		{"job priority 0", "key", "POST", "/v1/jobs", map[string]any{"name": "prio0", "priority": 0}, nil, 422, "invalid_field"},
		{"job priority 6", "key", "POST", "/v1/jobs", map[string]any{"name": "prio6", "priority": 6}, nil, 422, "invalid_field"},
		{"concurrency limit 0", "key", "POST", "/v1/jobs", map[string]any{"name": "conc0",
			"concurrency": map[string]any{"limit": 0}}, nil, 422, "invalid_field"},
		{"concurrency limit 10001", "key", "POST", "/v1/jobs", map[string]any{"name": "conc10001",
			"concurrency": map[string]any{"limit": 10001}}, nil, 422, "invalid_field"},
		{"concurrency key that does not parse", "key", "POST", "/v1/jobs", map[string]any{"name": "badkey",
			"concurrency": map[string]any{"limit": 1, "key": "{{.Params.customer"}}, nil, 422, "invalid_field"},
		{"task concurrency limit 0", "key", "POST", "/v1/jobs", map[string]any{"name": "taskconc",
			"tasks": []any{map[string]any{"id": "t", "concurrency": map[string]any{"limit": 0}}}}, nil, 422, "invalid_field"},
		{"rate_limit runs 1001", "key", "POST", "/v1/jobs", map[string]any{"name": "rate1001",
			"rate_limit": map[string]any{"runs": 1001, "per": "1m"}}, nil, 422, "invalid_field"},
		{"rate_limit per 25h", "key", "POST", "/v1/jobs", map[string]any{"name": "rate25h",
			"rate_limit": map[string]any{"runs": 1, "per": "25h"}}, nil, 422, "invalid_field"},
		{"group limit disagreement", "key", "POST", "/v1/jobs", map[string]any{"name": "pooled2",
			"concurrency": map[string]any{"limit": 3, "group": "warehouse"}}, nil, 422, "invalid_field"},
		{"group limit disagreement on update", "key", "PUT", "/v1/jobs/victim", map[string]any{"name": "victim",
			"concurrency": map[string]any{"limit": 5, "group": "warehouse"}}, []string{"If-Match", "1"}, 422, "invalid_field"},
		{"trigger priority 6", "key", "POST", "/v1/jobs/victim/runs", map[string]any{"priority": 6}, nil, 422, "invalid_field"},
		{"trigger logical_time in year 1", "key", "POST", "/v1/jobs/victim/runs", map[string]any{"logical_time": "0001-01-01T00:00:00Z"}, nil, 422, "invalid_field"},
		{"trigger logical_time before 1970", "key", "POST", "/v1/jobs/victim/runs", map[string]any{"logical_time": "1969-12-31T23:59:59Z"}, nil, 422, "invalid_field"},
		{"backfill priority 0", "key", "POST", "/v1/jobs/yearly/backfill",
			map[string]any{"from": "2000-01-01T00:00:00Z", "to": "2003-01-01T00:00:00Z", "priority": 0}, nil, 422, "invalid_field"},
		// Wave 3: outputs. The signal route checks its body before the
		// task's state, with complete's output limit.
		{"signal output over 16 KiB", "key", "POST", "/v1/runs/" + run + "/tasks/main/signal",
			map[string]any{"outcome": "succeeded", "by": "ann", "output": big(16 * 1024)}, nil, 413, "payload_too_large"},
	}
	before, counts := s.tableItems(), s.queueCounts()
	for _, c := range cases {
		auth := c.auth
		if auth == "key" {
			auth = "Bearer " + s.key
		}
		r := s.callAs(auth, c.method, c.path, c.body, c.headers...)
		if r.Status != c.status || r.code() != c.code {
			t.Errorf("%s: %d %s, want %d %s: %.300s", c.name, r.Status, r.code(), c.status, c.code, r.Raw)
		}
		oneSentence(t, c.name, r)
		if c.name == "backfill max_active 0" && !strings.Contains(r.message(), "not 0") {
			t.Errorf("%s: the message does not name the value sent: %q", c.name, r.message())
		}
		after := s.tableItems()
		if d := tableDiff(before, after); d != "" {
			t.Errorf("%s wrote to the table:\n%s", c.name, d)
			before = after
		}
		if now := s.queueCounts(); !sameQueues(now, counts) {
			t.Errorf("%s changed the queues: %v, before %v", c.name, now, counts)
		}
		counts = s.queueCounts()
	}

	// The check can fail: a good request, attempt 2's genuine claim, writes.
	env2 := takeEnvelope(t, s, run, 2)
	s.callAs(bearerOf(env2), "POST", "/v1/attempts/claim", with(ref(2), "worker_id", "probe", "event_id", "claim-2")).must(t, http.StatusOK)
	if d := tableDiff(before, s.tableItems()); d == "" {
		t.Fatal("a claim wrote nothing the table read could see")
	}
}

// backfill is a backfill body over [Jan 1 of from, Jan 1 of to).
func backfill(from, to, maxActive int) map[string]any {
	year := func(y int) string { return fmt.Sprintf("%04d-01-01T00:00:00Z", y) }
	return map[string]any{"from": year(from), "to": year(to), "max_active": maxActive}
}

// takeEnvelope receives the pool queue's envelope of the run's attempt n
// and deletes the message: the test is the worker.
func takeEnvelope(t *testing.T, s *stack, run string, n int) worker.Envelope {
	t.Helper()
	var env worker.Envelope
	eventually(t, 30*time.Second, "envelope of attempt "+fmt.Sprint(n), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		msgs, err := s.Queue.Receive(ctx, s.Info.Queues["default"], queue.ReceiveOptions{MaxMessages: 10, Wait: time.Second, VisibilityTimeout: 30 * time.Second})
		if err != nil {
			return false, err.Error()
		}
		found := false
		for _, m := range msgs {
			if e, err := worker.ParseEnvelope(m.Body); err == nil && e.Run == run && e.Attempt == n {
				env, found = e, true
				if err := s.Queue.Delete(ctx, s.Info.Queues["default"], m.ReceiptHandle); err != nil {
					t.Fatal(err)
				}
				continue
			}
			_ = s.Queue.ChangeVisibility(ctx, s.Info.Queues["default"], m.ReceiptHandle, 0)
		}
		return found, fmt.Sprintf("%d other messages", len(msgs))
	})
	return env
}

// sameQueues: no queue gained a message between before and now. Every
// queue holds what it held, but the delay queue, whose timers armed
// before (the attempts' queue timeouts, attempt 1's lease end) may come
// due meanwhile and be taken: it may only hold fewer, never more.
func sameQueues(now, before map[string]queue.Counts) bool {
	for name, n := range now {
		b := before[name]
		if name == "delay" {
			if n.Total() > b.Total() {
				return false
			}
			continue
		}
		if n != b {
			return false
		}
	}
	return len(now) == len(before)
}
