package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// In the dashboard, a signal task that waits shows Approve and Reject
// (a task a worker runs shows neither); Approve from the page settles it
// through the signal route, the run finishes, and the transitions table
// shows who decided.
func TestDashboardApprovesSignalTask(t *testing.T) {
	b := startBrowser(t)
	s := startStack(t, devstack.Options{})
	s.startWorker("default", "ui-approval", 2, func(context.Context, worker.Task) error { return nil })
	s.createJob(approvalJob("ui-approval", nil))
	run := s.trigger("ui-approval", nil)
	s.signalToken(run, "gate", 1)
	s.waitTask(run, "gate", "RUNNING", 10*time.Second)

	b.do(chromedp.Navigate(s.url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), s.key),
		chromedp.Click(chromedp.CSS("#key-form button[type=submit]")))
	b.waitJS("the key taken", `!document.querySelector("#signout").hidden`)
	b.do(chromedp.Navigate(s.url + "/ui/#/runs/" + run + "?task=load"))
	b.waitJS("load selected", `document.querySelector("#task-title code")?.textContent === "load"`)
	var buttons int
	b.eval(`document.querySelectorAll("#approve-task, #reject-task").length`, &buttons)
	if buttons != 0 {
		t.Fatalf("a worker's task shows %d signal buttons", buttons)
	}
	b.click(`#graph .node[data-task="gate"]`)
	b.waitJS("gate's Approve and Reject", `document.querySelector("#task-title code")?.textContent === "gate" &&
		document.querySelector("#approve-task") && document.querySelector("#reject-task")`)
	b.screenshot("signal-task")

	b.click("#approve-task")
	b.do(chromedp.WaitVisible(chromedp.CSS("#confirm[open] #f-by")))
	b.eval(`(document.querySelector("#confirm #f-by").value = "", true)`, nil)
	b.confirm(map[string]string{"by": "dana", "reason": "figures checked"})
	s.waitRun(run, 30*time.Second, "SUCCEEDED")

	b.waitJS("the decision in gate's transitions", `[...document.querySelectorAll('#timeline tr[data-to="SUCCEEDED"]')].some(r => r.innerText.includes("signal.succeeded") && r.innerText.includes("dana"))`)
	b.waitJS("the buttons gone", `!document.querySelector("#approve-task") && !document.querySelector("#reject-task")`)
	h := s.history(run, "gate")
	last := h[len(h)-1]
	if last.Event != "signal.succeeded" || last.Evidence["by"] != "dana" || !strings.Contains(last.Reason, "figures checked") {
		t.Fatalf("gate's last record %+v", last)
	}
}
