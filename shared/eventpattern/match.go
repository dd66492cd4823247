package eventpattern

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// DecodeEvent reads an event's JSON as Match takes it: objects are
// map[string]any, numbers json.Number (so a template renders them as
// written).
func DecodeEvent(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var ev map[string]any
	if err := dec.Decode(&ev); err != nil {
		return nil, err
	}
	if ev == nil {
		return nil, errors.New("the event is not a JSON object")
	}
	return ev, nil
}

// Match reports whether event (as DecodeEvent returns it; float64 numbers
// are accepted too) matches the pattern.
func (p *Pattern) Match(event map[string]any) bool {
	return p.root.match(event)
}

func (o *object) match(ev map[string]any) bool {
	for i := range o.fields {
		f := &o.fields[i]
		v, present := ev[f.name]
		if f.child != nil {
			// An absent or non-object value is matched as an empty
			// object: only exists:false leaves below can hold.
			sub, _ := v.(map[string]any)
			if !f.child.match(sub) {
				return false
			}
			continue
		}
		if !leafMatch(f.any, v, present) {
			return false
		}
	}
	return true
}

// leafMatch: any matcher matches the value; an array value matches when
// any of its elements does.
func leafMatch(ms []matcher, v any, present bool) bool {
	for i := range ms {
		m := &ms[i]
		if m.kind == kExists {
			if m.exists(v, present) {
				return true
			}
			continue
		}
		if !present {
			continue
		}
		if arr, ok := v.([]any); ok {
			for _, e := range arr {
				if m.value(e) {
					return true
				}
			}
			continue
		}
		if m.value(v) {
			return true
		}
	}
	return false
}

// exists holds for a present leaf (not an object) when want is true, and
// for an absent field when want is false.
func (m *matcher) exists(v any, present bool) bool {
	if !m.flag {
		return !present
	}
	if !present {
		return false
	}
	_, isObject := v.(map[string]any)
	return !isObject
}

func asNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case float64:
		return n, true
	case int:
		return float64(n), true
	}
	return 0, false
}

// value matches one leaf value (not an array).
func (m *matcher) value(v any) bool {
	if _, isObject := v.(map[string]any); isObject {
		return false
	}
	s, isString := v.(string)
	switch m.kind {
	case kEqualString:
		return isString && s == m.str
	case kEqualNumber:
		n, ok := asNumber(v)
		return ok && n == m.num
	case kEqualBool:
		b, ok := v.(bool)
		return ok && b == m.flag
	case kEqualNull:
		return v == nil
	case kPrefix:
		return isString && strings.HasPrefix(s, m.str)
	case kSuffix:
		return isString && strings.HasSuffix(s, m.str)
	case kEqualsIgnoreCase:
		return isString && strings.EqualFold(s, m.str)
	case kPrefixIgnoreCase:
		return isString && len(s) >= len(m.str) && strings.EqualFold(s[:len(m.str)], m.str)
	case kSuffixIgnoreCase:
		return isString && len(s) >= len(m.str) && strings.EqualFold(s[len(s)-len(m.str):], m.str)
	case kAnythingBut:
		return m.anythingBut(v, s, isString)
	case kAnythingButPrefix:
		return isString && !strings.HasPrefix(s, m.str)
	case kAnythingButSuffix:
		return isString && !strings.HasSuffix(s, m.str)
	case kAnythingButIgnoreCase:
		if !isString {
			return false
		}
		for _, x := range m.strs {
			if strings.EqualFold(s, x) {
				return false
			}
		}
		return true
	case kNumeric:
		n, ok := asNumber(v)
		return ok && m.bounds.holds(n)
	}
	return false
}

// anythingBut: a string list excludes those strings, a number list those
// numbers; any other value matches.
func (m *matcher) anythingBut(v any, s string, isString bool) bool {
	if isString {
		for _, x := range m.strs {
			if s == x {
				return false
			}
		}
		return true
	}
	if n, ok := asNumber(v); ok {
		for _, x := range m.nums {
			if n == x {
				return false
			}
		}
	}
	return true
}

func (r numericRange) holds(n float64) bool {
	if r.hasLow && (n < r.low || (n == r.low && !r.lowIncl)) {
		return false
	}
	if r.hasHigh && (n > r.high || (n == r.high && !r.highIncl)) {
		return false
	}
	return true
}
