package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// TestDashboardDrawsAMapAsOneNode: a run with a map task of 250 children
// draws the map task as one node with its counts; its panel shows them
// and pages its children 100 at a time ("More children" loads the next
// page). The page's render time is logged, not asserted.
func TestDashboardDrawsAMapAsOneNode(t *testing.T) {
	b := startBrowser(t)
	s := startStack(t, devstack.Options{})
	const n = 250
	_, stop := s.runWorker("default", worker.Config{Name: "ui-map", Concurrency: 50}, func(ctx context.Context, task worker.Task) error {
		if i, ok := task.Index(); ok {
			return task.SetOutput(map[string]int{"i": i})
		}
		return nil
	})
	defer stop()
	s.createJob(map[string]any{"name": "ui-map", "pool": "default", "tasks": []any{
		map[string]any{"id": "list"},
		map[string]any{"id": "each", "depends_on": []string{"list"}, "map": map[string]any{"over": "{{json .Params.xs}}", "max_parallel": 50}},
	}})
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	id := s.trigger("ui-map", map[string]any{"params": map[string]any{"xs": xs}})
	s.waitDetail(id, "each", "SUCCEEDED", 3*time.Minute)

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
	var text string
	b.eval(node+".textContent", &text)
	if !strings.Contains(text, fmt.Sprintf("map %d/%d ok", n, n)) {
		t.Errorf("map node text %q", text)
	}
	if c := strings.Count(evalString(t, b, `[...document.querySelectorAll('.node')].map(n => n.dataset.task).join(",")`), ","); c != 1 {
		t.Errorf("the graph draws %d nodes, want 2 (list and the map)", c+1)
	}
	b.click("#children-more")
	b.waitJS("the second page", `document.querySelectorAll('#children tbody tr').length === 200`)
	if first := evalString(t, b, `document.querySelector('#children tbody tr').dataset.child`); first != "each[0]" {
		t.Errorf("first child row %q", first)
	}
}

func evalString(t *testing.T, b *browserTab, expr string) string {
	t.Helper()
	var s string
	b.eval(expr, &s)
	return s
}
