package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

var timeType = reflect.TypeFor[time.Time]()

// marshalView writes one of this package's answer structs in the
// contract's shape. The SDKs read these structs with encoding/json as
// they are (a JSON null leaves a time.Time or a string at its zero value);
// the server writes them with marshalView, which encodes each field as
// encoding/json would, in declaration order, with omitempty and omitzero
// honoured, except that:
//   - a time.Time is written in TimeLayout, and a zero one as null;
//   - a field tagged null:"zero" is written as null when it holds its zero
//     value (the contract's null for an absent worker id, say).
//
// So one declaration of each answer serves both sides. HTML characters
// are not escaped (as wire.Marshal); embedded fields are not supported.
func marshalView(v any) ([]byte, error) {
	rv := reflect.ValueOf(v)
	rt := rv.Type()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as wire.Marshal
	// put encodes one value into b; Encode's newline goes.
	put := func(v any) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		b.Truncate(b.Len() - 1)
		return nil
	}
	b.WriteByte('{')
	for i := range rt.NumField() {
		f := rt.Field(i)
		if f.Anonymous {
			return nil, fmt.Errorf("marshal %s: embedded field %s", rt, f.Name)
		}
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		fv := rv.Field(i)
		if hasOption(opts, "omitzero") && fv.IsZero() || hasOption(opts, "omitempty") && isEmpty(fv) {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		if err := put(name); err != nil {
			return nil, err
		}
		b.WriteByte(':')
		if err := put(fieldValue(f, fv)); err != nil {
			return nil, fmt.Errorf("marshal %s.%s: %w", rt, f.Name, err)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// fieldValue is what stands for the field in the JSON: a time in
// TimeLayout, nil for null, or the field's own value.
func fieldValue(f reflect.StructField, fv reflect.Value) any {
	switch {
	case f.Type == timeType:
		return NullTime(fv.Interface().(time.Time))
	case f.Tag.Get("null") == "zero" && fv.IsZero():
		return nil
	}
	return fv.Interface()
}

func hasOption(opts, want string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// isEmpty is encoding/json's test for omitempty.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}
