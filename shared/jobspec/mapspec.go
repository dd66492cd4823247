package jobspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/fieldtemplate"
)

// Map is a map task's fan-out: when the task's dependencies are met, Over
// is rendered to a JSON array and the task runs as one child per element
// (docs/api.md, "Fan-out over a list").
type Map struct {
	// Over is a text/template (missingkey=error) rendering a JSON array;
	// it sees .Job, .Run, .Params, .Trigger, .LogicalTime, .LogicalDate
	// and .Inputs, and a json function.
	Over string `json:"over"`
	// MaxParallel bounds the children in flight at once: 1..1000.
	MaxParallel int `json:"max_parallel"`
	// ToleratedFailures is how many children may end other than
	// SUCCEEDED with the map task still SUCCEEDED.
	ToleratedFailures int `json:"tolerated_failures"`
}

// Limits of a map task.
const (
	MaxMapParallel = 1000
	MaxMapItems    = 10000
	MaxMapBytes    = 256 << 10
)

var mapFields = []string{"over", "max_parallel", "tolerated_failures"}

// mapSpec decodes and checks a task's "map" field.
func (d *decoder) mapSpec(raw json.RawMessage, field string) *Map {
	m := d.object(raw, field, mapFields...)
	if d.err != nil {
		return nil
	}
	var out Map
	if v := get(m, "over"); v != nil {
		out.Over = d.str(v, field+".over")
	}
	if d.err == nil && out.Over == "" {
		d.fail(fieldError(field+".over", "is required"))
	}
	if d.err == nil {
		if err := fieldtemplate.Check("over", out.Over); err != nil {
			d.fail(fieldError(field+".over", "is not a template: %v", err))
		}
	}
	out.MaxParallel = 1
	if v := get(m, "max_parallel"); v != nil {
		out.MaxParallel = d.integer(v, field+".max_parallel")
	}
	if d.err == nil && (out.MaxParallel < 1 || out.MaxParallel > MaxMapParallel) {
		d.fail(fieldError(field+".max_parallel", "must be 1 to %d, not %d", MaxMapParallel, out.MaxParallel))
	}
	if v := get(m, "tolerated_failures"); v != nil {
		out.ToleratedFailures = d.integer(v, field+".tolerated_failures")
	}
	if d.err == nil && out.ToleratedFailures < 0 {
		d.fail(fieldError(field+".tolerated_failures", "must be 0 or more, not %d", out.ToleratedFailures))
	}
	if d.err != nil {
		return nil
	}
	return &out
}

// OverVars are what a map task's over template sees.
type OverVars struct {
	Job, Run, Trigger        string
	LogicalTime, LogicalDate string
	Params                   map[string]any
	Inputs                   map[string]any
}

// ErrInvalidMap: over did not render to a JSON array within the limits.
var ErrInvalidMap = fault.New(fault.Invalid, "invalid map")

// RenderOver renders a map's over within MaxMapBytes (fieldtemplate says
// how it is bounded) and splits the JSON array it gives into its elements
// (compacted). Its error wraps ErrInvalidMap when the template fails, or
// the result is not a JSON array or holds more than MaxMapItems elements.
func (m Map) RenderOver(v OverVars) ([]json.RawMessage, error) {
	out, err := fieldtemplate.Render("over", m.Over, v, MaxMapBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: over: %v", ErrInvalidMap, err)
	}
	var items []json.RawMessage
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&items); err != nil || items == nil || dec.More() {
		return nil, fmt.Errorf("%w: over does not render a JSON array", ErrInvalidMap)
	}
	if len(items) > MaxMapItems {
		return nil, fmt.Errorf("%w: over renders %d items, over the limit of %d", ErrInvalidMap, len(items), MaxMapItems)
	}
	for i, it := range items {
		var c bytes.Buffer
		if json.Compact(&c, it) == nil {
			items[i] = c.Bytes()
		}
	}
	return items, nil
}
