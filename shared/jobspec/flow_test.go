package jobspec_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/fieldtemplate"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
)

func TestFlowFieldsRoundTrip(t *testing.T) {
	j := mustParse(t, `{"name": "orders", "priority": 2,
		"concurrency": {"limit": 2, "key": "{{.Params.customer}}"},
		"rate_limit": {"runs": 100, "per": "1m", "group": "warehouse"},
		"tasks": [{"id": "load", "concurrency": {"limit": 5, "group": "warehouse-db"}}]}`)
	if j.Priority != 2 || j.Concurrency.Limit != 2 || j.RateLimit.Per != time.Minute || j.TaskDefs[0].Concurrency.Group != "warehouse-db" {
		t.Fatalf("job = %+v", j)
	}
	if got := j.ConcurrencyLimiterName("c1"); got != "orders/c1" {
		t.Errorf("concurrency limiter = %q", got)
	}
	if got := j.RateLimiterName(""); got != "warehouse/" {
		t.Errorf("rate limiter = %q", got)
	}
	if j.BackfillPriority() != 3 {
		t.Errorf("backfill priority = %d", j.BackfillPriority())
	}
	back, err := jobspec.Load(marshal(t, j))
	if err != nil || string(marshal(t, back)) != string(marshal(t, j)) {
		t.Fatalf("Load of the canonical JSON: %v\n%s\n%s", err, marshal(t, back), marshal(t, j))
	}
	plain := mustParse(t, `{"name": "plain"}`)
	if plain.Priority != 3 || plain.Limited() || strings.Contains(string(marshal(t, plain)), "priority") {
		t.Errorf("default job: priority %d, limited %v, %s", plain.Priority, plain.Limited(), marshal(t, plain))
	}
	if last := mustParse(t, `{"name": "late", "priority": 5}`); last.BackfillPriority() != 5 {
		t.Errorf("backfill priority of a priority-5 job = %d", last.BackfillPriority())
	}
}

func TestFlowFieldErrors(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{`{"name": "a", "priority": 0}`, "priority"},
		{`{"name": "a", "priority": 6}`, "priority"},
		{`{"name": "a", "priority": "high"}`, "priority"},
		{`{"name": "a", "concurrency": {}}`, "concurrency.limit"},
		{`{"name": "a", "concurrency": {"limit": 0}}`, "concurrency.limit"},
		{`{"name": "a", "concurrency": {"limit": 10001}}`, "concurrency.limit"},
		{`{"name": "a", "concurrency": {"limit": 1, "key": "{{.Params.x"}}`, "concurrency.key"},
		{`{"name": "a", "concurrency": {"limit": 1, "group": "Bad Group"}}`, "concurrency.group"},
		{`{"name": "a", "concurrency": {"limit": 1, "size": 2}}`, "concurrency.size"},
		{`{"name": "a", "rate_limit": {"per": "1m"}}`, "rate_limit.runs"},
		{`{"name": "a", "rate_limit": {"runs": 1001, "per": "1m"}}`, "rate_limit.runs"},
		{`{"name": "a", "rate_limit": {"runs": 1}}`, "rate_limit.per"},
		{`{"name": "a", "rate_limit": {"runs": 1, "per": "500ms"}}`, "rate_limit.per"},
		{`{"name": "a", "rate_limit": {"runs": 1, "per": "25h"}}`, "rate_limit.per"},
		{`{"name": "a", "rate_limit": {"runs": 1, "per": "1m", "key": "{{"}}`, "rate_limit.key"},
		{`{"name": "a", "tasks": [{"id": "t", "concurrency": {"limit": 0}}]}`, "tasks[0].concurrency.limit"},
	} {
		_, err := jobspec.Parse([]byte(c.body), opts)
		var e *jobspec.Error
		if !errors.As(err, &e) || e.Code != protocol.CodeInvalidField || e.Field != c.field || e.HTTPStatus() != 422 {
			t.Errorf("%s: err = %v, want invalid_field naming %s", c.body, err, c.field)
		}
	}
}

func TestRenderKey(t *testing.T) {
	data := map[string]any{"Params": map[string]any{"customer": "c-7", "n": 3}}
	if k, err := jobspec.RenderKey(`{{.Params.customer}}-{{json .Params.n}}`, data); err != nil || k != "c-7-3" {
		t.Errorf("key = %q, %v", k, err)
	}
	if _, err := jobspec.RenderKey(`{{.Params.nope}}`, map[string]any{"Params": map[string]string{}}); err == nil {
		t.Error("a missing key rendered")
	}
	long := strings.Repeat("x", 257)
	if _, err := jobspec.RenderKey(long, nil); !errors.Is(err, fieldtemplate.ErrTooLarge) {
		t.Errorf("a 257-byte key: %v", err)
	}
}

func TestCheckGroupLimit(t *testing.T) {
	a := mustParse(t, `{"name": "a", "concurrency": {"limit": 5, "group": "warehouse"}}`)
	b := mustParse(t, `{"name": "b", "concurrency": {"limit": 6, "group": "warehouse"}}`)
	var e *jobspec.Error
	if err := jobspec.CheckGroupLimit(b, a); !errors.As(err, &e) || e.Field != "concurrency.limit" {
		t.Fatalf("err = %v", err)
	}
	c := mustParse(t, `{"name": "c", "concurrency": {"limit": 5, "group": "warehouse"}}`)
	if err := jobspec.CheckGroupLimit(c, a); err != nil {
		t.Fatalf("same limit refused: %v", err)
	}
}
