package metricspage_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/metricspage"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// dashboardPath is the Grafana dashboard of the page's metrics.
const dashboardPath = "../../docs/grafana/runledger.json"

// TestDashboardNamesOnlyExportedMetrics parses the Grafana dashboard and
// checks that every metric each panel's expression names is one the page
// exports (a histogram's _bucket, _sum and _count series included), and
// that every metric the page exports is on some panel: neither can drift.
func TestDashboardNamesOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	// Every family shows once a life and a run end are counted.
	m := metricspage.New()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	m.Moved(scheduler.Moved{Job: "j", Run: "r", Task: "a", To: statemodel.StateCreated, At: at, Event: statemodel.EvCreated, EventTime: at})
	m.Moved(scheduler.Moved{Job: "j", Run: "r", Task: "a", From: statemodel.StateCreated, To: statemodel.StateSucceeded, At: at, Event: statemodel.EvSucceeded, EventTime: at})
	m.RunEnded(scheduler.RunEnded{Job: "j", Run: "r", State: statemodel.RunSucceeded, HasDeviation: true})
	exported := map[string]string{} // series name -> family
	for name, fam := range parse(t, m) {
		exported[name] = name
		if fam.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exported[name+s] = name
			}
		}
	}
	shown := map[string]bool{}
	names := regexp.MustCompile(`\brunledger_[a-z_]+`)
	exprs := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			found := names.FindAllString(tg.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q: %q names no runledger metric", p.Title, tg.Expr)
			}
			for _, n := range found {
				fam, ok := exported[n]
				if !ok {
					t.Errorf("panel %q names %s, which the page does not export", p.Title, n)
				}
				shown[fam] = true
			}
		}
	}
	for name, fam := range exported {
		if name == fam && !shown[fam] {
			t.Errorf("the page exports %s, and no panel shows it", fam)
		}
	}
	if exprs < 6 || !strings.Contains(string(b), "runledger_oldest_in_state_seconds") {
		t.Errorf("%d queries: the dashboard lost its panels", exprs)
	}
}
