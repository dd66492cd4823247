package jobspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/eventpattern"
	"github.com/runledger/runledger/shared/fieldtemplate"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
)

// MaxOnEvent bounds a job's on_event entries.
const MaxOnEvent = 8

// MaxEventParams bounds the params of one on_event entry.
const MaxEventParams = 32

// EventTrigger is one entry of on_event: an event matching Pattern starts
// a run whose params are Params rendered over the event.
type EventTrigger struct {
	// Pattern is the pattern's compact JSON, as the definition gives it.
	Pattern json.RawMessage
	// Params maps each param name to its template.
	Params map[string]string

	compiled *eventpattern.Pattern
}

// Compiled is the compiled pattern (nil for a hand-built EventTrigger).
func (t EventTrigger) Compiled() *eventpattern.Pattern { return t.compiled }

// EventTemplateData is what an on_event params template sees: the names
// worker exec's templates offer for the run to be created, plus .Event,
// the event as EventBridge delivers it (.Event.id, .Event.source,
// .Event.detail.<field>).
type EventTemplateData struct {
	Job         string
	Run         string
	Params      map[string]any
	Trigger     string
	LogicalTime string
	LogicalDate string
	Event       map[string]any
}

// NewEventTemplateData is the data of a run of job, started by event at
// logical (the event's time).
func NewEventTemplateData(job, run string, logical time.Time, event map[string]any) EventTemplateData {
	return EventTemplateData{
		Job: job, Run: run, Params: map[string]any{}, Trigger: "event",
		LogicalTime: protocol.FormatTime(logical), LogicalDate: logical.UTC().Format(time.DateOnly), Event: event,
	}
}

// RenderParams renders the entry's params over data into the run's params
// (a JSON object of strings), all of them within MaxPayloadBytes
// (fieldtemplate says how they are bounded). A template that fails (a
// missing key, a bound) is an error naming the param.
func (t EventTrigger) RenderParams(data EventTemplateData) (json.RawMessage, error) {
	out := make(map[string]string, len(t.Params))
	names := make([]string, 0, len(t.Params))
	for name := range t.Params {
		names = append(names, name)
	}
	slices.Sort(names)
	b := fieldtemplate.NewBudget(MaxPayloadBytes)
	for _, name := range names {
		s, err := b.Render(name, t.Params[name], data, MaxPayloadBytes)
		if err != nil {
			return nil, fmt.Errorf("param %s: %w", name, err)
		}
		out[name] = s
	}
	raw, err := wire.Marshal(out)
	if err != nil {
		return nil, err
	}
	// JSON escapes can still take strings within the budget past it.
	if len(raw) > MaxPayloadBytes {
		return nil, fmt.Errorf("the rendered params are %d bytes of JSON, over the limit of %d (64 KiB)", len(raw), MaxPayloadBytes)
	}
	return raw, nil
}

type onEventJSON struct {
	Pattern json.RawMessage   `json:"pattern"`
	Params  map[string]string `json:"params,omitempty"`
}

func readOnEvent(d *decoder, top map[string]json.RawMessage, j *Job, _ parseMode) {
	raw := get(top, "on_event")
	if raw == nil {
		return
	}
	items := d.array(raw, "on_event")
	if d.err == nil && len(items) > MaxOnEvent {
		d.fail(fieldError("on_event", "has %d entries, more than %d", len(items), MaxOnEvent))
	}
	for i, item := range items {
		if d.err != nil {
			return
		}
		field := at("on_event", i)
		m := d.object(item, field, "pattern", "params")
		if d.err != nil {
			return
		}
		t := EventTrigger{}
		t.Pattern, t.compiled = d.eventPattern(get(m, "pattern"), join(field, "pattern"))
		t.Params = d.eventParams(get(m, "params"), join(field, "params"))
		j.OnEvent = append(j.OnEvent, t)
	}
}

func (d *decoder) eventPattern(raw json.RawMessage, field string) (json.RawMessage, *eventpattern.Pattern) {
	if d.err != nil {
		return nil, nil
	}
	if raw == nil {
		d.fail(fieldError(field, "is required"))
		return nil, nil
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		d.fail(fieldError(field, "is not valid JSON"))
		return nil, nil
	}
	p, err := eventpattern.Compile(compact.Bytes())
	if err != nil {
		d.fail(fieldError(field, "is not an accepted event pattern: %s", strings.TrimSuffix(err.Error(), ".")))
		return nil, nil
	}
	return compact.Bytes(), p
}

func (d *decoder) eventParams(raw json.RawMessage, field string) map[string]string {
	if d.err != nil || raw == nil {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		d.fail(fieldError(field, "must be an object of param name to template"))
		return nil
	}
	if len(m) > MaxEventParams {
		d.fail(fieldError(field, "has %d params, more than %d", len(m), MaxEventParams))
		return nil
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make(map[string]string, len(m))
	for _, name := range names {
		f := join(field, name)
		if name == "" || len(name) > 128 {
			d.fail(fieldError(field, "names a param %q: a name must be 1 to 128 characters", name))
			return nil
		}
		text := d.str(m[name], f)
		if d.err != nil {
			return nil
		}
		if len(text) > 4096 {
			d.fail(fieldError(f, "is %d bytes, over the limit of 4096", len(text)))
			return nil
		}
		if err := fieldtemplate.Check(name, text); err != nil {
			d.fail(fieldError(f, "is not a valid template: %s", err.Error()))
			return nil
		}
		out[name] = text
	}
	return out
}

func (t EventTrigger) wire() onEventJSON {
	return onEventJSON{Pattern: t.Pattern, Params: t.Params}
}
