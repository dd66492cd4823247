package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/shared/jobspec"
)

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every problem of every file is reported, each with file, field and code.
func TestReadJobFilesReportsEveryProblem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, "ok.yaml", "name: a\npool: demo\n---\n# second\nname: b\npool: demo\n")
	write(t, dir, "sub/c.json", `{"name": "c", "pool": "demo"}`)
	write(t, dir, "notes.txt", "ignored")
	write(t, dir, "bad/cycle.yaml", "name: d\npool: demo\ntasks:\n  - {id: x1, depends_on: [y1]}\n  - {id: y1, depends_on: [x1]}\n")
	write(t, dir, "bad/dup.yaml", "name: a\npool: demo\n")
	write(t, dir, "bad/field.json", `{"name": "e", "pool": "demo", "retry": {"max_attempts": "3"}}`)
	write(t, dir, "bad/syntax.yaml", "name: [unclosed\n")
	defs, problems := readJobFiles([]string{dir})
	joined := strings.Join(problems, "\n")
	for _, want := range []string{
		"bad/cycle.yaml: tasks: dependency_cycle:",
		"ok.yaml#1: name: invalid_field: job \"a\" is also defined in " + filepath.Join(dir, "bad/dup.yaml"),
		"bad/field.json: retry.max_attempts: invalid_field:",
		"bad/syntax.yaml: (body): invalid_json:",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("problems lack %q:\n%s", want, joined)
		}
	}
	var names []string
	for _, d := range defs {
		names = append(names, d.job.Name)
	}
	if strings.Join(names, ",") != "a,b,c" {
		t.Errorf("definitions read: %v, want a (bad/dup.yaml), b, c", names)
	}
}

func TestPlanApply(t *testing.T) {
	t.Parallel()
	load := func(body string) jobspec.Job {
		j, err := jobspec.Load([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	current := []client.Job{
		{Job: load(`{"name": "same", "pool": "demo", "payload": {"x": 1}}`), Version: 4},
		{Job: load(`{"name": "changed", "pool": "demo"}`), Version: 2},
		{Job: load(`{"name": "gone", "pool": "demo"}`), Version: 1},
		{Job: load(`{"name": "daily", "schedule": {"cron": "@daily"}}`), Version: 1},
		{Job: load(`{"name": "hourly", "schedule": {"cron": "@hourly", "catchup": "latest", "catchup_window": "24h"}}`), Version: 1},
	}
	defs := []jobFile{
		// Defaults written out or left implicit compare equal.
		{source: "same.yaml", job: load(`{"name": "same", "pool": "demo", "payload": {"x": 1}, "overlap": "allow"}`)},
		{source: "changed.yaml", job: load(`{"name": "changed", "pool": "demo", "retry": {"max_attempts": 5}}`)},
		{source: "new.yaml", job: load(`{"name": "new", "pool": "demo"}`)},
		// The schedule's catch-up defaults too; a changed policy is a change
		// of schedule.
		{source: "daily.yaml", job: load(`{"name": "daily", "schedule": {"cron": "@daily", "timezone": "UTC", "catchup": "latest", "catchup_window": "24h"}}`)},
		{source: "hourly.yaml", job: load(`{"name": "hourly", "schedule": {"cron": "@hourly", "catchup": "all"}}`)},
	}
	for _, prune := range []bool{false, true} {
		plan, err := planApply(defs, current, prune)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range plan {
			got = append(got, c.Action+" "+c.Job+" "+strings.Join(c.Fields, ","))
		}
		want := "unchanged same |update changed retry|create new |unchanged daily |update hourly schedule"
		if prune {
			want += "|delete gone "
		}
		if strings.Join(got, "|") != want {
			t.Errorf("prune=%v: plan %q, want %q", prune, strings.Join(got, "|"), want)
		}
		if plan[1].version != 2 {
			t.Errorf("the update carries version %d, want 2 (If-Match)", plan[1].version)
		}
	}
}

// A --prune that deletes many jobs, or a large share of them, waits for
// --yes.
func TestConfirmPrune(t *testing.T) {
	t.Parallel()
	plan := func(deletes, others int) []change {
		var p []change
		for range deletes {
			p = append(p, change{Action: "delete"})
		}
		for range others {
			p = append(p, change{Action: "unchanged"})
		}
		return p
	}
	for _, c := range []struct {
		deletes, total int
		yes, ok        bool
	}{
		{0, 0, false, true},
		{0, 10, false, true},
		{3, 9, false, true},    // 3 and a third: allowed
		{3, 8, false, false},   // more than a third
		{4, 100, false, false}, // more than 3
		{1, 2, false, false},
		{1, 3, false, true},
		{4, 100, true, true},
		{2, 2, true, true},
	} {
		err := confirmPrune(plan(c.deletes, c.total-c.deletes), c.total, c.yes)
		if (err == nil) != c.ok {
			t.Errorf("%d deletes of %d jobs, --yes=%v: %v, want allowed=%v", c.deletes, c.total, c.yes, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("delete %d of the %d jobs", c.deletes, c.total)) {
			t.Errorf("refusal does not count the deletions: %v", err)
		}
	}
}
