// Package eventpattern compiles and matches the event patterns of a job's
// on_event entries (docs/api.md, "Starting runs from trigger events"):
// EventBridge's pattern semantics for the subset runledger accepts. A
// pattern is a JSON object over the trigger event's source, detail-type,
// account, region, resources and detail (nested objects); each leaf is a
// non-empty list that matches when any of its values matches. A value is a string, number, boolean or
// null (equal), or one matcher object: prefix, suffix, equals-ignore-case,
// anything-but (a value, a list of strings or of numbers, or a prefix,
// suffix or equals-ignore-case), exists (true or false) or numeric
// ([op, n] or [op, n, op, n] with op one of =, <, <=, >, >=). Anything else
// is a *CompileError naming the place.
//
// It is pure logic: no I/O, no clock. A Pattern is compiled once and is
// safe for concurrent use; Index holds many and tests an event only against
// the few whose source and detail-type can match.
package eventpattern

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// TopFields are the event fields a pattern may name at its top level.
var TopFields = []string{"source", "detail-type", "account", "region", "resources", "detail"}

// MaxPatternBytes bounds a pattern's JSON.
const MaxPatternBytes = 4096

// CompileError is a pattern refused. Path is where in the pattern
// ("detail.state[0]"; empty: the pattern as a whole), Message one sentence.
type CompileError struct {
	Path    string
	Message string
}

func (e *CompileError) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// Pattern is a compiled event pattern.
type Pattern struct {
	root *object
}

// object is a pattern object: every field must match (AND).
type object struct {
	fields []field // sorted by name
}

// field is one named field: a nested object or a leaf list.
type field struct {
	name  string
	child *object   // a nested pattern object
	any   []matcher // a leaf: any of these
}

type kind uint8

const (
	kEqualString kind = iota
	kEqualNumber
	kEqualBool
	kEqualNull
	kPrefix
	kSuffix
	kEqualsIgnoreCase
	kPrefixIgnoreCase
	kSuffixIgnoreCase
	kAnythingBut // strs/nums: not one of them
	kAnythingButPrefix
	kAnythingButSuffix
	kAnythingButIgnoreCase
	kExists
	kNumeric
)

// matcher is one value of a leaf list.
type matcher struct {
	kind   kind
	str    string
	num    float64
	flag   bool // kEqualBool's value; kExists's want
	strs   []string
	nums   []float64
	bounds numericRange
}

type numericRange struct {
	hasLow, lowIncl, hasHigh, highIncl bool
	low, high                          float64
}

// Compile reads a pattern's JSON. A pattern that is not a non-empty
// object of the accepted fields and matchers is a *CompileError.
func Compile(raw []byte) (*Pattern, error) {
	if len(raw) > MaxPatternBytes {
		return nil, &CompileError{Message: fmt.Sprintf("the pattern is %d bytes of JSON, over the limit of %d", len(raw), MaxPatternBytes)}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &CompileError{Message: "the pattern is not valid JSON"}
	}
	if dec.More() {
		return nil, &CompileError{Message: "the pattern is followed by more JSON"}
	}
	top, ok := v.(map[string]any)
	if !ok || len(top) == 0 {
		return nil, &CompileError{Message: "the pattern must be a non-empty JSON object"}
	}
	for k := range top {
		if !contains(TopFields, k) {
			return nil, &CompileError{Path: k, Message: fmt.Sprintf("is not a field a pattern may name (one of %s)", strings.Join(TopFields, ", "))}
		}
	}
	root, err := compileObject(top, "")
	if err != nil {
		return nil, err
	}
	return &Pattern{root: root}, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func compileObject(m map[string]any, path string) (*object, error) {
	if len(m) == 0 {
		return nil, &CompileError{Path: path, Message: "must not be an empty object"}
	}
	o := &object{}
	for name, v := range m {
		p := join(path, name)
		f := field{name: name}
		switch v := v.(type) {
		case map[string]any:
			child, err := compileObject(v, p)
			if err != nil {
				return nil, err
			}
			f.child = child
		case []any:
			if len(v) == 0 {
				return nil, &CompileError{Path: p, Message: "must not be an empty list"}
			}
			for i, e := range v {
				m, err := compileValue(e, fmt.Sprintf("%s[%d]", p, i))
				if err != nil {
					return nil, err
				}
				f.any = append(f.any, m)
			}
		default:
			return nil, &CompileError{Path: p, Message: "must be a list of values or a nested object"}
		}
		o.fields = append(o.fields, f)
	}
	sort.Slice(o.fields, func(i, j int) bool { return o.fields[i].name < o.fields[j].name })
	return o, nil
}

func compileValue(v any, path string) (matcher, error) {
	switch v := v.(type) {
	case string:
		return matcher{kind: kEqualString, str: v}, nil
	case json.Number:
		n, err := number(v, path)
		return matcher{kind: kEqualNumber, num: n}, err
	case bool:
		return matcher{kind: kEqualBool, flag: v}, nil
	case nil:
		return matcher{kind: kEqualNull}, nil
	case map[string]any:
		return compileMatcher(v, path)
	}
	return matcher{}, &CompileError{Path: path, Message: "must be a string, number, boolean, null or a matcher object"}
}

func number(n json.Number, path string) (float64, error) {
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, &CompileError{Path: path, Message: fmt.Sprintf("%s is not a finite number", n.String())}
	}
	return f, nil
}

var matcherNames = "prefix, suffix, equals-ignore-case, anything-but, exists or numeric"

func compileMatcher(m map[string]any, path string) (matcher, error) {
	if len(m) != 1 {
		return matcher{}, &CompileError{Path: path, Message: "a matcher object must have exactly one of " + matcherNames}
	}
	for name, v := range m {
		p := path + "." + name
		switch name {
		case "prefix", "suffix":
			return compileAffix(name, v, p)
		case "equals-ignore-case":
			s, ok := v.(string)
			if !ok {
				return matcher{}, &CompileError{Path: p, Message: "must be a string"}
			}
			return matcher{kind: kEqualsIgnoreCase, str: strings.ToLower(s)}, nil
		case "anything-but":
			return compileAnythingBut(v, p)
		case "exists":
			b, ok := v.(bool)
			if !ok {
				return matcher{}, &CompileError{Path: p, Message: "must be true or false"}
			}
			return matcher{kind: kExists, flag: b}, nil
		case "numeric":
			r, err := compileNumeric(v, p)
			return matcher{kind: kNumeric, bounds: r}, err
		}
		return matcher{}, &CompileError{Path: path, Message: fmt.Sprintf("%q is not a matcher (one of %s)", name, matcherNames)}
	}
	panic("unreachable")
}

// compileAffix reads prefix or suffix: a string, or {"equals-ignore-case": string}.
func compileAffix(name string, v any, path string) (matcher, error) {
	plain, folded := kPrefix, kPrefixIgnoreCase
	if name == "suffix" {
		plain, folded = kSuffix, kSuffixIgnoreCase
	}
	switch v := v.(type) {
	case string:
		return matcher{kind: plain, str: v}, nil
	case map[string]any:
		if s, ok := v["equals-ignore-case"].(string); ok && len(v) == 1 {
			return matcher{kind: folded, str: strings.ToLower(s)}, nil
		}
	}
	return matcher{}, &CompileError{Path: path, Message: `must be a string or {"equals-ignore-case": string}`}
}

func compileAnythingBut(v any, path string) (matcher, error) {
	switch v := v.(type) {
	case string:
		return matcher{kind: kAnythingBut, strs: []string{v}}, nil
	case json.Number:
		n, err := number(v, path)
		return matcher{kind: kAnythingBut, nums: []float64{n}}, err
	case []any:
		return compileAnythingButList(v, path)
	case map[string]any:
		if len(v) == 1 {
			for name, inner := range v {
				p := path + "." + name
				switch name {
				case "prefix", "suffix":
					s, ok := inner.(string)
					if !ok {
						return matcher{}, &CompileError{Path: p, Message: "must be a string"}
					}
					if name == "prefix" {
						return matcher{kind: kAnythingButPrefix, str: s}, nil
					}
					return matcher{kind: kAnythingButSuffix, str: s}, nil
				case "equals-ignore-case":
					return compileAnythingButFolded(inner, p)
				}
			}
		}
	}
	return matcher{}, &CompileError{Path: path, Message: "must be a string, a number, a non-empty list of strings or of numbers, or one of prefix, suffix, equals-ignore-case"}
}

func compileAnythingButList(list []any, path string) (matcher, error) {
	if len(list) == 0 {
		return matcher{}, &CompileError{Path: path, Message: "must not be an empty list"}
	}
	m := matcher{kind: kAnythingBut}
	for i, e := range list {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch e := e.(type) {
		case string:
			m.strs = append(m.strs, e)
		case json.Number:
			n, err := number(e, p)
			if err != nil {
				return matcher{}, err
			}
			m.nums = append(m.nums, n)
		default:
			return matcher{}, &CompileError{Path: p, Message: "must be a string or a number"}
		}
	}
	if len(m.strs) > 0 && len(m.nums) > 0 {
		return matcher{}, &CompileError{Path: path, Message: "must list only strings or only numbers"}
	}
	return m, nil
}

func compileAnythingButFolded(v any, path string) (matcher, error) {
	m := matcher{kind: kAnythingButIgnoreCase}
	switch v := v.(type) {
	case string:
		m.strs = []string{strings.ToLower(v)}
		return m, nil
	case []any:
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return matcher{}, &CompileError{Path: fmt.Sprintf("%s[%d]", path, i), Message: "must be a string"}
			}
			m.strs = append(m.strs, strings.ToLower(s))
		}
		if len(m.strs) > 0 {
			return m, nil
		}
	}
	return matcher{}, &CompileError{Path: path, Message: "must be a string or a non-empty list of strings"}
}

// compileNumeric reads [op, n] or [op, n, op, n]: "=" alone, or at most
// one lower bound (>, >=) and one upper bound (<, <=).
func compileNumeric(v any, path string) (numericRange, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 || len(list)%2 != 0 || len(list) > 4 {
		return numericRange{}, &CompileError{Path: path, Message: `must be [op, number] or [op, number, op, number] with op one of "=", "<", "<=", ">", ">="`}
	}
	var r numericRange
	for i := 0; i < len(list); i += 2 {
		op, ok := list[i].(string)
		if !ok {
			return numericRange{}, &CompileError{Path: fmt.Sprintf("%s[%d]", path, i), Message: "must be an operator string"}
		}
		raw, ok := list[i+1].(json.Number)
		if !ok {
			return numericRange{}, &CompileError{Path: fmt.Sprintf("%s[%d]", path, i+1), Message: "must be a number"}
		}
		n, err := number(raw, fmt.Sprintf("%s[%d]", path, i+1))
		if err != nil {
			return numericRange{}, err
		}
		p := fmt.Sprintf("%s[%d]", path, i)
		switch op {
		case "=":
			if len(list) != 2 {
				return numericRange{}, &CompileError{Path: p, Message: `"=" must be the only operator`}
			}
			r = numericRange{hasLow: true, lowIncl: true, low: n, hasHigh: true, highIncl: true, high: n}
		case ">", ">=":
			if r.hasLow {
				return numericRange{}, &CompileError{Path: p, Message: "gives a second lower bound"}
			}
			r.hasLow, r.lowIncl, r.low = true, op == ">=", n
		case "<", "<=":
			if r.hasHigh {
				return numericRange{}, &CompileError{Path: p, Message: "gives a second upper bound"}
			}
			r.hasHigh, r.highIncl, r.high = true, op == "<=", n
		default:
			return numericRange{}, &CompileError{Path: p, Message: fmt.Sprintf(`%q is not one of "=", "<", "<=", ">", ">="`, op)}
		}
	}
	if r.hasLow && r.hasHigh && (r.low > r.high || (r.low == r.high && !(r.lowIncl && r.highIncl))) {
		return numericRange{}, &CompileError{Path: path, Message: "is an empty range"}
	}
	return r, nil
}

// ExactValues returns the values of a top-level leaf field (source,
// detail-type) when it is a list of exact strings only; ok is false when
// the pattern does not constrain the field that way (absent, or another
// matcher), so the field can be any value.
func (p *Pattern) ExactValues(name string) (values []string, ok bool) {
	values, prefixes, ok := p.keys(name)
	if !ok || len(prefixes) > 0 {
		return nil, false
	}
	return values, true
}

// keys returns the exact values and the (case-sensitive) prefixes of a
// top-level leaf field when its list holds only those; ok is false
// otherwise (absent, nested, or another matcher).
func (p *Pattern) keys(name string) (exact, prefixes []string, ok bool) {
	for _, f := range p.root.fields {
		if f.name != name {
			continue
		}
		if f.child != nil {
			return nil, nil, false
		}
		for _, m := range f.any {
			switch m.kind {
			case kEqualString:
				exact = append(exact, m.str)
			case kPrefix:
				prefixes = append(prefixes, m.str)
			default:
				return nil, nil, false
			}
		}
		return exact, prefixes, true
	}
	return nil, nil, false
}
