package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// TestLargeParamsReachEveryReader: a run whose params are stored apart
// from its run item (over 512 bytes, docs/store.md "A run's params")
// delivers them to its worker in the claimed envelope, renders its map's
// elements from them, and answers them in the run answer and the runs
// listing, as a run of small params does.
func TestLargeParamsReachEveryReader(t *testing.T) {
	s := startStack(t, devstack.Options{})
	var mu sync.Mutex
	got := map[string]json.RawMessage{} // run/task -> params the worker got
	s.startWorker("default", "w1", 4, func(ctx context.Context, task worker.Task) error {
		mu.Lock()
		defer mu.Unlock()
		got[task.Run+"/"+task.Task] = task.Params
		return nil
	})
	s.createJob(map[string]any{"name": "big", "pool": "default"})
	s.createJob(map[string]any{"name": "bigfan", "pool": "default", "tasks": []any{
		map[string]any{"id": "each", "map": map[string]any{"over": "{{json .Params.items}}"}},
		map[string]any{"id": "after", "depends_on": []string{"each"}},
	}})
	large := map[string]any{"pad": strings.Repeat("x", 4000), "n": 7}
	fan := map[string]any{"pad": strings.Repeat("z", 3000), "items": []any{1, 2, 3}}
	small := map[string]any{"n": 1}
	runs := map[string]map[string]any{
		s.trigger("big", map[string]any{"params": large}):  large,
		s.trigger("big", map[string]any{"params": small}):  small,
		s.trigger("bigfan", map[string]any{"params": fan}): fan,
	}
	same := func(how string, raw json.RawMessage, want map[string]any) {
		t.Helper()
		var p map[string]any
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatalf("%s: params %.40q: %v", how, raw, err)
		}
		w, _ := json.Marshal(want)
		var wp map[string]any
		_ = json.Unmarshal(w, &wp)
		if !reflect.DeepEqual(p, wp) {
			t.Fatalf("%s: params of %d bytes, want %d", how, len(raw), len(w))
		}
	}
	for id, want := range runs {
		s.waitRun(id, time.Minute, "SUCCEEDED")
		r := s.call("GET", "/v1/runs/"+id, nil).must(t, http.StatusOK)
		var d struct {
			Run struct {
				Job    string          `json:"job"`
				Params json.RawMessage `json:"params"`
			} `json:"run"`
		}
		if err := json.Unmarshal(r.Raw, &d); err != nil {
			t.Fatal(err)
		}
		same("the run answer of "+id, d.Run.Params, want)
		mu.Lock()
		if d.Run.Job == "big" {
			same("the worker of "+id, got[id+"/main"], want)
		} else {
			for _, task := range []string{"each[0]", "each[1]", "each[2]", "after"} {
				same("the worker of "+id+"/"+task, got[id+"/"+task], want)
			}
		}
		mu.Unlock()
	}
	for _, job := range []string{"big", "bigfan"} {
		var page struct {
			Runs []struct {
				ID     string          `json:"id"`
				Params json.RawMessage `json:"params"`
			} `json:"runs"`
		}
		if err := json.Unmarshal(s.call("GET", "/v1/runs?job="+job, nil).must(t, http.StatusOK).Raw, &page); err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Runs {
			same("the listing of "+r.ID, r.Params, runs[r.ID])
		}
	}
}
