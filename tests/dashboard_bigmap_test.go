package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// mapCounts reads a map task's counts from the run answer.
func mapCounts(t *testing.T, s *stack, run, task string) map[string]int {
	t.Helper()
	var d struct {
		Tasks []struct {
			Task string         `json:"task"`
			Map  map[string]int `json:"map"`
		} `json:"tasks"`
	}
	r := s.call("GET", "/v1/runs/"+run, nil).must(t, http.StatusOK)
	if err := json.Unmarshal(r.Raw, &d); err != nil {
		t.Fatal(err)
	}
	for _, td := range d.Tasks {
		if td.Task == task {
			return td.Map
		}
	}
	return nil
}

// TestDashboardPagesATenThousandChildMap: a run whose map task expanded
// into 10,000 children draws it as one node with its counts and pages
// its children table 100 rows at a time; the page never loads them all.
// The map is real and cheap: its first 300 children succeed, the next 50
// (max_parallel) wait in their handlers, so the counts hold still while
// the page is read and 9,650 children wait unreleased. The page's render
// time is logged, not asserted (the speed target is rlbench's
// map_10k_page_ms).
func TestDashboardPagesATenThousandChildMap(t *testing.T) {
	b := startBrowser(t)
	s := startStack(t, devstack.Options{})
	const n, done, par = 10000, 300, 50
	hold := make(chan struct{})
	// Handlers wait for minutes on a loaded machine: a long visibility
	// timeout and heartbeat timeout keep their children RUNNING, neither
	// delivered twice nor LOST.
	_, stop := s.runWorker("default", worker.Config{Name: "ui-bigmap", Concurrency: par + 10, VisibilityTimeout: 5 * time.Minute}, func(ctx context.Context, task worker.Task) error {
		if i, ok := task.Index(); ok && i >= done {
			select {
			case <-hold:
			case <-ctx.Done():
			}
		}
		return nil
	})
	defer stop()
	defer close(hold)
	s.createJob(map[string]any{"name": "ui-bigmap", "pool": "default", "timeouts": map[string]any{"heartbeat": "5m"}, "tasks": []any{
		map[string]any{"id": "each", "map": map[string]any{"over": "{{json .Params.xs}}", "max_parallel": par}},
	}})
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	id := s.trigger("ui-bigmap", map[string]any{"params": map[string]any{"xs": xs}})
	want := map[string]int{"total": n, "pending": n - done - par, "running": par, "succeeded": done, "failed": 0, "cancelled": 0}
	eventually(t, 5*time.Minute, "the map holds 300 succeeded and 50 running", func() (bool, string) {
		got := mapCounts(t, s, id, "each")
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
	})

	b.do(chromedp.Navigate(s.url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), s.key),
		chromedp.Click(chromedp.CSS("#key-form button[type=submit]")))
	b.waitJS("the runs list", `document.querySelector('#runs')`)
	start := time.Now()
	b.do(chromedp.Navigate(s.url + "/ui/#/runs/" + id + "?task=each"))
	node := `document.querySelector('.node[data-task="each"]')`
	b.waitJS("the map node", node)
	b.waitJS("the first page of children", `document.querySelectorAll('#children tbody tr').length === 100`)
	t.Logf("the run page of a %d-child map with its first 100 children rendered in %s", n, time.Since(start))

	if nodes := evalString(t, b, `[...document.querySelectorAll('.node')].map(n => n.dataset.task).join(",")`); nodes != "each" {
		t.Errorf("the graph draws nodes %q, want the map task alone", nodes)
	}
	text := evalString(t, b, node+".textContent")
	if !regexp.MustCompile(fmt.Sprintf(`map %d/%d ok · %d running`, done, n, par)).MatchString(text) {
		t.Errorf("map node text %q, want its counts", text)
	}
	facts := evalString(t, b, `document.body.textContent`)
	if c := fmt.Sprintf("%d in all: %d pending, %d running, %d succeeded", n, n-done-par, par, done); !strings.Contains(facts, c) {
		t.Errorf("the task panel does not say %q", c)
	}

	// Pages of 100: the control loads the next page, in index order.
	b.click("#children-more")
	b.waitJS("the second page", `document.querySelectorAll('#children tbody tr').length === 200`)
	b.click("#children-more")
	b.waitJS("the third page", `document.querySelectorAll('#children tbody tr').length === 300`)
	rows := evalString(t, b, `[...document.querySelectorAll('#children tbody tr')].map(r => r.dataset.child).join(",")`)
	children := strings.Split(rows, ",")
	for i, c := range children {
		if c != fmt.Sprintf("each[%d]", i) {
			t.Fatalf("row %d is %q, want each[%d] (rows in index order, no repeats)", i, c, i)
		}
	}
	if more := evalString(t, b, `String(document.querySelector('#children-more').hidden)`); more != "false" {
		t.Errorf("after 300 of 350 released children the next-page control is hidden=%s", more)
	}
}
