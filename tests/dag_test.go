package tests

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// 8. A five-task workflow with a branch, a branch that is skipped and an
// all_done cleanup:
//
//	extract -> load -> report ----------+
//	        \                            +-> cleanup (all_done)
//	         -> on_fail (one_failed) ---+
//
// Four runs go at once, each told by its params which tasks fail
// permanently. The trigger rules decide SKIPPED and UPSTREAM_FAILED, and
// the run's state is its leaf's (cleanup is the only leaf): a failure that
// the one_failed branch and the cleanup handle does not fail the run; a
// failed leaf does. A deadlock cannot be reached through the API, because
// a graph that passes validation never deadlocks; what the API refuses is
// the cycle, 422 dependency_cycle naming its path.
func TestDAGTriggerRulesAndLeaves(t *testing.T) {
	s := startStack(t, devstack.Options{})
	log := newHandlerLog()
	s.startWorker("default", "dag", 4, func(ctx context.Context, task worker.Task) error {
		log.record(task)
		var p struct {
			Fail []string `json:"fail"`
		}
		if err := task.DecodeParams(&p); err != nil {
			return worker.Permanent(err)
		}
		if slices.Contains(p.Fail, task.Task) {
			return worker.Permanent(errors.New("told to fail: " + task.Task))
		}
		return nil
	})
	s.createJob(map[string]any{
		"name":    "etl",
		"payload": map[string]any{"kind": "etl"},
		// Three attempts are allowed, so a single attempt proves that a
		// permanent error is not retried.
		"retry": map[string]any{"max_attempts": 3, "initial_interval": "1s", "jitter": "none"},
		"tasks": []any{
			map[string]any{"id": "extract"},
			map[string]any{"id": "load", "depends_on": []string{"extract"}},
			map[string]any{"id": "on_fail", "depends_on": []string{"extract"}, "trigger_rule": "one_failed",
				"payload": map[string]any{"kind": "alert"}},
			map[string]any{"id": "report", "depends_on": []string{"load"}, "trigger_rule": "all_success"},
			map[string]any{"id": "cleanup", "depends_on": []string{"report", "on_fail"}, "trigger_rule": "all_done"},
		},
	})

	type want struct {
		fail  []string
		run   string            // execution state
		tasks map[string]string // task -> state
	}
	cases := map[string]want{
		"all succeed": {nil, "SUCCEEDED", map[string]string{
			"extract": "SUCCEEDED", "load": "SUCCEEDED", "on_fail": "SKIPPED", "report": "SUCCEEDED", "cleanup": "SUCCEEDED"}},
		"extract fails, handled": {[]string{"extract"}, "SUCCEEDED", map[string]string{
			"extract": "FAILED", "load": "UPSTREAM_FAILED", "on_fail": "SUCCEEDED", "report": "UPSTREAM_FAILED", "cleanup": "SUCCEEDED"}},
		"load fails, branch skipped": {[]string{"load"}, "SUCCEEDED", map[string]string{
			"extract": "SUCCEEDED", "load": "FAILED", "on_fail": "SKIPPED", "report": "UPSTREAM_FAILED", "cleanup": "SUCCEEDED"}},
		"extract and the leaf fail": {[]string{"extract", "cleanup"}, "FAILED", map[string]string{
			"extract": "FAILED", "load": "UPSTREAM_FAILED", "on_fail": "SUCCEEDED", "report": "UPSTREAM_FAILED", "cleanup": "FAILED"}},
	}
	ids := map[string]string{}
	for name, c := range cases {
		fail := c.fail
		if fail == nil {
			fail = []string{}
		}
		ids[name] = s.trigger("etl", map[string]any{"params": map[string]any{"fail": fail}})
	}
	compat := map[string]string{"SUCCEEDED": "SUCCEEDED", "SKIPPED": "SUCCEEDED", "FAILED": "FAILED", "UPSTREAM_FAILED": "FAILED"}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			id := ids[name]
			d := s.waitRun(id, 60*time.Second, "SUCCEEDED", "FAILED", "CANCELLED")
			if d.Run.ExecutionState != c.run || d.Run.Status != c.run || d.Run.EndedAt == nil {
				t.Errorf("run %s %s/%s ended %v, want %s", id, d.Run.ExecutionState, d.Run.Status, d.Run.EndedAt, c.run)
			}
			for task, st := range c.tasks {
				td := d.task(task)
				if td.State != st || td.Status != compat[st] {
					t.Errorf("%s: %s/%s, want %s/%s", task, td.State, td.Status, st, compat[st])
				}
				h := s.history(id, task)
				switch st {
				case "SKIPPED", "UPSTREAM_FAILED":
					// Decided by the rule: never dispatched, never run.
					event := map[string]string{"SKIPPED": "deps.skipped", "UPSTREAM_FAILED": "deps.upstream_failed"}[st]
					if got := states(h); !slices.Equal(got, []string{"CREATED", st}) || h[1].Event != event {
						t.Errorf("%s history %v (event %q), want [CREATED %s] by %s", task, got, h[len(h)-1].Event, st, event)
					}
					if len(td.Attempts) != 0 || log.count(id, task) != 0 {
						t.Errorf("%s: %d attempts, handler ran %d times; want none", task, len(td.Attempts), log.count(id, task))
					}
				default:
					// Ran exactly once: a permanent failure is not retried.
					want := []string{"CREATED", "SCHEDULED", "QUEUED", "RUNNING", st}
					if got := states(h); !slices.Equal(got, want) {
						t.Errorf("%s history %v, want %v", task, got, want)
					}
					if td.Attempt != 1 || len(td.Attempts) != 1 || log.count(id, task) != 1 {
						t.Errorf("%s: attempt %d, %d attempts, handler ran %d times; want 1", task, td.Attempt, len(td.Attempts), log.count(id, task))
					}
				}
			}
			// The effective payload: on_fail's override, the job's elsewhere.
			for task := range c.tasks {
				if log.count(id, task) == 0 {
					continue
				}
				want := `{"kind":"etl"}`
				if task == "on_fail" {
					want = `{"kind":"alert"}`
				}
				if got := compactJSON(t, log.payload(id, task)); got != want {
					t.Errorf("%s saw payload %s, want %s", task, got, want)
				}
			}
			// all_done waits for every upstream task: cleanup starts only
			// after report and on_fail ended, whatever they ended as.
			cleanup := d.task("cleanup").Attempts
			if len(cleanup) == 1 {
				start := parseTime(t, cleanup[0].StartedAt, "cleanup started_at")
				for _, up := range []string{"report", "on_fail"} {
					if a := d.task(up).Attempts; len(a) == 1 {
						if end := parseTime(t, a[0].EndedAt, up+" ended_at"); start.Before(end) {
							t.Errorf("cleanup started %s, before %s ended %s", start, up, end)
						}
					}
				}
			}
		})
	}

	// A cycle is refused with its path, and nothing is stored.
	r := s.call("POST", "/v1/jobs", map[string]any{
		"name": "cyclic",
		"tasks": []any{
			map[string]any{"id": "a", "depends_on": []string{"c"}},
			map[string]any{"id": "b", "depends_on": []string{"a"}},
			map[string]any{"id": "c", "depends_on": []string{"b"}},
			map[string]any{"id": "sink", "depends_on": []string{"a"}},
		},
	})
	if r.Status != http.StatusUnprocessableEntity || r.code() != "dependency_cycle" {
		t.Fatalf("cycle: %d %s", r.Status, r.Raw)
	}
	// The path runs in execution order from the earliest-defined task of
	// the cycle; sink, downstream of it but not on it, is not named.
	msg, _ := r.Body["message"].(string)
	if !strings.Contains(msg, "a -> b -> c -> a") || strings.Contains(msg, "sink") {
		t.Errorf("cycle message %q does not name the path a -> b -> c -> a alone", msg)
	}
	oneSentence(t, "cycle", r)
	s.call("GET", "/v1/jobs/cyclic", nil).must(t, http.StatusNotFound)
}

func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}
