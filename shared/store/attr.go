package store

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

// item is one DynamoDB item. A nil value means "absent": puts leave it out
// and updates REMOVE it, so a zero field never lingers in an index.
type item map[string]types.AttributeValue

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// optStr is absent for the empty string.
func optStr(s string) types.AttributeValue {
	if s == "" {
		return nil
	}
	return str(s)
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func boolean(b bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: b} }

// optNum is absent for zero.
func optNum(n int64) types.AttributeValue {
	if n == 0 {
		return nil
	}
	return num(n)
}

// optBool is absent for false.
func optBool(b bool) types.AttributeValue {
	if !b {
		return nil
	}
	return boolean(true)
}

func bin(b []byte) types.AttributeValue {
	if len(b) == 0 {
		return nil
	}
	return &types.AttributeValueMemberB{Value: slices.Clone(b)}
}

// tm is a fixed-width time string, absent for the zero time.
func tm(t time.Time) types.AttributeValue {
	if t.IsZero() {
		return nil
	}
	return str(ledger.FormatTime(t))
}

// epoch is the TTL attribute's value: seconds since the epoch.
func epoch(t time.Time) types.AttributeValue { return num(t.Unix()) }

func strList(ss []string) types.AttributeValue {
	if len(ss) == 0 {
		return nil
	}
	l := make([]types.AttributeValue, len(ss))
	for i, s := range ss {
		l[i] = str(s)
	}
	return &types.AttributeValueMemberL{Value: l}
}

func strMap(m map[string]string) types.AttributeValue {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(m))
	for k, v := range m {
		out[k] = str(v)
	}
	return &types.AttributeValueMemberM{Value: out}
}

// present returns the item without its absent attributes, as a put sends it.
func (it item) present() map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(it))
	for k, v := range it {
		if v != nil {
			out[k] = v
		}
	}
	return out
}

// reader decodes an item and remembers the first problem, so decoders read
// like a list of fields and check one error at the end.
type reader struct {
	it  map[string]types.AttributeValue
	err error
}

func (r *reader) fail(name, want string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: attribute %s is not %s", ledger.ErrCorruptItem, name, want)
	}
}

// member returns attribute name as the member type T. An absent attribute
// is the zero T and false; one of another type is recorded as the reader's
// problem.
func member[T types.AttributeValue](r *reader, name, want string) (T, bool) {
	var zero T
	v, ok := r.it[name]
	if !ok {
		return zero, false
	}
	m, ok := v.(T)
	if !ok {
		r.fail(name, want)
		return zero, false
	}
	return m, true
}

func (r *reader) str(name string) string {
	if s, ok := member[*types.AttributeValueMemberS](r, name, "a string"); ok {
		return s.Value
	}
	return ""
}

func (r *reader) int(name string) int64 {
	n, ok := member[*types.AttributeValueMemberN](r, name, "a number")
	if !ok {
		return 0
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		r.fail(name, "an integer")
	}
	return i
}

// durations reads durationList's encoding (absent: none).
func (r *reader) durations(name string) []time.Duration {
	l, ok := member[*types.AttributeValueMemberL](r, name, "a list")
	if !ok {
		return nil
	}
	out, ok := elems(r, name, "a list of numbers", l.Value, func(n *types.AttributeValueMemberN) string { return n.Value })
	if !ok {
		return nil
	}
	ds := make([]time.Duration, len(out))
	for i, s := range out {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			r.fail(name, "a list of integers")
			return nil
		}
		ds[i] = time.Duration(v)
	}
	return ds
}

func (r *reader) optInt(name string) *int {
	if _, ok := r.it[name]; !ok {
		return nil
	}
	i := int(r.int(name))
	return &i
}

func (r *reader) bool(name string) bool {
	b, ok := member[*types.AttributeValueMemberBOOL](r, name, "a boolean")
	return ok && b.Value
}

func (r *reader) bytes(name string) []byte {
	if b, ok := member[*types.AttributeValueMemberB](r, name, "binary"); ok {
		return b.Value
	}
	return nil
}

func (r *reader) time(name string) time.Time {
	s := r.str(name)
	if s == "" {
		return time.Time{}
	}
	t, err := parseTime(s)
	if err != nil {
		r.fail(name, "a time")
	}
	return t
}

// elems converts every element of a list or map value to T with conv, or
// records the problem and returns false.
func elems[E types.AttributeValue, T any](r *reader, name, want string, vs []types.AttributeValue, conv func(E) T) ([]T, bool) {
	out := make([]T, 0, len(vs))
	for _, v := range vs {
		e, ok := v.(E)
		if !ok {
			r.fail(name, want)
			return nil, false
		}
		out = append(out, conv(e))
	}
	return out, true
}

func (r *reader) strList(name string) []string {
	l, ok := member[*types.AttributeValueMemberL](r, name, "a list")
	if !ok {
		return nil
	}
	out, _ := elems(r, name, "a list of strings", l.Value, func(s *types.AttributeValueMemberS) string { return s.Value })
	return out
}

func (r *reader) strMap(name string) map[string]string {
	m, ok := member[*types.AttributeValueMemberM](r, name, "a map")
	if !ok {
		return nil
	}
	out := make(map[string]string, len(m.Value))
	for k, e := range m.Value {
		s, ok := e.(*types.AttributeValueMemberS)
		if !ok {
			r.fail(name, "a map of strings")
			return nil
		}
		out[k] = s.Value
	}
	return out
}

// maps reads a list of maps.
func (r *reader) maps(name string) []map[string]types.AttributeValue {
	l, ok := member[*types.AttributeValueMemberL](r, name, "a list")
	if !ok {
		return nil
	}
	out, _ := elems(r, name, "a list of maps", l.Value, func(m *types.AttributeValueMemberM) map[string]types.AttributeValue { return m.Value })
	return out
}

func (r *reader) sub(name string) map[string]types.AttributeValue {
	if m, ok := member[*types.AttributeValueMemberM](r, name, "a map"); ok {
		return m.Value
	}
	return nil
}

// expr collects the placeholders of one request's expressions. Attribute
// names are always aliased (#state, not state: several of ours are
// DynamoDB reserved words), and values are named for what they mean, so a
// condition reads as it is documented: "#state = :expected_state".
type expr struct {
	names  map[string]string
	values map[string]types.AttributeValue
}

func newExpr() *expr {
	return &expr{names: map[string]string{}, values: map[string]types.AttributeValue{}}
}

func (e *expr) n(attr string) string {
	ph := "#" + attr
	e.names[ph] = attr
	return ph
}

func (e *expr) v(name string, v types.AttributeValue) string {
	ph := ":" + name
	e.values[ph] = v
	return ph
}

func (e *expr) nameMap() map[string]string {
	if len(e.names) == 0 {
		return nil
	}
	return e.names
}

func (e *expr) valueMap() map[string]types.AttributeValue {
	if len(e.values) == 0 {
		return nil
	}
	return e.values
}

// update builds "SET ... REMOVE ..." from an item: present attributes are
// set, absent (nil) ones removed.
func (e *expr) update(it item, extraSet ...string) string {
	keys := make([]string, 0, len(it))
	for k := range it {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var set, remove []string
	set = append(set, extraSet...)
	for _, k := range keys {
		if it[k] == nil {
			remove = append(remove, e.n(k))
			continue
		}
		set = append(set, e.n(k)+" = "+e.v("set_"+k, it[k]))
	}
	var b strings.Builder
	if len(set) > 0 {
		b.WriteString("SET ")
		b.WriteString(strings.Join(set, ", "))
	}
	if len(remove) > 0 {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		b.WriteString("REMOVE ")
		b.WriteString(strings.Join(remove, ", "))
	}
	return b.String()
}

// prefixKey builds the key condition of a Query for the sort keys of
// partition pk that start with prefix, as a range: sk BETWEEN prefix AND
// the prefix with its last byte raised by one. DynamoDB answers it exactly
// as begins_with (no key of ours equals the raised prefix: every prefix
// ends in the separator, and every key goes on past it), but DynamoDB
// Local answers begins_with by scanning the whole partition and a range
// from its index: a job's dependency edges sit beside its run pointers,
// and begins_with made reading three edges cost as much as reading 100,000
// pointers.
func (e *expr) prefixKey(pk, prefix string) string {
	upper := []byte(prefix)
	upper[len(upper)-1]++
	return e.n(tableschema.PK) + " = " + e.v("pk", str(pk)) +
		" AND " + e.n(tableschema.SK) + " BETWEEN " + e.v("prefix", str(prefix)) + " AND " + e.v("prefix_end", str(string(upper)))
}
