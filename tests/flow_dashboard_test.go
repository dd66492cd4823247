package tests

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// In the dashboard, a run of a limited job that waits shows its limiter,
// why it waits and its place, and moves up as the runs before it are
// admitted; an admitted run shows its limiter and when it was admitted.
func TestDashboardShowsAdmission(t *testing.T) {
	b := startBrowser(t)
	s := startStack(t, devstack.Options{})
	// Each run's task holds until the test lets one go.
	finish := make(chan struct{}, 3)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	s.startWorker("default", "ui-limited", 1, func(ctx context.Context, _ worker.Task) error {
		select {
		case <-finish:
		case <-done:
		case <-ctx.Done():
		}
		return nil
	})
	s.createJob(quickJob("ui-limited", map[string]any{"concurrency": map[string]any{"limit": 1}}))
	first := s.trigger("ui-limited", nil)
	s.waitRun(first, 30*time.Second, "RUNNING")
	second := s.trigger("ui-limited", nil)
	third := s.trigger("ui-limited", nil)

	b.do(chromedp.Navigate(s.url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), s.key),
		chromedp.Click(chromedp.CSS("#key-form button[type=submit]")))
	b.waitJS("the key taken", `!document.querySelector("#signout").hidden`)

	b.do(chromedp.Navigate(s.url + "/ui/#/runs/" + third))
	b.waitJS("the third run waiting at place 2", `document.querySelector("#run-admission")?.textContent ===
		"waiting for a concurrency slot in ui-limited/, place 2"`)
	b.screenshot("run-waiting")

	b.do(chromedp.Navigate(s.url + "/ui/#/runs/" + first))
	b.waitJS("the first run admitted", `/^admitted in ui-limited\/ at \d{4}-\d\d-\d\dT/.test(document.querySelector("#run-admission")?.textContent || "")`)

	// The first run ends: the second is admitted, the third moves up.
	finish <- struct{}{}
	s.waitRun(first, 30*time.Second, "SUCCEEDED")
	s.waitRun(second, 30*time.Second, "RUNNING")
	b.do(chromedp.Navigate(s.url + "/ui/#/runs/" + third))
	b.waitJS("the third run moved up to place 1", `document.querySelector("#run-admission")?.textContent ===
		"waiting for a concurrency slot in ui-limited/, place 1"`)
	finish <- struct{}{}
	s.waitRun(second, 30*time.Second, "SUCCEEDED")
	b.waitJS("the third run admitted", `/^admitted in ui-limited\/ at \d{4}-\d\d-\d\dT/.test(document.querySelector("#run-admission")?.textContent || "")`)
	finish <- struct{}{}
	s.waitRun(third, 30*time.Second, "SUCCEEDED")
}
