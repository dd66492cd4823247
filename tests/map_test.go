package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// childrenPage is GET /v1/runs/{run}/tasks/{task}/children decoded.
type childrenPage struct {
	Children []struct {
		Task     string          `json:"task"`
		State    string          `json:"state"`
		Output   json.RawMessage `json:"output"`
		Attempts []struct {
			StartedAt *string `json:"started_at"`
			EndedAt   *string `json:"ended_at"`
		} `json:"attempts"`
	} `json:"children"`
	NextToken *string `json:"next_token"`
}

// TestMapOverAnUpstreamOutput: a map over an upstream task's output of
// 1,000 items runs every child with its item, never more than
// max_parallel at once (checked from the children's attempt times), and
// its downstream task runs after it; the run answer stays small (the
// children are paged, not inlined), and a child's history is at its name.
func TestMapOverAnUpstreamOutput(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Options{})
	const n, parallel = 1000, 20
	_, stop := s.runWorker("default", worker.Config{Name: "mapper", Concurrency: 40}, func(ctx context.Context, task worker.Task) error {
		switch task.Task {
		case "list":
			items := make([]int, n)
			for i := range items {
				items[i] = i
			}
			return task.SetOutput(map[string]any{"items": items})
		case "after":
			return nil
		}
		var item int
		if err := json.Unmarshal(task.Item(), &item); err != nil {
			return err
		}
		if i, ok := task.Index(); !ok || i != item {
			return fmt.Errorf("index %d, item %d", i, item)
		}
		return task.SetOutput(item)
	})
	defer stop()
	s.createJob(map[string]any{"name": "fan", "pool": "default", "timeouts": map[string]any{"heartbeat": "10s", "queue": "2m"},
		"tasks": []any{
			map[string]any{"id": "list"},
			map[string]any{"id": "each", "depends_on": []string{"list"},
				"map": map[string]any{"over": "{{json .Inputs.list.items}}", "max_parallel": parallel}},
			map[string]any{"id": "after", "depends_on": []string{"each"}},
		}})
	run := s.trigger("fan", map[string]any{})
	s.waitDetail(run, "after", "SUCCEEDED", 5*time.Minute)

	r := s.call("GET", "/v1/runs/"+run, nil).must(t, http.StatusOK)
	if len(r.Raw) > 64<<10 {
		t.Errorf("the run answer is %d bytes: the children are inlined", len(r.Raw))
	}
	var d struct {
		Tasks []struct {
			Task string         `json:"task"`
			Map  map[string]int `json:"map"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(r.Raw, &d); err != nil || len(d.Tasks) != 3 {
		t.Fatalf("run answer: %d tasks (%v)", len(d.Tasks), err)
	}
	want := map[string]int{"total": n, "pending": 0, "running": 0, "succeeded": n, "failed": 0, "cancelled": 0}
	if fmt.Sprint(d.Tasks[1].Map) != fmt.Sprint(want) {
		t.Errorf("map counts %v, want %v", d.Tasks[1].Map, want)
	}

	// The children in index order, page by page; their attempt times.
	type span struct{ start, end time.Time }
	var spans []span
	token := ""
	for i := 0; ; {
		path := "/v1/runs/" + run + "/tasks/each/children?limit=300"
		if token != "" {
			path += "&next_token=" + url.QueryEscape(token)
		}
		var p childrenPage
		if err := json.Unmarshal(s.call("GET", path, nil).must(t, http.StatusOK).Raw, &p); err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Children {
			if c.Task != fmt.Sprintf("each[%d]", i) || c.State != "SUCCEEDED" || string(c.Output) != fmt.Sprint(i) {
				t.Fatalf("child %d: %s %s output %s", i, c.Task, c.State, c.Output)
			}
			for _, a := range c.Attempts {
				spans = append(spans, span{at(t, "started_at", a.StartedAt), at(t, "ended_at", a.EndedAt)})
			}
			i++
		}
		if p.NextToken == nil || *p.NextToken == "" {
			if i != n {
				t.Fatalf("paged %d children, want %d", i, n)
			}
			break
		}
		token = *p.NextToken
	}
	// Never more than max_parallel attempts between claim and end.
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, sp := range spans {
		edges = append(edges, edge{sp.start, +1}, edge{sp.end, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta // an end before a start at the same instant
	})
	most, cur := 0, 0
	for _, e := range edges {
		cur += e.delta
		most = max(most, cur)
	}
	if most > parallel {
		t.Errorf("%d children ran at once, over max_parallel %d", most, parallel)
	}
	t.Logf("at most %d of max_parallel %d children ran at once", most, parallel)
	h := s.call("GET", "/v1/runs/"+run+"/tasks/each%5B7%5D/history", nil).must(t, http.StatusOK)
	if len(h.Body["transitions"].([]any)) < 4 {
		t.Errorf("child 7's history: %s", h.Raw)
	}
}

// TestMapInvalidOver: over that does not render a JSON array fails the
// map task with invalid_map, and the run with it.
func TestMapInvalidOver(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Options{})
	s.createJob(map[string]any{"name": "bad-map", "pool": "default",
		"tasks": []any{map[string]any{"id": "each", "map": map[string]any{"over": `{"not": "an array"}`}}}})
	run := s.trigger("bad-map", map[string]any{})
	td := s.waitDetail(run, "each", "FAILED", time.Minute)
	if a := td.attempt(t, 1); a.ErrorCategory == nil || *a.ErrorCategory != "invalid_map" {
		t.Errorf("the map task's attempt: %+v", a)
	}
	if st := s.runDetail(run).Run.ExecutionState; st != "FAILED" {
		t.Errorf("run %s", st)
	}
}
