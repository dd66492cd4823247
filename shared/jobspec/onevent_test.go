package jobspec_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/eventpattern"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
)

const orderJob = `{"name": "fulfil", "pool": "demo", "on_event": [
  {"pattern": {"source": ["shop"], "detail-type": ["Order Placed"], "detail": {"total": [{"numeric": [">", 0]}]}},
   "params": {"order": "{{.Event.detail.order_id}}", "items": "{{json .Event.detail.items}}", "day": "{{.LogicalDate}}"}},
  {"pattern": {"source": [{"prefix": "shop."}]}}
]}`

func TestOnEventRoundTripAndRender(t *testing.T) {
	j := mustParse(t, orderJob)
	if len(j.OnEvent) != 2 || j.OnEvent[0].Compiled() == nil {
		t.Fatalf("on_event = %+v, want 2 compiled entries", j.OnEvent)
	}
	canon := marshal(t, j)
	back, err := jobspec.Load(canon)
	if err != nil {
		t.Fatalf("load %s: %v", canon, err)
	}
	if got := marshal(t, back); string(got) != string(canon) {
		t.Fatalf("canonical JSON changed on Load:\n%s\n%s", canon, got)
	}
	if !strings.Contains(string(canon), `"on_event":[{"pattern":{"source":["shop"]`) {
		t.Fatalf("canonical JSON lacks on_event: %s", canon)
	}
	ev, err := eventpattern.DecodeEvent([]byte(`{"id": "e-1", "source": "shop", "detail-type": "Order Placed",
		"detail": {"order_id": 12345678901, "total": 10.5, "items": ["a", "b"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !back.OnEvent[0].Compiled().Match(ev) {
		t.Fatal("the loaded pattern does not match the order event")
	}
	at := time.Date(2026, 3, 2, 23, 30, 0, 0, time.UTC)
	params, err := back.OnEvent[0].RenderParams(jobspec.NewEventTemplateData("fulfil", "r1", at, ev))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(params, &got); err != nil {
		t.Fatal(err)
	}
	if got["order"] != "12345678901" || got["items"] != `["a","b"]` || got["day"] != "2026-03-02" {
		t.Fatalf("params = %v", got)
	}
	delete(ev["detail"].(map[string]any), "order_id")
	if _, err := back.OnEvent[0].RenderParams(jobspec.NewEventTemplateData("fulfil", "r1", at, ev)); err == nil || !strings.Contains(err.Error(), "param order") {
		t.Fatalf("a missing key rendered: %v", err)
	}
}

func TestOnEventRefusals(t *testing.T) {
	entry := func(s string) string { return `{"name": "j", "pool": "demo", "on_event": [` + s + `]}` }
	many := strings.Repeat(`{"pattern": {"source": ["a"]}},`, jobspec.MaxOnEvent)
	for _, c := range []struct{ body, field, contains string }{
		{`{"name": "j", "pool": "demo", "on_event": {}}`, "on_event", "array"},
		{entry(many + `{"pattern": {"source": ["a"]}}`), "on_event", "more than 8"},
		{entry(`{"params": {}}`), "on_event[0].pattern", "required"},
		{entry(`{"pattern": {"source": ["a"]}, "when": 1}`), "on_event[0].when", "not a known field"},
		{entry(`{"pattern": {"source": "a"}}`), "on_event[0].pattern", "source"},
		{entry(`{"pattern": {"source": ["a"]}}, {"pattern": {"detail": {"x": [{"wildcard": "*"}]}}}`), "on_event[1].pattern", `"wildcard" is not a matcher`},
		{entry(`{"pattern": {"time": ["x"]}}`), "on_event[0].pattern", "time"},
		{entry(`{"pattern": []}`), "on_event[0].pattern", "non-empty JSON object"},
		{entry(`{"pattern": {"source": ["a"]}, "params": []}`), "on_event[0].params", "object"},
		{entry(`{"pattern": {"source": ["a"]}, "params": {"order": 1}}`), "on_event[0].params.order", "string"},
		{entry(`{"pattern": {"source": ["a"]}, "params": {"order": "{{.Event.detail"}}`), "on_event[0].params.order", "not a valid template"},
		{entry(`{"pattern": {"source": ["a"]}, "params": {"order": "{{nosuchfunc .Event}}"}}`), "on_event[0].params.order", "not a valid template"},
	} {
		_, err := jobspec.Parse([]byte(c.body), opts)
		var e *jobspec.Error
		if !errors.As(err, &e) {
			t.Errorf("Parse(%.90s) = %v, want a *jobspec.Error", c.body, err)
			continue
		}
		if e.Code != protocol.CodeInvalidField || e.Field != c.field || !strings.Contains(e.Message, c.contains) {
			t.Errorf("Parse(%.90s) = %s %q %q, want invalid_field %q containing %q", c.body, e.Code, e.Field, e.Message, c.field, c.contains)
		}
	}
}
