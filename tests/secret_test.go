package tests

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/worker"
)

// Each task instance keeps a secret that its attempts' tokens are derived
// from. A run of a join goes through every state a worker sees, and no
// answer of the API about it (the run, its listing, every task's history,
// the events) holds a trace of any of its instances' secrets.
func TestInstanceSecretIsNeverAnswered(t *testing.T) {
	s := startStack(t, devstack.Options{})
	s.startWorker("default", "secret", 2, func(context.Context, worker.Task) error { return nil })
	s.createJob(map[string]any{
		"name": "secret",
		"tasks": []any{
			map[string]any{"id": "a"}, map[string]any{"id": "b"},
			map[string]any{"id": "c", "depends_on": []string{"a", "b"}},
		},
	})
	run := s.trigger("secret", nil)
	s.waitRun(run, 30*time.Second, "SUCCEEDED")

	var traces []string
	for _, task := range []string{"a", "b", "c"} {
		inst, err := s.Stack.Store.GetInstance(context.Background(), ledger.InstanceKey{Run: run, Task: task})
		if err != nil {
			t.Fatal(err)
		}
		if len(inst.Secret) != ledger.SecretBytes {
			t.Fatalf("%s has a secret of %d bytes, want %d", task, len(inst.Secret), ledger.SecretBytes)
		}
		traces = append(traces, hex.EncodeToString(inst.Secret), base64.StdEncoding.EncodeToString(inst.Secret),
			base64.RawURLEncoding.EncodeToString(inst.Secret), fmt.Sprint([]byte(inst.Secret)))
	}
	paths := []string{"/v1/runs/" + run, "/v1/runs?job=secret", "/v1/events"}
	for _, task := range []string{"a", "b", "c"} {
		paths = append(paths, "/v1/runs/"+run+"/tasks/"+task+"/history?limit=1000")
	}
	for _, p := range paths {
		body := string(s.call("GET", p, nil).must(t, http.StatusOK).Raw)
		for _, trace := range traces {
			if strings.Contains(body, trace) {
				t.Fatalf("GET %s shows an instance secret: %s", p, body)
			}
		}
	}
}
