package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/api/apitest"
)

// TestEveryCallIsADocumentedOperation calls each method of the client
// against a stand-in that checks every request against the OpenAPI
// document (route, method, parameters, body), and checks that the client
// reaches every job and run operation the document has. The answers of
// the real server are checked in tests/ (TestClientJobs, TestClientRuns).
func TestEveryCallIsADocumentedOperation(t *testing.T) {
	v, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[apitest.Operation]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := v.Request(r, body); err != nil {
			t.Error(err)
		}
		if op, err := v.Operation(r); err == nil {
			mu.Lock()
			seen[op] = true
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent) // the client decodes nothing from an empty answer
	}))
	defer srv.Close()
	c, err := New(context.Background(), Options{URL: srv.URL, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	def := json.RawMessage(`{"name": "nightly", "schedule": {"cron": "0 2 * * *", "timezone": "Asia/Shanghai"}, "pool": "default"}`)
	calls := []func() error{
		func() error { _, err := c.CreateJob(ctx, def); return err },
		func() error { _, err := c.ListJobs(ctx, Page{Limit: 10, NextToken: "x"}); return err },
		func() error { _, err := c.GetJob(ctx, "nightly"); return err },
		func() error { _, err := c.UpdateJob(ctx, "nightly", 2, def); return err },
		func() error { return c.DeleteJob(ctx, "nightly") },
		func() error { _, err := c.PauseJob(ctx, "nightly"); return err },
		func() error { _, err := c.ResumeJob(ctx, "nightly"); return err },
		func() error {
			_, _, err := c.TriggerRun(ctx, "nightly", Trigger{IdempotencyKey: "k", Params: map[string]any{"a": 1}, LogicalTime: time.Now()})
			return err
		},
		func() error {
			_, err := c.ListRuns(ctx, RunFilter{Job: "nightly", Status: "FAILED", Page: Page{Limit: 5}})
			return err
		},
		func() error { _, err := c.GetRun(ctx, "r1"); return err },
		func() error { _, err := c.History(ctx, "r1", "main", Page{Limit: 3}); return err },
		func() error { _, err := c.Children(ctx, "r1", "each", Page{Limit: 3}); return err },
		func() error { _, err := c.CancelRun(ctx, "r1", "why"); return err },
		func() error { _, err := c.PauseRun(ctx, "r1", ""); return err },
		func() error { _, err := c.ResumeRun(ctx, "r1", ""); return err },
		func() error { _, err := c.CancelTask(ctx, "r1", "main", "why"); return err },
		func() error {
			_, err := c.RetryTask(ctx, "r1", "main", Retry{Operator: "ann", Reason: "again"})
			return err
		},
		func() error { _, err := c.MarkSucceeded(ctx, "r1", "main", "ann", "checked"); return err },
		func() error { _, err := c.MarkFailed(ctx, "r1", "main", "ann", "checked"); return err },
		func() error {
			_, err := c.Signal(ctx, "r1", "gate", SignalRequest{Outcome: SignalSucceeded, By: "ann", Reason: "ok", EventID: "e1"})
			return err
		},
		func() error {
			_, err := c.ListNotices(ctx, NoticeFilter{Since: time.Now(), Page: Page{Limit: 10, NextToken: "3"}})
			return err
		},
		func() error {
			_, err := c.PutEvents(ctx, PutEventsEntry{Source: "shop", DetailType: "Order Placed", Detail: `{"order_id":"o-1"}`})
			return err
		},
		func() error {
			_, err := c.Backfill(ctx, "nightly", BackfillRequest{From: time.Now().Add(-48 * time.Hour), To: time.Now(), MaxActive: 3, Params: map[string]any{"a": 1}})
			return err
		},
		func() error { _, err := c.GetBackfill(ctx, "b1"); return err },
		func() error { _, err := c.ListBackfills(ctx, "nightly", Page{Limit: 5}); return err },
		func() error { _, err := c.CancelBackfill(ctx, "b1", "why"); return err },
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	var missing []string
	for _, op := range v.Operations() {
		if !seen[op] && !v.Tagged(op, "service", "workers") {
			missing = append(missing, string(op))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the client calls no operation for %v: add a method to the client for each", missing)
	}
}
