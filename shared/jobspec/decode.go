package jobspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/runledger/runledger/shared/protocol"
)

// decoder reads a definition strictly: every object's keys are checked
// against the fields it may have, and every value's JSON type is checked, so
// a misspelt or misplaced field is refused rather than silently ignored. It
// keeps the first error; the helpers return zero values once it is set, and
// the caller stops at the end of each section.
type decoder struct {
	err *Error
}

func (d *decoder) fail(e *Error) {
	if d.err == nil {
		d.err = e
	}
}

// readOnlyFields are the fields a job's JSON view adds (JobView): a
// definition that carries them is refused with a message saying why, since
// a client that sends back what it read would otherwise meet a bare
// "unknown field".
var readOnlyFields = []string{"id", "version", "paused", "created_at", "updated_at", "next_fire_time", "missed_slots"}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func at(parent string, i int) string { return fmt.Sprintf("%s[%d]", parent, i) }

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// get returns the value of key, or nil when the key is absent or null: null
// means "not set" everywhere in a definition.
func get(m map[string]json.RawMessage, key string) json.RawMessage {
	raw, ok := m[key]
	if !ok || isNull(raw) {
		return nil
	}
	return raw
}

// object decodes raw as an object whose keys must be among keys. Unknown keys
// are reported in sorted order, so the same body always gives the same error.
func (d *decoder) object(raw json.RawMessage, field string, keys ...string) map[string]json.RawMessage {
	if d.err != nil {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		d.fail(fieldError(field, "must be an object"))
		return nil
	}
	var unknown []string
	for k := range m {
		if !slices.Contains(keys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		k := unknown[0]
		if field == "" && slices.Contains(readOnlyFields, k) {
			d.fail(fieldError(k, "is set by the server and cannot be sent in a definition"))
		} else {
			d.fail(fieldError(join(field, k), "is not a known field"))
		}
		return nil
	}
	return m
}

func (d *decoder) str(raw json.RawMessage, field string) string {
	var s string
	if d.err == nil && json.Unmarshal(raw, &s) != nil {
		d.fail(fieldError(field, "must be a string"))
	}
	return s
}

func (d *decoder) integer(raw json.RawMessage, field string) int {
	var n int
	if d.err == nil && json.Unmarshal(raw, &n) != nil {
		d.fail(fieldError(field, "must be an integer"))
	}
	return n
}

func (d *decoder) number(raw json.RawMessage, field string) float64 {
	var f float64
	if d.err == nil && json.Unmarshal(raw, &f) != nil {
		d.fail(fieldError(field, "must be a number"))
	}
	return f
}

func (d *decoder) boolean(raw json.RawMessage, field string) bool {
	var b bool
	if d.err == nil && json.Unmarshal(raw, &b) != nil {
		d.fail(fieldError(field, "must be true or false"))
	}
	return b
}

func (d *decoder) array(raw json.RawMessage, field string) []json.RawMessage {
	var a []json.RawMessage
	if d.err == nil && json.Unmarshal(raw, &a) != nil {
		d.fail(fieldError(field, "must be an array"))
	}
	return a
}

// duration reads a Go duration string ("90s", "10m", "1h30m").
func (d *decoder) duration(raw json.RawMessage, field string) time.Duration {
	s := d.str(raw, field)
	if d.err != nil {
		return 0
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.fail(fieldError(field, "%q is not a duration such as \"90s\" or \"10m\"", s))
	}
	return v
}

// positive reads a duration that must be above zero.
func (d *decoder) positive(raw json.RawMessage, field string) time.Duration {
	v := d.duration(raw, field)
	if d.err == nil && v <= 0 {
		d.fail(fieldError(field, "must be positive, not %s", FormatDuration(v)))
	}
	return v
}

// payload reads a payload: any JSON value, returned compact, at most
// MaxPayloadBytes once compact. Null is no payload.
func (d *decoder) payload(raw json.RawMessage, field string) json.RawMessage {
	if d.err != nil || raw == nil {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		// The whole body was checked as JSON before decoding started.
		d.fail(fieldError(field, "is not valid JSON"))
		return nil
	}
	if buf.Len() > MaxPayloadBytes {
		d.fail(&Error{Code: protocol.CodePayloadTooLarge, Field: field, Message: sentence(field,
			"is %d bytes of compact JSON, over the limit of %d (64 KiB)", buf.Len(), MaxPayloadBytes)})
		return nil
	}
	return json.RawMessage(buf.Bytes())
}
