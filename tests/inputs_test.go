package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
	"github.com/runledger/runledger/statemodel"
)

// Manual retries add attempts without limit: the run's answer still lists
// every one (the instance item holds only the latest, the older ones come
// from their own items), and each failure's reason, which the SDK takes
// from the handler's error, is in the history.
func TestManyManualRetriesStayReadable(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.createJob(quickJob("flaky", map[string]any{"retry": map[string]any{"max_attempts": 1}}))
	s.startWorker("default", "flaky", 2, func(ctx context.Context, task worker.Task) error {
		return worker.Permanent(fmt.Errorf("attempt %d: disk <full> & gone", task.Attempt))
	})
	run := s.trigger("flaky", nil)
	const total = statemodel.MaxInlineAttempts + 3
	for n := 1; n <= total; n++ {
		eventually(t, 30*time.Second, fmt.Sprintf("attempt %d fails", n), func() (bool, string) {
			td := s.run(run).task("main")
			return td.State == "FAILED" && td.Attempt == n, fmt.Sprintf("%s at attempt %d", td.State, td.Attempt)
		})
		if n < total {
			s.call("POST", "/v1/runs/"+run+"/tasks/main/retry", map[string]any{}).must(t, http.StatusOK)
		}
	}
	td := s.runDetail(run).task("main")
	if len(td.Attempts) != total {
		t.Fatalf("the run lists %d attempts, want %d", len(td.Attempts), total)
	}
	for i, a := range td.Attempts {
		if a.N != i+1 || a.State != "FAILED" || a.WorkerID == nil || a.ErrorCategory == nil || *a.ErrorCategory != "error" {
			t.Fatalf("attempt %d listed as %+v", i+1, a)
		}
	}
	reasons := 0
	for _, tr := range s.history(run, "main") {
		if tr.Event == string(statemodel.EvFailed) {
			if want := fmt.Sprintf("attempt %d: disk <full> & gone", tr.Attempt); tr.Reason != want {
				t.Errorf("attempt %d failed with reason %q, want %q", tr.Attempt, tr.Reason, want)
			}
			reasons++
		}
	}
	if reasons != total {
		t.Errorf("%d failures in the history, want %d", reasons, total)
	}
}
