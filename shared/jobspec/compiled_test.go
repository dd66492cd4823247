package jobspec_test

import (
	"testing"

	"github.com/runledger/runledger/shared/jobspec"
)

// A compiled job renders each of its limiter keys as RenderKey renders
// that key's text, run after run, and knows which tasks have a
// concurrency.
func TestCompiledRendersItsKeys(t *testing.T) {
	j := mustParse(t, `{"name": "orders",
		"concurrency": {"limit": 2, "key": "{{.Params.customer}}"},
		"rate_limit": {"runs": 100, "per": "1m", "key": "{{.Params.region}}-{{.Trigger}}"},
		"tasks": [{"id": "load", "concurrency": {"limit": 5, "key": "{{.Task}}/{{.Params.customer}}"}}, {"id": "report"}]}`)
	c := jobspec.Compile(j)
	for _, customer := range []string{"c1", "c2"} {
		data := map[string]any{"Params": map[string]any{"customer": customer, "region": "eu"}, "Trigger": "manual", "Task": "load"}
		for _, k := range []struct {
			name, text string
			render     func(any) (string, error)
		}{
			{"concurrency", j.Concurrency.Key, c.ConcurrencyKey},
			{"rate_limit", j.RateLimit.Key, c.RateKey},
			{"task load", j.TaskDefs[0].Concurrency.Key, func(d any) (string, error) { return c.TaskKey("load", d) }},
		} {
			want, werr := jobspec.RenderKey(k.text, data)
			got, err := k.render(data)
			if got != want || err != nil || werr != nil {
				t.Errorf("%s key for %s = %q, %v; RenderKey gives %q, %v", k.name, customer, got, err, want, werr)
			}
		}
	}
	if _, err := c.ConcurrencyKey(map[string]any{"Params": map[string]any{}}); err == nil {
		t.Error("a key over a missing param rendered")
	}
	if c.TaskConcurrency("load") == nil || c.TaskConcurrency("report") != nil || c.TaskConcurrency("nope") != nil {
		t.Errorf("task concurrencies: load %v, report %v, nope %v", c.TaskConcurrency("load"), c.TaskConcurrency("report"), c.TaskConcurrency("nope"))
	}
}

// A key that does not parse (a job not made by Parse or Load) renders
// RenderKey's error for its text, not a panic.
func TestCompiledKeyThatDoesNotParse(t *testing.T) {
	j := mustParse(t, `{"name": "orders", "concurrency": {"limit": 2}}`)
	j.Concurrency.Key = "{{.Params"
	_, want := jobspec.RenderKey(j.Concurrency.Key, nil)
	if _, err := jobspec.Compile(j).ConcurrencyKey(nil); err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("err = %v, want %v", err, want)
	}
}
