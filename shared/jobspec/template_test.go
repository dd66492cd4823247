package jobspec_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
)

// probe counts how often a template asks it for its 16 bytes: how far an
// execution went before it was stopped.
type probe struct{ hits int }

func (p *probe) Hit() string {
	p.hits++
	return "0123456789abcdef"
}

// A template the scheduler renders (a limiter key, an on_event param, a
// map's over) is stopped as it runs: its range loops by a step budget,
// its output as it reaches the field's cap, a printf width before fmt
// pads, and {{define}}/{{template}} are refused.
func TestSchedulerTemplatesBounded(t *testing.T) {
	renderers := []struct {
		name string
		cap  int
		// at is where the template finds the probe.
		at     string
		render func(text string, p *probe) error
	}{
		{"key", 256, "$.Probe.Hit", func(text string, p *probe) error {
			_, err := jobspec.RenderKey(text, map[string]any{"Params": map[string]any{}, "Probe": p})
			return err
		}},
		{"on_event params", 64 << 10, "$.Event.probe.Hit", func(text string, p *probe) error {
			trigger := jobspec.EventTrigger{Params: map[string]string{"p": text}}
			_, err := trigger.RenderParams(jobspec.NewEventTemplateData("j", "r1", now, map[string]any{"probe": p}))
			return err
		}},
		{"map over", 256 << 10, "$.Params.probe.Hit", func(text string, p *probe) error {
			_, err := jobspec.Map{Over: text}.RenderOver(jobspec.OverVars{Params: map[string]any{"probe": p}})
			return err
		}},
	}
	for _, r := range renderers {
		t.Run(r.name, func(t *testing.T) {
			for _, c := range []struct{ text, want string }{
				{`{{range 200000}}{{end}}`, "100000"},
				{fmt.Sprintf(`{{printf "%%0%dd" 1}}`, r.cap+1), "printf"},
				{`{{define "x"}}[]{{end}}{{template "x"}}`, "one template"},
			} {
				if err := r.render(c.text, &probe{}); err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: err = %v, want one saying %q", c.text, err, c.want)
				}
			}
			// 90,000 hits of 16 bytes each would be 1.4 MB: the writer stops
			// the execution at the cap, not after it.
			p := &probe{}
			err := r.render(`{{range 90000}}{{`+r.at+`}}{{end}}`, p)
			if err == nil || p.hits > r.cap/16+1 {
				t.Errorf("a loop past %d bytes: err = %v after %d hits, want an error within %d", r.cap, err, p.hits, r.cap/16+1)
			}
		})
	}
}

// An on_event entry's params share its 64 KiB: the param that takes them
// past it is stopped as it renders.
func TestEventParamsShareTheirCap(t *testing.T) {
	p := &probe{}
	loop := `{{range 4000}}{{$.Event.probe.Hit}}{{end}}` // 64,000 bytes
	trigger := jobspec.EventTrigger{Params: map[string]string{"a": loop, "b": loop}}
	_, err := trigger.RenderParams(jobspec.NewEventTemplateData("j", "r1", now, map[string]any{"probe": p}))
	if max := jobspec.MaxPayloadBytes/16 + 1; err == nil || p.hits > max {
		t.Errorf("two params of 64,000 bytes: err = %v after %d hits, want an error within %d", err, p.hits, max)
	}
}

// A template that defines or calls a template is refused when the job is
// written, 422 naming its field, as the scheduler would refuse it when it
// renders.
func TestTemplateDefineRefusedOnWrite(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{`{"name": "a", "concurrency": {"limit": 1, "key": "{{define \"k\"}}x{{end}}"}}`, "concurrency.key"},
		{`{"name": "a", "rate_limit": {"runs": 1, "per": "1m", "key": "{{template \"key\"}}"}}`, "rate_limit.key"},
		{`{"name": "a", "tasks": [{"id": "t", "concurrency": {"limit": 1, "key": "{{define \"k\"}}{{end}}"}}]}`, "tasks[0].concurrency.key"},
		{`{"name": "a", "pool": "demo", "on_event": [{"pattern": {"source": ["s"]}, "params": {"order": "{{template \"order\"}}"}}]}`, "on_event[0].params.order"},
		{`{"name": "a", "tasks": [{"id": "each", "map": {"over": "{{define \"o\"}}[]{{end}}[]"}}]}`, "tasks[0].map.over"},
	} {
		_, err := jobspec.Parse([]byte(c.body), opts)
		var e *jobspec.Error
		if !errors.As(err, &e) || e.Code != protocol.CodeInvalidField || e.Field != c.field || !strings.Contains(e.Message, "one template") {
			t.Errorf("%s: err = %v, want invalid_field naming %s, saying a field is one template", c.body, err, c.field)
		}
	}
}
