package tests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/store"
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
