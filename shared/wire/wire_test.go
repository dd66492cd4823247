package wire_test

import (
	"encoding/json"
	"testing"

	"github.com/runledger/runledger/shared/wire"
)

type inner struct{ Raw json.RawMessage }

func (i inner) MarshalJSON() ([]byte, error) { return wire.Marshal(map[string]any{"raw": i.Raw}) }

func TestMarshalKeepsHTMLCharacters(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    any
		want string
	}{
		{map[string]string{"s": "<a & b>"}, `{"s":"<a & b>"}`},
		{json.RawMessage(`{"p": "<<<"}`), `{"p":"<<<"}`},
		{inner{Raw: json.RawMessage(`"x<y"`)}, `{"raw":"x<y"}`},
		{[]inner{{Raw: json.RawMessage(`"&"`)}}, `[{"raw":"&"}]`},
	} {
		got, err := wire.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("Marshal(%v) = %s, want %s", c.v, got, c.want)
		}
	}
	if _, err := wire.Marshal(func() {}); err == nil {
		t.Error("Marshal of a func succeeded")
	}
}
