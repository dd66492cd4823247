package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/worker"
	"github.com/runledger/runledger/statemodel/limiter"
)

// A limited job's runs carry priority and admission on the local stack:
// the first is admitted, the second waits for concurrency at place 1.
// A trigger into a limiter that already has 10,000 runs waiting is 429
// limit_queue_full, and nothing is written.
func TestFlowAdmissionAndQueueFull(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(map[string]any{"name": "solo", "concurrency": map[string]any{"limit": 1}})
	first := s.trigger("solo", nil)
	second := s.trigger("solo", map[string]any{"priority": 2})
	adm := func(id string) (map[string]any, any) {
		run := s.call("GET", "/v1/runs/"+id, nil).must(t, http.StatusOK).Body["run"].(map[string]any)
		a, _ := run["admission"].(map[string]any)
		return a, run["priority"]
	}
	if a, prio := adm(first); a["state"] != "admitted" || a["limiter"] != "solo/" || a["admitted_at"] == nil || prio != 3.0 {
		t.Fatalf("first run: admission %v, priority %v", a, prio)
	}
	if a, prio := adm(second); a["state"] != "waiting" || a["reason"] != "concurrency" || a["place"] != 1.0 || prio != 2.0 {
		t.Fatalf("second run: admission %v, priority %v", a, prio)
	}

	// A limiter whose queue is full (its item as 10,000 waiting runs
	// leave it).
	s.createJob(map[string]any{"name": "full", "concurrency": map[string]any{"limit": 1}})
	st := store.New(s.Stack.Env.DynamoDBClient(), s.Info.Table)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.WriteLimiter(ctx, ledger.LimiterWrite{Name: "full/", State: limiter.State{Limit: 1, Active: 1, Waiting: limiter.MaxWaiting, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	before := s.tableItems()
	r := s.call("POST", "/v1/jobs/full/runs", map[string]any{"params": map[string]any{"n": 1}})
	if r.Status != http.StatusTooManyRequests || r.code() != "limit_queue_full" {
		t.Fatalf("trigger into a full queue: %d %s", r.Status, r.Raw)
	}
	if d := tableDiff(before, s.tableItems()); d != "" {
		t.Fatalf("a refused trigger wrote to the table:\n%s", d)
	}
}

// A task pool shared by two jobs (group "wh", 2 slots): with six runs and
// a worker that would take six tasks at once, at most two pooled tasks run
// at once, a task that found no slot is SCHEDULED and its answer says
// waiting_for_slot "wh/", and every run ends once the slots are handed on.
func TestFlowTaskPoolAcrossJobs(t *testing.T) {
	s := startStack(t, devstack.Options{})
	pooled := map[string]any{"limit": 2, "group": "wh"}
	s.createJob(map[string]any{"name": "export-a", "tasks": []any{map[string]any{"id": "load", "concurrency": pooled}}})
	s.createJob(map[string]any{"name": "export-b", "tasks": []any{map[string]any{"id": "load", "concurrency": pooled}}})
	gate := make(chan struct{})
	var running, most atomic.Int32
	s.startWorker("default", "pool", 6, func(ctx context.Context, task worker.Task) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	var runs []string
	for i := range 6 {
		runs = append(runs, s.trigger([]string{"export-a", "export-b"}[i%2], nil))
	}
	eventually(t, 30*time.Second, "two pooled tasks running, the others waiting for a slot", func() (bool, string) {
		var seen []string
		runningN, waiting := 0, 0
		for _, id := range runs {
			r := s.call("GET", "/v1/runs/"+id, nil).must(t, http.StatusOK)
			task := r.Body["tasks"].([]any)[0].(map[string]any)
			seen = append(seen, fmt.Sprintf("%v %v", task["state"], task["waiting_for_slot"]))
			switch {
			case task["state"] == "RUNNING":
				runningN++
			case task["state"] == "SCHEDULED" && task["waiting_for_slot"] == "wh/":
				waiting++
			}
		}
		return runningN == 2 && waiting == 4, strings.Join(seen, ", ")
	})
	close(gate)
	for _, id := range runs {
		s.waitRun(id, 60*time.Second, "SUCCEEDED")
	}
	if m := most.Load(); m != 2 {
		t.Fatalf("at most %d pooled tasks ran at once, want 2", m)
	}
}
