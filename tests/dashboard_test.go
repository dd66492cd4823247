package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"

	"github.com/runledger/runledger/shared/dashboard"
	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// The dashboard in a real browser: headless Chromium (Debian's `chromium`)
// driven through the DevTools protocol against the local stack. The test
// asserts what a person sees: node colours and state labels, Gantt bars and
// their phases, the timeline rows, refused actions' sentences, and that a
// cancel from the page cancels the run.

// chromiumPath finds a Chromium binary (RUNLEDGER_CHROMIUM, else chromium
// on PATH, as the Makefile looks); "" when none is installed.
func chromiumPath() string {
	if p := os.Getenv("RUNLEDGER_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browserTab is one headless Chromium tab for the test.
type browserTab struct {
	t   *testing.T
	ctx context.Context
}

func startBrowser(t *testing.T) *browserTab {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		t.Skip("skipping the browser test: no chromium binary found (on Debian: apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 800))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	v, err := cdp.Call(ctx, chromedp.FromContext(ctx).Browser, browser.GetVersion, cdp.Empty{})
	if err != nil {
		t.Fatalf("browser version: %v", err)
	}
	t.Logf("browser: %s (%s), protocol %s", v.Product, path, v.ProtocolVersion)
	return &browserTab{t: t, ctx: ctx}
}

// do runs actions with a per-step deadline.
func (b *browserTab) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

// eval evaluates a JavaScript expression into out.
func (b *browserTab) eval(expr string, out any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			b.t.Fatalf("decode %s: %v: %s", expr, err, raw)
		}
	}
}

// waitJS polls a JavaScript expression until it is true.
func (b *browserTab) waitJS(what, expr string) {
	b.t.Helper()
	eventually(b.t, 30*time.Second, what, func() (bool, string) {
		var ok bool
		b.eval("Boolean("+expr+")", &ok)
		var text string
		b.eval(`location.hash + " " + (document.querySelector("main")?.innerText.slice(0, 400) || "")`, &text)
		return ok, text
	})
}

// screenshot saves the page as docs/img/<name>.png when UPDATE_SCREENSHOTS=1.
func (b *browserTab) screenshot(name string) {
	b.t.Helper()
	if os.Getenv("UPDATE_SCREENSHOTS") != "1" {
		return
	}
	b.eval(`(document.getElementById("tip").hidden = true, true)`, nil)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join("..", "docs", "img", name+".png")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s (%d bytes)", path, len(png))
}

// click clicks the element in one step of the page's own event loop: a
// live page redraws its graph as the run changes, so a node found by one
// protocol call may be gone by the next.
func (b *browserTab) click(sel string) {
	b.t.Helper()
	var ok bool
	b.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false;
		e.dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true, view: window})); return true; })()`, sel), &ok)
	if !ok {
		b.t.Fatalf("click %s: no such element", sel)
	}
}

// confirm fills the open confirmation dialog's fields and confirms.
func (b *browserTab) confirm(fields map[string]string) {
	b.t.Helper()
	b.do(chromedp.WaitVisible(chromedp.CSS("#confirm[open] #confirm-yes")))
	for name, v := range fields {
		b.do(chromedp.SendKeys(chromedp.CSS("#confirm #f-"+name), v))
	}
	b.click("#confirm-yes")
}

// Colours as computed by the browser for a node of each state.
var stateFill = map[string]string{
	"SUCCEEDED":  "rgb(22, 163, 74)",
	"FAILED":     "rgb(220, 38, 38)",
	"RUNNING":    "rgb(125, 211, 252)",
	"SKIPPED":    "rgb(245, 208, 254)",
	"LOST":       "rgb(124, 58, 237)",
	"CANCELLING": "rgb(253, 164, 175)",
	"CANCELLED":  "rgb(100, 116, 139)",
	"QUEUED":     "rgb(214, 211, 209)",
	"CREATED":    "rgb(241, 245, 249)",
}

type nodeSeen struct {
	Task  string `json:"task"`
	Label string `json:"label"`
	State string `json:"state"`
	Fill  string `json:"fill"`
}

const readNodes = `[...document.querySelectorAll("#graph .node")].map(g => ({task: g.dataset.task,
  label: g.querySelector("text.state").textContent, state: g.dataset.state,
  fill: getComputedStyle(g.querySelector("rect.box")).fill}))`

type barSeen struct {
	Task   string   `json:"task"`
	N      int      `json:"n"`
	State  string   `json:"state"`
	Phases []string `json:"phases"`
}

const readBars = `[...document.querySelectorAll("#gantt g.attempt")].map(g => ({task: g.dataset.task, n: Number(g.dataset.n),
  state: g.dataset.state, phases: [...g.querySelectorAll(".phase")].map(p => p.dataset.phase)}))`

// TestDashboardInBrowser runs a five-task workflow by hand:
//
//	extract -> transform -> load -> publish
//	        \-> on_fail (one_failed)
//
// extract's worker goes silent until the reconciler (on the test's clock)
// marks it LOST, then beats again (RUNNING) and succeeds; transform fails
// once and succeeds on its retry, and its first attempt's stale success
// arrives late; on_fail is skipped; publish is running when the page
// cancels the run.
func TestDashboardInBrowser(t *testing.T) {
	b := startBrowser(t)
	sizes := dashboard.New().Names()
	var html, js, css int
	for name, n := range sizes {
		switch filepath.Ext(name) {
		case ".html":
			html += n
		case ".js":
			js += n
		case ".css":
			css += n
		}
	}
	t.Logf("dashboard page weight: HTML %d B, JS %d B, CSS %d B, total %d B (uncompressed)", html, js, css, html+js+css)

	clock := runningClock()
	s := startStack(t, devstack.Options{Now: clock.Now})
	s.createJob(map[string]any{
		"name": "etl-nightly", "pool": "default",
		"schedule": map[string]any{"cron": "30 2 * * 1-5", "timezone": "Asia/Shanghai"},
	})
	s.createJob(map[string]any{
		"name": "ui-dag", "pool": "default",
		"retry":           map[string]any{"max_attempts": 2, "initial_interval": "200ms", "jitter": "none"},
		"timeouts":        map[string]any{"heartbeat": "20s", "queue": "2m", "cancel": "30s", "run": "10m"},
		"evidence_window": "10m",
		"tasks": []any{
			map[string]any{"id": "extract"},
			map[string]any{"id": "transform", "depends_on": []string{"extract"}},
			map[string]any{"id": "on_fail", "depends_on": []string{"extract"}, "trigger_rule": "one_failed"},
			map[string]any{"id": "load", "depends_on": []string{"transform"}},
			map[string]any{"id": "publish", "depends_on": []string{"load"}, "publish": true},
		},
	})
	id := s.trigger("ui-dag", map[string]any{"params": map[string]any{"day": "2026-11-30"}})
	m := s.manualWorker("default")
	zero, three := 0, 3

	// extract: claimed, silent past its 20 s lease (the clock jumps), LOST;
	// then a heartbeat proves it alive (RUNNING) and it succeeds.
	ext, _ := m.receive(id, "extract", 1)
	m.mustClaim(ext, "ghost@boot1")
	clock.Add(25 * time.Second)
	s.waitDetail(id, "extract", "LOST", 30*time.Second)
	if hb, err := m.heartbeat(ext); err != nil || hb.CancelRequested {
		t.Fatalf("heartbeat while LOST: %+v %v", hb, err)
	}
	s.waitDetail(id, "extract", "RUNNING", 10*time.Second)
	if _, r, err := m.complete(ext, worker.Completion{Outcome: worker.OutcomeSucceeded, ExitCode: &zero}); err != nil || r.Result != worker.ResultApplied {
		t.Fatalf("complete extract: %+v %v", r, err)
	}
	// transform: attempt 1 fails, attempt 2 succeeds.
	tr1, _ := m.receive(id, "transform", 1)
	m.mustClaim(tr1, "w1@boot1")
	if _, r, err := m.complete(tr1, worker.Completion{Outcome: worker.OutcomeFailed, ExitCode: &three, ErrorCategory: "bad_input"}); err != nil || r.Result != worker.ResultApplied {
		t.Fatalf("fail transform#1: %+v %v", r, err)
	}
	tr2, _ := m.receive(id, "transform", 2)
	m.mustClaim(tr2, "w2@boot1")
	if _, r, err := m.complete(tr2, worker.Completion{Outcome: worker.OutcomeSucceeded, ExitCode: &zero}); err != nil || r.Result != worker.ResultApplied {
		t.Fatalf("complete transform#2: %+v %v", r, err)
	}
	// attempt 1's success, late: recorded on attempt 1, never applied.
	if _, r, err := m.complete(tr1, worker.Completion{Outcome: worker.OutcomeSucceeded, ExitCode: &zero}); err != nil || r.Result != worker.ResultStale {
		t.Fatalf("late transform#1: %+v %v", r, err)
	}
	ld, _ := m.receive(id, "load", 1)
	m.mustClaim(ld, "w2@boot1")
	if _, r, err := m.complete(ld, worker.Completion{Outcome: worker.OutcomeSucceeded, ExitCode: &zero}); err != nil || r.Result != worker.ResultApplied {
		t.Fatalf("complete load: %+v %v", r, err)
	}
	pub, _ := m.receive(id, "publish", 1)
	m.mustClaim(pub, "w1@boot1")
	stopBeats := m.keepBeating(pub, time.Second)
	s.waitDetail(id, "on_fail", "SKIPPED", 10*time.Second)
	s.waitDetail(id, "publish", "RUNNING", 10*time.Second)

	// The runs list, after entering the key once.
	b.do(chromedp.Navigate(s.url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), s.key),
		chromedp.Click(chromedp.CSS("#key-form button[type=submit]")))
	row := fmt.Sprintf(`document.querySelector('#runs tr[data-run="%s"]')`, id)
	b.waitJS("the run in the runs list", row)
	var rowText string
	b.eval(row+".innerText", &rowText)
	if !strings.Contains(rowText, "ui-dag") || !strings.Contains(rowText, "RUNNING") || !strings.Contains(rowText, "PENDING") {
		t.Fatalf("runs list row %q, want job ui-dag, execution RUNNING, publication PENDING", rowText)
	}
	b.screenshot("runs")
	// The filters: a status the run does not have hides it; its job shows it.
	choose := func(sel, v string) {
		b.eval(fmt.Sprintf(`(() => { const s = document.querySelector(%q); s.value = %q; s.dispatchEvent(new Event("change")); return true; })()`, sel, v), nil)
	}
	choose("#filter-status", "SUCCEEDED")
	b.waitJS("no SUCCEEDED run listed", `document.querySelector('[data-filter="job=&status=SUCCEEDED"]') && document.querySelector("main").innerText.includes("No runs match.")`)
	choose("#filter-status", "")
	b.waitJS("the run listed again", `document.querySelector('[data-filter="job=&status="]') && `+row)
	choose("#filter-job", "ui-dag")
	b.waitJS("the run listed under its job", `document.querySelector('[data-filter="job=ui-dag&status="]') && `+row)

	// The run: graph nodes by state, in colour and in words.
	b.click(fmt.Sprintf(`#runs tr[data-run="%s"] a`, id))
	b.waitJS("five nodes", `document.querySelectorAll("#graph .node").length === 5`)
	want := map[string]string{"extract": "SUCCEEDED", "transform": "SUCCEEDED", "on_fail": "SKIPPED", "load": "SUCCEEDED", "publish": "RUNNING"}
	var nodes []nodeSeen
	b.eval(readNodes, &nodes)
	for _, n := range nodes {
		label := strings.ReplaceAll(want[n.Task], "_", " ")
		if n.Task == "transform" {
			label += " · attempt 2"
		}
		if n.State != want[n.Task] || n.Label != label || n.Fill != stateFill[want[n.Task]] {
			t.Errorf("node %s shows %q in %s, want %q in %s", n.Task, n.Label, n.Fill, label, stateFill[want[n.Task]])
		}
	}
	var edges int
	b.eval(`document.querySelectorAll("#graph .edge").length`, &edges)
	var rules []string
	b.eval(`[...document.querySelectorAll("#graph .node text.rule")].map(x => x.textContent)`, &rules)
	if edges != 4 || !slices.Contains(rules, "rule one_failed") {
		t.Errorf("graph has %d edges and rules %v, want 4 edges and on_fail's one_failed shown", edges, rules)
	}

	// The Gantt: one bar per attempt, split into phases; LOST and the late
	// event marked (the LOST period comes from the history, loaded next).
	b.waitJS("the LOST period drawn", `document.querySelector('#gantt g.attempt[data-task="extract"] .phase-lost')`)
	var bars []barSeen
	b.eval(readBars, &bars)
	wantBars := []barSeen{
		{"extract", 1, "SUCCEEDED", []string{"dep", "queue", "run", "lost"}},
		{"transform", 1, "FAILED", []string{"dep", "queue", "run"}},
		{"transform", 2, "SUCCEEDED", []string{"retry", "queue", "run"}},
		{"load", 1, "SUCCEEDED", []string{"dep", "queue", "run"}},
		{"publish", 1, "RUNNING", []string{"dep", "queue", "run"}},
	}
	slices.SortFunc(bars, func(a, b barSeen) int { return strings.Compare(fmt.Sprint(a.Task, a.N), fmt.Sprint(b.Task, b.N)) })
	slices.SortFunc(wantBars, func(a, b barSeen) int { return strings.Compare(fmt.Sprint(a.Task, a.N), fmt.Sprint(b.Task, b.N)) })
	if fmt.Sprint(bars) != fmt.Sprint(wantBars) {
		t.Errorf("Gantt bars\n got %v\nwant %v", bars, wantBars)
	}
	var late int
	b.eval(`document.querySelectorAll('#gantt path.late[data-task="transform"][data-n="1"]').length`, &late)
	if late != 1 {
		t.Errorf("%d late-event marks on transform attempt 1, want 1", late)
	}
	// Focus (as a keyboard user would) transform's first bar: its details.
	b.eval(`document.querySelector('#gantt g.attempt[data-task="transform"][data-n="1"]').focus()`, nil)
	var tipText string
	b.eval(`document.getElementById("tip").hidden ? "" : document.getElementById("tip").innerText`, &tipText)
	for _, w := range []string{"attempt 1", "w1@boot1", "bad_input", "exit code\n3"} {
		if !strings.Contains(tipText, w) {
			t.Errorf("bar details %q lack %q", tipText, w)
		}
	}

	// The timeline of extract: every history record, LOST and back.
	b.click(`#graph .node[data-task="extract"]`)
	hist := s.records(id, "extract")
	b.waitJS("extract's timeline", fmt.Sprintf(`document.querySelectorAll("#timeline tbody tr").length === %d && document.querySelector("#task-title code").textContent === "extract"`, len(hist)))
	var shown []string
	b.eval(`[...document.querySelectorAll("#timeline tbody tr")].map(r => r.dataset.to)`, &shown)
	if !slices.Equal(shown, recordStates(hist)) || !slices.Equal(shown, []string{"CREATED", "SCHEDULED", "QUEUED", "RUNNING", "LOST", "RUNNING", "SUCCEEDED"}) {
		t.Errorf("timeline rows %v, history %v", shown, recordStates(hist))
	}
	var lostRow string
	b.eval(`document.querySelector('#timeline tr[data-to="LOST"]').innerText`, &lostRow)
	if !strings.Contains(lostRow, "lease.expired") || !strings.Contains(lostRow, "reconciler") {
		t.Errorf("LOST row %q, want lease.expired by the reconciler", lostRow)
	}
	b.screenshot("run")

	// transform's timeline holds the late event, highlighted.
	b.click(`#graph .node[data-task="transform"]`)
	b.waitJS("transform's late event row", `document.querySelector("#task-title code").textContent === "transform" && document.querySelector('#timeline tr.late')`)

	// A refused action shows the server's sentence.
	b.click(`#graph .node[data-task="load"]`)
	b.waitJS("load selected", `document.querySelector("#task-title code").textContent === "load"`)
	b.click("#retry-task")
	b.confirm(nil)
	b.waitJS("the refusal", `!document.getElementById("confirm-error").hidden`)
	var refusal string
	b.eval(`document.getElementById("confirm-error").textContent`, &refusal)
	if refusal != "The task's current state does not allow this." {
		t.Errorf("refused retry shows %q", refusal)
	}
	b.click("#confirm-no")

	// Cancel from the page: publish becomes CANCELLING, its worker sees the
	// request on its next beat and acknowledges; the page follows by itself.
	b.click("#cancel-run")
	b.confirm(map[string]string{"reason": "cancelled from the dashboard test"})
	b.waitJS("the dialog closed", `!document.getElementById("confirm").open`)
	if d := s.runDetail(id); d.task("publish").State != "CANCELLING" || !d.task("publish").CancelRequested {
		t.Fatalf("after cancel from the page: publish %+v", d.task("publish"))
	}
	if err := stopBeats(); err != nil {
		t.Fatal(err)
	}
	if hb, err := m.heartbeat(pub); err != nil || !hb.CancelRequested {
		t.Fatalf("heartbeat after cancel: %+v %v", hb, err)
	}
	if _, r, err := m.complete(pub, worker.Completion{Outcome: worker.OutcomeCancelled}); err != nil || r.Result != worker.ResultApplied {
		t.Fatalf("acknowledge cancel: %+v %v", r, err)
	}
	if d := s.waitRun(id, 30*time.Second, "CANCELLED", "SUCCEEDED", "FAILED"); d.Run.ExecutionState != "CANCELLED" {
		t.Fatalf("run after cancel from the page: %+v", d.Run)
	}
	b.waitJS("the page shows the run cancelled without a reload", `document.querySelector('#graph .node[data-task="publish"]').dataset.state === "CANCELLED" &&
		[...document.querySelectorAll("main .facts .badge")].some(x => x.textContent === "CANCELLED")`)
	b.eval(readNodes, &nodes)
	for _, n := range nodes {
		if n.Task == "publish" && (n.Label != "CANCELLED" || n.Fill != stateFill["CANCELLED"]) {
			t.Errorf("publish shows %q in %s after the cancel", n.Label, n.Fill)
		}
	}

	// The jobs page: schedule in words, last runs, pause from the page.
	b.do(chromedp.Navigate(s.url + "/ui/#/jobs"))
	b.waitJS("the jobs table", `document.querySelector('#jobs tr[data-job="etl-nightly"]') && document.querySelector('#jobs tr[data-job="ui-dag"] .square')`)
	var sched string
	b.eval(`document.querySelector('#jobs tr[data-job="etl-nightly"] .schedule').innerText`, &sched)
	if sched != "at 02:30 on Monday to Friday\nAsia/Shanghai" {
		t.Errorf("schedule shown as %q", sched)
	}
	var squares []string
	b.eval(`[...document.querySelectorAll('#jobs tr[data-job="ui-dag"] .square')].map(x => x.getAttribute("aria-label"))`, &squares)
	if len(squares) != 1 || !strings.Contains(squares[0], "CANCELLED") {
		t.Errorf("ui-dag's last runs %v, want one CANCELLED", squares)
	}
	b.screenshot("jobs")
	b.click(`#jobs tr[data-job="etl-nightly"] button`)
	b.confirm(nil)
	b.waitJS("etl-nightly paused on the page", `document.querySelector('#jobs tr[data-job="etl-nightly"] .badge.st-PAUSED')`)
	if r := s.call("GET", "/v1/jobs/etl-nightly", nil).must(t, http.StatusOK); r.Body["job"].(map[string]any)["paused"] != true {
		t.Errorf("etl-nightly after Pause on the page: %s", r.Raw)
	}

	// A phone's width: nothing but the scrolling panels is wider than it.
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
		chromedp.Navigate(s.url+"/ui/#/runs/"+id))
	b.waitJS("the run at phone width", `document.querySelectorAll("#graph .node").length === 5 && document.querySelector("#timeline")`)
	var overflow int
	b.eval(`document.documentElement.scrollWidth - window.innerWidth`, &overflow)
	if overflow > 0 {
		t.Errorf("at 390 px the page is %d px wider than the screen", overflow)
	}
	b.screenshot("run-phone")
	b.do(chromedp.EmulateViewport(1280, 800))

	// Time to first render of a 48-task run: a fresh page load, from
	// navigation start to the graph drawn (API answer included).
	var tasks []any
	for i := range 48 {
		task := map[string]any{"id": fmt.Sprintf("t%02d", i)}
		if layer := i / 8; layer > 0 {
			task["depends_on"] = []string{fmt.Sprintf("t%02d", (layer-1)*8+i%8), fmt.Sprintf("t%02d", (layer-1)*8+(i+3)%8)}
		}
		tasks = append(tasks, task)
	}
	s.createJob(map[string]any{"name": "wide48", "pool": "default", "tasks": tasks})
	wide := s.trigger("wide48", nil)
	b.do(chromedp.Navigate("about:blank"), chromedp.Navigate(s.url+"/ui/#/runs/"+wide))
	b.waitJS("48 nodes", `document.querySelectorAll("#graph .node").length === 48 && performance.getEntriesByName("rl-first-render").length`)
	var marks struct {
		Fetched float64 `json:"fetched"`
		Render  float64 `json:"render"`
	}
	b.eval(`({fetched: performance.getEntriesByName("rl-run-fetched")[0].startTime, render: performance.getEntriesByName("rl-first-render")[0].startTime})`, &marks)
	t.Logf("time to first render of a 48-task run: %.0f ms from navigation start to the graph and Gantt drawn (the run's API answer arrived at %.0f ms)", marks.Render, marks.Fetched)
	var rows int
	b.eval(`document.querySelectorAll("#gantt g.row").length`, &rows)
	if rows != 48 {
		t.Errorf("the 48-task run's Gantt has %d rows", rows)
	}
	b.screenshot("run-48")
}

// TestDashboardEncodesIDsInPaths: an id from the page's address goes into
// API paths encoded, so a crafted link (#/runs/..%2Fjobs%2F<job>) cannot
// make the page call another route: the browser would resolve the dot
// segments of an unencoded id before sending.
func TestDashboardEncodesIDsInPaths(t *testing.T) {
	b := startBrowser(t)
	// The paths the API sees (decoded, as API Gateway hands them over);
	// the crafted id matches no operation of the OpenAPI document, so the
	// usual answer check is off here.
	// (The API's mux then redirects that uncleaned path to its clean form,
	// which the browser follows with a GET: a read, never an action.)
	var mu sync.Mutex
	var seen []string
	s := startStack(t, devstack.Options{WrapAPI: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, r.Method+" "+r.URL.Path)
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	}})
	s.createJob(map[string]any{"name": "target", "pool": "default"})
	b.do(chromedp.Navigate(s.url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), s.key),
		chromedp.Click(chromedp.CSS("#key-form button[type=submit]")))
	b.waitJS("the key taken", `!document.querySelector("#signout").hidden`)
	b.do(chromedp.Navigate(s.url + "/ui/#/runs/..%2F..%2Fv1%2Fjobs%2Ftarget"))
	calls := `performance.getEntriesByType("resource").map(e => new URL(e.name).pathname).filter(p => p.startsWith("/v1/"))`
	b.waitJS("the page's call for the run", calls+`.some(p => p.startsWith("/v1/runs/.."))`)
	var paths []string
	b.eval(calls, &paths)
	for _, p := range paths {
		if p == "/v1/jobs/target" {
			t.Errorf("the crafted link made the page call %s (calls %v)", p, paths)
		}
	}
	if !slices.Contains(paths, "/v1/runs/..%2F..%2Fv1%2Fjobs%2Ftarget") {
		t.Errorf("calls %v, want the run's id encoded in one path", paths)
	}
	// The id arrives whole under /v1/runs/ (decoded, as API Gateway
	// passes paths on), not resolved by the browser to /v1/jobs/target.
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(seen, "GET /v1/runs/../../v1/jobs/target") {
		t.Errorf("requests %v: want the run's id under /v1/runs/", seen)
	}
}
