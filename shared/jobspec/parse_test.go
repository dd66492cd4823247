package jobspec_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// now is the injected clock of every test.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var opts = jobspec.Options{Pools: []string{"default", "demo"}, Now: now}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustParse(t *testing.T, body string) jobspec.Job {
	t.Helper()
	j, err := jobspec.Parse([]byte(body), opts)
	if err != nil {
		t.Fatalf("parse %s: %v", body, err)
	}
	return j
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExampleRoundTrip takes the example body of docs/api.md (testdata holds it
// verbatim) through Parse, checks what it means, and checks that its
// canonical JSON is stable: Parse and Load read it back to the same JSON.
func TestExampleRoundTrip(t *testing.T) {
	j, err := jobspec.Parse(readFile(t, "nightly-report.json"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if j.Name != "nightly-report" || j.Pool != "default" || j.Overlap != jobspec.OverlapAllow {
		t.Errorf("name/pool/overlap = %q/%q/%q", j.Name, j.Pool, j.Overlap)
	}
	if s := j.Schedule; s.Kind != jobspec.ScheduleCron || s.Cron != "0 2 * * *" || s.Location.String() != "Asia/Shanghai" {
		t.Errorf("schedule = %+v", s)
	}
	if string(j.Payload) != `{"any":"json, at most 64 KiB"}` {
		t.Errorf("payload = %s", j.Payload)
	}
	if want := statemodel.DefaultPolicy(); !reflect.DeepEqual(j.Policy(), want) {
		t.Errorf("policy = %+v, want the defaults it spells out, %+v", j.Policy(), want)
	}
	wantDeps := []jobspec.JobDependency{{Job: "upstream", Require: statemodel.RequirePublished}}
	if !reflect.DeepEqual(j.DependsOnJobs, wantDeps) {
		t.Errorf("depends_on_jobs = %+v", j.DependsOnJobs)
	}
	wantNodes := []statemodel.TaskNode{
		{ID: "extract", DependsOn: nil, Rule: statemodel.RuleAllSuccess},
		{ID: "load", DependsOn: []string{"extract"}, Rule: statemodel.RuleAllSuccess},
		{ID: "cleanup", DependsOn: []string{"load"}, Rule: statemodel.RuleAllDone},
		{ID: "publish", DependsOn: []string{"load"}, Rule: statemodel.RuleAllSuccess, Publish: true},
	}
	if got := j.Nodes(); !reflect.DeepEqual(got, wantNodes) {
		t.Errorf("nodes = %+v\nwant %+v", got, wantNodes)
	}
	next, ok := j.NextFire(now)
	if want := time.Date(2026, 3, 1, 18, 0, 0, 0, time.UTC); !ok || !next.Equal(want) {
		t.Errorf("next fire after %s = %s %v, want %s (02:00 in Shanghai)", now, next, ok, want)
	}

	canonical := marshal(t, j)
	golden := filepath.Join("testdata", "nightly-report.canonical.json")
	if *update {
		var buf bytes.Buffer
		if err := json.Indent(&buf, canonical, "", "  "); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, append(buf.Bytes(), '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var want bytes.Buffer
	if err := json.Compact(&want, readFile(t, "nightly-report.canonical.json")); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(canonical, want.Bytes()) {
		t.Errorf("canonical JSON\n got %s\nwant %s", canonical, want.Bytes())
	}

	again, err := jobspec.Parse(canonical, opts)
	if err != nil {
		t.Fatalf("parse canonical: %v", err)
	}
	loaded, err := jobspec.Load(canonical)
	if err != nil {
		t.Fatalf("load canonical: %v", err)
	}
	for name, k := range map[string]jobspec.Job{"parse": again, "load": loaded} {
		if b := marshal(t, k); !bytes.Equal(b, canonical) {
			t.Errorf("%s of the canonical JSON writes\n%s\nnot\n%s", name, b, canonical)
		}
		if !reflect.DeepEqual(k.Tasks(), j.Tasks()) {
			t.Errorf("%s of the canonical JSON has other effective tasks", name)
		}
	}
}

// TestDefaults: a definition of only a name is a manual job in the default
// pool, with one task "main" and the default policy.
func TestDefaults(t *testing.T) {
	j := mustParse(t, `{"name": "tiny"}`)
	if j.Schedule.Kind != jobspec.ScheduleManual || j.Pool != jobspec.DefaultPool || j.Overlap != jobspec.OverlapAllow || j.Payload != nil {
		t.Errorf("job = %+v", j)
	}
	if _, ok := j.NextFire(now); ok {
		t.Error("a manual job has a next fire")
	}
	if !reflect.DeepEqual(j.Policy(), statemodel.DefaultPolicy()) {
		t.Errorf("policy = %+v", j.Policy())
	}
	tasks := j.Tasks()
	want := []jobspec.Task{{ID: "main", Rule: statemodel.RuleAllSuccess, Pool: "default", Policy: statemodel.DefaultPolicy()}}
	if !reflect.DeepEqual(tasks, want) {
		t.Errorf("tasks = %+v\nwant %+v", tasks, want)
	}
	const canonical = `{"name":"tiny","pool":"default","retry":{"max_attempts":3,"initial_interval":"10s",` +
		`"backoff_coefficient":2,"max_interval":"10m","jitter":"full"},"timeouts":{"queue":"10m","run":"1h",` +
		`"heartbeat":"1m","cancel":"2m","dependency":"24h"},"evidence_window":"5m","overlap":"allow",` +
		`"tasks":[{"id":"main","depends_on":[],"trigger_rule":"all_success","publish":false}],"depends_on_jobs":[]}`
	if got := string(marshal(t, j)); got != canonical {
		t.Errorf("canonical JSON\n got %s\nwant %s", got, canonical)
	}
	// Empty tasks, null fields and a missing timezone read as their defaults.
	same := mustParse(t, `{"name": "tiny", "tasks": [], "payload": null, "retry": null, "schedule": null}`)
	if got := string(marshal(t, same)); got != canonical {
		t.Errorf("with nulls and empty tasks: %s", got)
	}
	utc := mustParse(t, `{"name": "tiny", "schedule": {"cron": "@daily"}}`)
	if utc.Schedule.Location != time.UTC {
		t.Errorf("default zone = %v", utc.Schedule.Location)
	}
	// Catch-up defaults to latest within 24h, and the canonical JSON says so.
	if s := utc.Schedule; s.Catchup != jobspec.CatchupLatest || s.CatchupWindow != 24*time.Hour {
		t.Errorf("default catch-up = %q within %v", s.Catchup, s.CatchupWindow)
	}
	if got, want := string(marshal(t, utc)), `"schedule":{"cron":"@daily","timezone":"UTC","catchup":"latest","catchup_window":"24h"}`; !strings.Contains(got, want) {
		t.Errorf("canonical JSON %s lacks %s", got, want)
	}
	all := mustParse(t, `{"name": "tiny", "schedule": {"rate": "1h", "catchup": "all", "catchup_window": "168h"}}`)
	if s := all.Schedule; s.Catchup != jobspec.CatchupAll || s.CatchupWindow != 168*time.Hour {
		t.Errorf("catch-up = %q within %v, want all within 168h", s.Catchup, s.CatchupWindow)
	}
	if back, err := jobspec.Load(marshal(t, all)); err != nil || back.Schedule.Catchup != jobspec.CatchupAll || back.Schedule.CatchupWindow != 168*time.Hour {
		t.Errorf("Load of the canonical JSON: %+v, %v", back.Schedule, err)
	}
	// The longest name and a depends_on_jobs entry without require.
	long := strings.Repeat("a", 64)
	j = mustParse(t, `{"name": "`+long+`", "depends_on_jobs": [{"job": "up"}]}`)
	if j.Name != long || j.DependsOnJobs[0].Require != statemodel.RequirePublished {
		t.Errorf("job = %+v", j)
	}
}

// bigPayload is a JSON string of exactly n bytes (quotes included).
func bigPayload(n int) string { return `"` + strings.Repeat("x", n-2) + `"` }

func TestParseErrors(t *testing.T) {
	past := protocol.FormatTime(now.Add(-time.Second))
	tooManyTasks := make([]string, jobspec.MaxTasks+1)
	for i := range tooManyTasks {
		tooManyTasks[i] = fmt.Sprintf(`{"id": "t%d"}`, i)
	}
	tooManyDeps := make([]string, jobspec.MaxJobDependencies+1)
	for i := range tooManyDeps {
		tooManyDeps[i] = fmt.Sprintf(`{"job": "up%d"}`, i)
	}
	bigTasks := make([]string, 5)
	for i := range bigTasks {
		bigTasks[i] = fmt.Sprintf(`{"id": "t%d", "payload": %s}`, i, bigPayload(60*1024))
	}
	cases := []struct {
		name  string
		body  string
		code  protocol.Code
		field string
		// in is a part the message must contain.
		in string
	}{
		// The body.
		{"empty body", ``, protocol.CodeInvalidJSON, "", "empty"},
		{"bad JSON", `{"name": "a",`, protocol.CodeInvalidJSON, "", "not valid JSON"},
		{"trailing data", `{"name": "a"} {}`, protocol.CodeInvalidJSON, "", "not valid JSON"},
		{"not an object", `["a"]`, protocol.CodeInvalidJSON, "", "must be a JSON object"},
		{"not UTF-8", "{\"name\": \"a\", \"payload\": \"\xff\"}", protocol.CodeInvalidJSON, "", "not valid UTF-8"},
		{"body over 1 MiB", `{"name": "a", "payload": ` + bigPayload(jobspec.MaxBodyBytes) + `}`, protocol.CodePayloadTooLarge, "", "1 MiB"},
		{"definition over 256 KiB", `{"name": "a", "tasks": [` + strings.Join(bigTasks, ",") + `]}`, protocol.CodePayloadTooLarge, "", "256 KiB"},
		{"unknown field", `{"name": "a", "colour": "red"}`, protocol.CodeInvalidField, "colour", "not a known field"},
		{"unknown nested field", `{"name": "a", "tasks": [{"id": "x", "retyr": {}}]}`, protocol.CodeInvalidField, "tasks[0].retyr", "not a known field"},
		{"unknown fields reported in order", `{"name": "a", "zz": 1, "bb": 2}`, protocol.CodeInvalidField, "bb", ""},
		{"read-only field", `{"name": "a", "version": 3}`, protocol.CodeInvalidField, "version", "set by the server"},

		// The name.
		{"name missing", `{"pool": "default"}`, protocol.CodeInvalidField, "name", "required"},
		{"name not a string", `{"name": 5}`, protocol.CodeInvalidField, "name", "must be a string"},
		{"name with capitals", `{"name": "Nightly"}`, protocol.CodeInvalidField, "name", "lowercase"},
		{"name with a space", `{"name": "a b"}`, protocol.CodeInvalidField, "name", "lowercase"},
		{"name starting with a dash", `{"name": "-a"}`, protocol.CodeInvalidField, "name", ""},
		{"name of 65 characters", `{"name": "` + strings.Repeat("a", 65) + `"}`, protocol.CodeInvalidField, "name", ""},
		{"empty name", `{"name": ""}`, protocol.CodeInvalidField, "name", ""},

		// The schedule.
		{"bad cron", `{"name": "a", "schedule": {"cron": "61 * * * *"}}`, protocol.CodeInvalidCron, "schedule.cron", "61"},
		{"cron with seconds", `{"name": "a", "schedule": {"cron": "0 0 2 * * *"}}`, protocol.CodeInvalidCron, "schedule.cron", "five fields"},
		{"cron of words", `{"name": "a", "schedule": {"cron": "every day"}}`, protocol.CodeInvalidCron, "schedule.cron", ""},
		{"empty cron", `{"name": "a", "schedule": {"cron": ""}}`, protocol.CodeInvalidCron, "schedule.cron", ""},
		{"@every", `{"name": "a", "schedule": {"cron": "@every 5m"}}`, protocol.CodeInvalidCron, "schedule.cron", "@hourly"},
		{"@yearly", `{"name": "a", "schedule": {"cron": "@yearly"}}`, protocol.CodeInvalidCron, "schedule.cron", "@hourly"},
		{"zone in the cron", `{"name": "a", "schedule": {"cron": "CRON_TZ=UTC 0 2 * * *"}}`, protocol.CodeInvalidCron, "schedule.cron", "schedule.timezone"},
		{"cron that never fires", `{"name": "a", "schedule": {"cron": "0 0 30 2 *"}}`, protocol.CodeInvalidCron, "schedule.cron", "never fires"},
		{"bad zone", `{"name": "a", "schedule": {"cron": "@daily", "timezone": "Mars/Olympus"}}`, protocol.CodeInvalidTimezone, "schedule.timezone", "Mars/Olympus"},
		{"Local zone", `{"name": "a", "schedule": {"cron": "@daily", "timezone": "Local"}}`, protocol.CodeInvalidTimezone, "schedule.timezone", ""},
		{"zone not a string", `{"name": "a", "schedule": {"cron": "@daily", "timezone": 8}}`, protocol.CodeInvalidField, "schedule.timezone", "string"},
		{"at in the past", `{"name": "a", "schedule": {"at": "` + past + `"}}`, protocol.CodeInvalidField, "schedule.at", "in the past"},
		{"at not a time", `{"name": "a", "schedule": {"at": "tomorrow"}}`, protocol.CodeInvalidField, "schedule.at", "RFC 3339"},
		{"at without offset", `{"name": "a", "schedule": {"at": "2030-01-01T00:00:00"}}`, protocol.CodeInvalidField, "schedule.at", "RFC 3339"},
		{"cron and rate", `{"name": "a", "schedule": {"cron": "@daily", "rate": "5m"}}`, protocol.CodeInvalidField, "schedule", "cron and rate"},
		{"rate and at", `{"name": "a", "schedule": {"rate": "5m", "at": "2030-01-01T00:00:00Z"}}`, protocol.CodeInvalidField, "schedule", "rate and at"},
		{"empty schedule", `{"name": "a", "schedule": {}}`, protocol.CodeInvalidField, "schedule", "one of cron, rate or at"},
		{"schedule not an object", `{"name": "a", "schedule": "daily"}`, protocol.CodeInvalidField, "schedule", "object"},
		{"zone alone", `{"name": "a", "schedule": {"timezone": "UTC"}}`, protocol.CodeInvalidField, "schedule.timezone", "cron"},
		{"zone with rate", `{"name": "a", "schedule": {"rate": "5m", "timezone": "UTC"}}`, protocol.CodeInvalidField, "schedule.timezone", "rate"},
		{"rate too short", `{"name": "a", "schedule": {"rate": "30s"}}`, protocol.CodeInvalidField, "schedule.rate", "at least 1m"},
		{"negative rate", `{"name": "a", "schedule": {"rate": "-5m"}}`, protocol.CodeInvalidField, "schedule.rate", ""},
		{"rate with milliseconds", `{"name": "a", "schedule": {"rate": "5m500ms"}}`, protocol.CodeInvalidField, "schedule.rate", "whole number of seconds"},
		{"rate not a duration", `{"name": "a", "schedule": {"rate": "often"}}`, protocol.CodeInvalidField, "schedule.rate", "not a duration"},
		{"rate as a number", `{"name": "a", "schedule": {"rate": 300}}`, protocol.CodeInvalidField, "schedule.rate", "string"},
		{"unknown catchup", `{"name": "a", "schedule": {"rate": "5m", "catchup": "some"}}`, protocol.CodeInvalidField, "schedule.catchup", `"latest", "none" or "all"`},
		{"catchup not a string", `{"name": "a", "schedule": {"rate": "5m", "catchup": true}}`, protocol.CodeInvalidField, "schedule.catchup", "string"},
		{"catchup alone", `{"name": "a", "schedule": {"catchup": "all"}}`, protocol.CodeInvalidField, "schedule", "one of cron, rate or at"},
		{"catchup window not a duration", `{"name": "a", "schedule": {"rate": "5m", "catchup_window": "a day"}}`, protocol.CodeInvalidField, "schedule.catchup_window", "not a duration"},
		{"zero catchup window", `{"name": "a", "schedule": {"rate": "5m", "catchup_window": "0s"}}`, protocol.CodeInvalidField, "schedule.catchup_window", "positive"},
		{"catchup window over a year", `{"name": "a", "schedule": {"cron": "@daily", "catchup_window": "8761h"}}`, protocol.CodeInvalidField, "schedule.catchup_window", "at most 8760h"},

		// Pools and payloads.
		{"unknown pool", `{"name": "a", "pool": "gpu"}`, protocol.CodeInvalidField, "pool", "default, demo"},
		{"empty pool", `{"name": "a", "pool": ""}`, protocol.CodeInvalidField, "pool", "empty"},
		{"unknown task pool", `{"name": "a", "tasks": [{"id": "x"}, {"id": "y", "pool": "gpu"}]}`, protocol.CodeInvalidField, "tasks[1].pool", "gpu"},
		{"payload over 64 KiB", `{"name": "a", "payload": ` + bigPayload(jobspec.MaxPayloadBytes+1) + `}`, protocol.CodePayloadTooLarge, "payload", "64 KiB"},
		{"task payload over 64 KiB", `{"name": "a", "tasks": [{"id": "x", "payload": ` + bigPayload(jobspec.MaxPayloadBytes+1) + `}]}`, protocol.CodePayloadTooLarge, "tasks[0].payload", "64 KiB"},

		// Durations, retry and timeouts.
		{"duration in words", `{"name": "a", "timeouts": {"run": "1 hour"}}`, protocol.CodeInvalidField, "timeouts.run", "not a duration"},
		{"duration as a number", `{"name": "a", "retry": {"initial_interval": 10}}`, protocol.CodeInvalidField, "retry.initial_interval", "string"},
		{"zero heartbeat", `{"name": "a", "timeouts": {"heartbeat": "0s"}}`, protocol.CodeInvalidField, "timeouts.heartbeat", "positive"},
		{"negative queue timeout", `{"name": "a", "timeouts": {"queue": "-1m"}}`, protocol.CodeInvalidField, "timeouts.queue", "positive"},
		{"unknown timeout", `{"name": "a", "timeouts": {"start": "1m"}}`, protocol.CodeInvalidField, "timeouts.start", "not a known field"},
		{"negative evidence window", `{"name": "a", "evidence_window": "-1m"}`, protocol.CodeInvalidField, "evidence_window", "negative"},
		{"zero deadline", `{"name": "a", "deadline": "0s"}`, protocol.CodeInvalidField, "deadline", "positive"},
		{"deadline in words", `{"name": "a", "deadline": "an hour"}`, protocol.CodeInvalidField, "deadline", "not a duration"},
		{"retention under a day", `{"name": "a", "retention": "23h59m"}`, protocol.CodeInvalidField, "retention", "within 24h..87600h"},
		{"retention over ten years", `{"name": "a", "retention": "87601h"}`, protocol.CodeInvalidField, "retention", "within 24h..87600h"},
		{"retention in days", `{"name": "a", "retention": "90d"}`, protocol.CodeInvalidField, "retention", "not a duration"},
		{"zero attempts", `{"name": "a", "retry": {"max_attempts": 0}}`, protocol.CodeInvalidField, "retry.max_attempts", "between 1 and 100"},
		{"101 attempts", `{"name": "a", "retry": {"max_attempts": 101}}`, protocol.CodeInvalidField, "retry.max_attempts", "between 1 and 100"},
		{"fractional attempts", `{"name": "a", "retry": {"max_attempts": 2.5}}`, protocol.CodeInvalidField, "retry.max_attempts", "integer"},
		{"coefficient below 1", `{"name": "a", "retry": {"backoff_coefficient": 0.5}}`, protocol.CodeInvalidField, "retry.backoff_coefficient", "at least 1"},
		{"coefficient as text", `{"name": "a", "retry": {"backoff_coefficient": "2"}}`, protocol.CodeInvalidField, "retry.backoff_coefficient", "number"},
		{"zero initial interval", `{"name": "a", "retry": {"initial_interval": "0s"}}`, protocol.CodeInvalidField, "retry.initial_interval", "positive"},
		{"max below initial", `{"name": "a", "retry": {"initial_interval": "5m", "max_interval": "1m"}}`, protocol.CodeInvalidField, "retry.max_interval", "at least retry.initial_interval"},
		{"max below the default initial", `{"name": "a", "retry": {"max_interval": "5s"}}`, protocol.CodeInvalidField, "retry.max_interval", "(10s)"},
		{"bad jitter", `{"name": "a", "retry": {"jitter": "half"}}`, protocol.CodeInvalidField, "retry.jitter", `"full" or "none"`},
		{"intervals with an initial interval", `{"name": "a", "retry": {"intervals": ["30s"], "initial_interval": "10s"}}`, protocol.CodeInvalidField, "retry.intervals", "retry.initial_interval"},
		{"no intervals", `{"name": "a", "retry": {"intervals": []}}`, protocol.CodeInvalidField, "retry.intervals", "1 to 20"},
		{"21 intervals", `{"name": "a", "retry": {"intervals": ["1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s"]}}`, protocol.CodeInvalidField, "retry.intervals", "not 21"},
		{"interval under a second", `{"name": "a", "retry": {"intervals": ["30s", "500ms"]}}`, protocol.CodeInvalidField, "retry.intervals[1]", "within 1s..24h"},
		{"interval over a day", `{"name": "a", "tasks": [{"id": "x", "retry": {"intervals": ["25h"]}}]}`, protocol.CodeInvalidField, "tasks[0].retry.intervals[0]", "within 1s..24h"},
		{"interval as a number", `{"name": "a", "retry": {"intervals": [30]}}`, protocol.CodeInvalidField, "retry.intervals[0]", "string"},
		{"intervals as a string", `{"name": "a", "retry": {"intervals": "30s"}}`, protocol.CodeInvalidField, "retry.intervals", "array"},
		{"task retry against the job's", `{"name": "a", "retry": {"max_interval": "10m"}, "tasks": [{"id": "x", "retry": {"initial_interval": "20m"}}]}`,
			protocol.CodeInvalidField, "tasks[0].retry.max_interval", "merged with the job's"},
		{"bad task timeout", `{"name": "a", "tasks": [{"id": "x", "timeouts": {"cancel": "soon"}}]}`, protocol.CodeInvalidField, "tasks[0].timeouts.cancel", "not a duration"},
		{"bad task attempts", `{"name": "a", "tasks": [{"id": "x"}, {"id": "y", "retry": {"max_attempts": -1}}]}`, protocol.CodeInvalidField, "tasks[1].retry.max_attempts", ""},
		{"overlap", `{"name": "a", "overlap": "queue"}`, protocol.CodeInvalidField, "overlap", "cancel_previous"},

		// Tasks and the graph.
		{"tasks not an array", `{"name": "a", "tasks": {"id": "x"}}`, protocol.CodeInvalidField, "tasks", "array"},
		{"too many tasks", `{"name": "a", "tasks": [` + strings.Join(tooManyTasks, ",") + `]}`, protocol.CodeInvalidField, "tasks", "limit of 48"},
		{"task without id", `{"name": "a", "tasks": [{"depends_on": []}]}`, protocol.CodeInvalidField, "tasks[0].id", "required"},
		{"bad task id", `{"name": "a", "tasks": [{"id": "Extract"}]}`, protocol.CodeInvalidField, "tasks[0].id", "lowercase"},
		{"task not an object", `{"name": "a", "tasks": ["extract"]}`, protocol.CodeInvalidField, "tasks[0]", "object"},
		{"duplicate task id", `{"name": "a", "tasks": [{"id": "x"}, {"id": "y"}, {"id": "x"}]}`, protocol.CodeInvalidField, "tasks[2].id", "earlier task"},
		{"unknown dependency", `{"name": "a", "tasks": [{"id": "x"}, {"id": "y", "depends_on": ["x", "z"]}]}`, protocol.CodeInvalidField, "tasks[1].depends_on", `"z"`},
		{"self dependency", `{"name": "a", "tasks": [{"id": "x", "depends_on": ["x"]}]}`, protocol.CodeInvalidField, "tasks[0].depends_on", "itself"},
		{"dependency twice", `{"name": "a", "tasks": [{"id": "x"}, {"id": "y", "depends_on": ["x", "x"]}]}`, protocol.CodeInvalidField, "tasks[1].depends_on", "twice"},
		{"dependency not a string", `{"name": "a", "tasks": [{"id": "x", "depends_on": [1]}]}`, protocol.CodeInvalidField, "tasks[0].depends_on[0]", "string"},
		{"unknown trigger rule", `{"name": "a", "tasks": [{"id": "x"}, {"id": "y", "trigger_rule": "all_good"}]}`, protocol.CodeInvalidField, "tasks[1].trigger_rule", "none_failed"},
		{"publish not a bool", `{"name": "a", "tasks": [{"id": "x", "publish": "yes"}]}`, protocol.CodeInvalidField, "tasks[0].publish", "true or false"},
		{"cycle", `{"name": "a", "tasks": [{"id": "solo"}, {"id": "b", "depends_on": ["d"]}, {"id": "c", "depends_on": ["b"]}, {"id": "d", "depends_on": ["c", "solo"]}]}`,
			protocol.CodeDependencyCycle, "tasks", "b -> c -> d -> b"},

		// Job dependencies.
		{"bad require", `{"name": "a", "depends_on_jobs": [{"job": "up", "require": "done"}]}`, protocol.CodeInvalidField, "depends_on_jobs[0].require", `"published" or "succeeded"`},
		{"dependency job missing", `{"name": "a", "depends_on_jobs": [{"require": "published"}]}`, protocol.CodeInvalidField, "depends_on_jobs[0].job", "required"},
		{"bad dependency job", `{"name": "a", "depends_on_jobs": [{"job": "Up"}]}`, protocol.CodeInvalidField, "depends_on_jobs[0].job", ""},
		{"job depends on itself", `{"name": "a", "depends_on_jobs": [{"job": "a"}]}`, protocol.CodeInvalidField, "depends_on_jobs[0].job", "itself"},
		{"job dependency twice", `{"name": "a", "depends_on_jobs": [{"job": "up"}, {"job": "up", "require": "succeeded"}]}`, protocol.CodeInvalidField, "depends_on_jobs[1].job", "second time"},
		{"dependency timeout on a task", `{"name": "a", "tasks": [{"id": "t", "timeouts": {"dependency": "1h"}}]}`, protocol.CodeInvalidField, "tasks[0].timeouts.dependency", "whole run"},
		{"too many job dependencies", `{"name": "a", "depends_on_jobs": [` + strings.Join(tooManyDeps, ",") + `]}`, protocol.CodeInvalidField, "depends_on_jobs", "over the limit of 32"},
		{"job dependencies not an array", `{"name": "a", "depends_on_jobs": {"job": "up"}}`, protocol.CodeInvalidField, "depends_on_jobs", "array"},
		{"unknown dependency field", `{"name": "a", "depends_on_jobs": [{"job": "up", "when": "daily"}]}`, protocol.CodeInvalidField, "depends_on_jobs[0].when", ""},
	}
	status := map[protocol.Code]int{
		protocol.CodeInvalidJSON: http.StatusBadRequest, protocol.CodePayloadTooLarge: http.StatusRequestEntityTooLarge,
		protocol.CodeInvalidField: 422, protocol.CodeInvalidCron: 422, protocol.CodeInvalidTimezone: 422, protocol.CodeDependencyCycle: 422,
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			j, err := jobspec.Parse([]byte(c.body), opts)
			var e *jobspec.Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %+v, %v; want a *jobspec.Error", j.Name, err)
			}
			if e.Code != c.code || e.Field != c.field {
				t.Fatalf("got %s at %q (%s); want %s at %q", e.Code, e.Field, e.Message, c.code, c.field)
			}
			if e.HTTPStatus() != status[c.code] {
				t.Errorf("status %d, want %d", e.HTTPStatus(), status[c.code])
			}
			if !strings.Contains(e.Message, c.in) {
				t.Errorf("message %q does not contain %q", e.Message, c.in)
			}
			// One human sentence that names the field.
			if !strings.HasSuffix(e.Message, ".") || strings.Contains(e.Message, "\n") || !strings.HasPrefix(e.Message, e.Field) {
				t.Errorf("message %q is not one sentence starting with the field %q", e.Message, e.Field)
			}
			if !strings.Contains(e.Error(), string(e.Code)) {
				t.Errorf("Error() = %q lacks the code", e.Error())
			}
		})
	}
}

// TestParseAccepts covers edges that must pass.
func TestParseAccepts(t *testing.T) {
	cases := map[string]string{
		"payload of exactly 64 KiB":      `{"name": "a", "payload": ` + bigPayload(jobspec.MaxPayloadBytes) + `}`,
		"payload under 64 KiB compact":   `{"name": "a", "payload": [` + strings.Repeat(" ", jobspec.MaxPayloadBytes) + `1]}`,
		"60 KB of < & > in the payload":  `{"name": "a", "payload": "` + strings.Repeat("<&>", 20_000) + `"}`,
		"at exactly now":                 `{"name": "a", "schedule": {"at": "` + protocol.FormatTime(now) + `"}}`,
		"at with an offset":              `{"name": "a", "schedule": {"at": "2026-03-02T08:00:00+08:00"}}`,
		"rate of one minute":             `{"name": "a", "schedule": {"rate": "1m"}}`,
		"catchup all over a year":        `{"name": "a", "schedule": {"rate": "1m", "catchup": "all", "catchup_window": "8760h"}}`,
		"catchup none of an at":          `{"name": "a", "schedule": {"at": "2026-03-02T08:00:00Z", "catchup": "none"}}`,
		"zero evidence window":           `{"name": "a", "evidence_window": "0s"}`,
		"a deadline":                     `{"name": "a", "deadline": "90m"}`,
		"a retention of a day":           `{"name": "a", "retention": "24h"}`,
		"a retention of ten years":       `{"name": "a", "retention": "87600h"}`,
		"100 attempts, no jitter":        `{"name": "a", "retry": {"max_attempts": 100, "jitter": "none"}}`,
		"48 tasks":                       `{"name": "a", "tasks": [` + strings.Join(taskList(jobspec.MaxTasks), ",") + `]}`,
		"every trigger rule":             rulesBody(),
		"task in the other pool":         `{"name": "a", "tasks": [{"id": "x", "pool": "demo"}]}`,
		"cron descriptors and names":     `{"name": "a", "schedule": {"cron": "0 9 * JAN-MAR MON-FRI", "timezone": "Europe/Berlin"}}`,
		"Feb 29 fires within five years": `{"name": "a", "schedule": {"cron": "0 0 29 2 *"}}`,
		"depends_on_jobs with succeeded": `{"name": "a", "depends_on_jobs": [{"job": "b", "require": "succeeded"}, {"job": "c"}]}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			j, err := jobspec.Parse([]byte(body), opts)
			if err != nil {
				t.Fatal(err)
			}
			// Whatever was accepted reads back to the same canonical JSON.
			canonical := marshal(t, j)
			again, err := jobspec.Parse(canonical, opts)
			if err != nil {
				t.Fatalf("reparse %s: %v", canonical, err)
			}
			if b := marshal(t, again); !bytes.Equal(b, canonical) {
				t.Errorf("reparse writes\n%s\nnot\n%s", b, canonical)
			}
		})
	}
	j := mustParse(t, cases["at with an offset"])
	if want := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC); !j.Schedule.At.Equal(want) || j.Schedule.At.Location() != time.UTC {
		t.Errorf("at = %v, want %v in UTC", j.Schedule.At, want)
	}
	// Stored as written: no HTML escapes (\u003c is six bytes for one).
	j = mustParse(t, cases["60 KB of < & > in the payload"])
	if spec := marshal(t, j); !bytes.Contains(spec, []byte(`"<&><&>`)) || len(spec) > 61_000 {
		t.Errorf("a 60,002-byte payload of <&> is stored as %d bytes of definition", len(spec))
	}
	j = mustParse(t, cases["payload under 64 KiB compact"])
	if string(j.Payload) != "[1]" {
		t.Errorf("payload kept as %d bytes, want compact [1]", len(j.Payload))
	}
}

func taskList(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"id": "t%d"}`, i)
		if i > 0 {
			out[i] = fmt.Sprintf(`{"id": "t%d", "depends_on": ["t%d"]}`, i, i-1)
		}
	}
	return out
}

func rulesBody() string {
	tasks := []string{`{"id": "root"}`}
	for _, r := range statemodel.AllTriggerRules() {
		tasks = append(tasks, fmt.Sprintf(`{"id": %q, "depends_on": ["root"], "trigger_rule": %q}`, strings.ReplaceAll(string(r), "_", "-"), r))
	}
	return `{"name": "a", "tasks": [` + strings.Join(tasks, ",") + `]}`
}

func TestParseNeedsNow(t *testing.T) {
	_, err := jobspec.Parse([]byte(`{"name": "a"}`), jobspec.Options{Pools: []string{"default"}})
	var e *jobspec.Error
	if err == nil || errors.As(err, &e) {
		t.Fatalf("Parse without Now = %v; want a plain misuse error", err)
	}
	if _, err := jobspec.ParseUpdate("a", []byte(`{}`), jobspec.Options{}); err == nil {
		t.Fatal("ParseUpdate without Now succeeded")
	}
}

func TestNoPools(t *testing.T) {
	_, err := jobspec.Parse([]byte(`{"name": "a"}`), jobspec.Options{Now: now})
	var e *jobspec.Error
	if !errors.As(err, &e) || e.Field != "pool" || !strings.Contains(e.Message, "pools: none") {
		t.Fatalf("Parse with no pools = %v", err)
	}
}

// TestParseUpdate: PUT replaces the whole definition; its name may be left
// out and must otherwise equal the path's.
func TestParseUpdate(t *testing.T) {
	j, err := jobspec.ParseUpdate("nightly", []byte(`{"schedule": {"rate": "5m"}}`), opts)
	if err != nil {
		t.Fatal(err)
	}
	if j.Name != "nightly" || j.Schedule.Rate != 5*time.Minute {
		t.Errorf("job = %+v", j)
	}
	// Nothing of an earlier definition survives: the policy is the default.
	if !reflect.DeepEqual(j.Policy(), statemodel.DefaultPolicy()) {
		t.Errorf("policy = %+v", j.Policy())
	}
	if _, err := jobspec.ParseUpdate("nightly", []byte(`{"name": "nightly"}`), opts); err != nil {
		t.Errorf("same name: %v", err)
	}
	for _, c := range []struct{ path, body, in string }{
		{"nightly", `{"name": "weekly"}`, "cannot be renamed"},
		{"Bad Path", `{}`, "lowercase"},
	} {
		_, err := jobspec.ParseUpdate(c.path, []byte(c.body), opts)
		var e *jobspec.Error
		if !errors.As(err, &e) || e.Code != protocol.CodeInvalidField || e.Field != "name" || !strings.Contains(e.Message, c.in) {
			t.Errorf("ParseUpdate(%q, %s) = %v; want invalid_field name %q", c.path, c.body, err, c.in)
		}
	}
	// A POST still needs its name.
	if _, err := jobspec.Parse([]byte(`{"schedule": {"rate": "5m"}}`), opts); err == nil {
		t.Error("Parse accepted a body without a name")
	}
}

// TestLoad: a stored definition loads even when the world has moved on (its
// at passed, its pool was removed), but Load is no less strict about shape.
func TestLoad(t *testing.T) {
	created := mustParse(t, `{"name": "once", "schedule": {"at": "2026-03-01T13:00:00Z"}, "pool": "demo"}`)
	spec := marshal(t, created)
	if _, err := jobspec.Parse(spec, jobspec.Options{Pools: []string{"default"}, Now: now.Add(24 * time.Hour)}); err == nil {
		t.Fatal("Parse accepted a past at and a removed pool")
	}
	j, err := jobspec.Load(spec)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !bytes.Equal(marshal(t, j), spec) {
		t.Errorf("Load changed the definition: %s", marshal(t, j))
	}
	for _, bad := range []string{`{"name": "once", "extra": 1}`, `{"name": "once", "tasks": [{"id": "a", "depends_on": ["a"]}]}`, `{`} {
		if _, err := jobspec.Load([]byte(bad)); err == nil {
			t.Errorf("Load accepted %s", bad)
		}
	}
}

func TestHTTPStatus(t *testing.T) {
	for code, want := range map[protocol.Code]int{
		protocol.CodeInvalidJSON: 400, protocol.CodeInvalidField: 422, protocol.CodeInvalidCron: 422,
		protocol.CodeInvalidTimezone: 422, protocol.CodeDependencyCycle: 422, protocol.CodePayloadTooLarge: 413,
	} {
		if got := (&jobspec.Error{Code: code}).HTTPStatus(); got != want {
			t.Errorf("%s: %d, want %d", code, got, want)
		}
	}
}

// TestExampleIsTheDocumentedOne checks that testdata's example is the one
// docs/api.md shows, verbatim.
func TestExampleIsTheDocumentedOne(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), string(readFile(t, "nightly-report.json"))) {
		t.Fatal("docs/api.md does not show testdata/nightly-report.json verbatim; keep them the same")
	}
}
