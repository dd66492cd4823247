package protocol

import (
	"strings"
	"testing"
)

// marshalView refuses what it cannot write faithfully rather than write
// something else.
func TestMarshalViewFieldRules(t *testing.T) {
	t.Parallel()
	type inner struct{ A string }
	type outer struct {
		inner
		B string `json:"b"`
	}
	type withOptions struct {
		Skip   string `json:"-"`
		Dash   string `json:"-,"`
		Plain  string
		Empty  string `json:"empty,omitempty"`
		Zero   int    `json:"zero,omitzero"`
		hidden string
	}
	if b, err := marshalView(outer{B: "x"}); err == nil || !strings.Contains(err.Error(), "embedded") {
		t.Errorf("marshalView of an embedded field = %s, %v; want an error", b, err)
	}
	b, err := marshalView(withOptions{Skip: "s", Dash: "d", Plain: "<p>", hidden: "h"})
	if want := `{"-":"d","Plain":"<p>"}`; err != nil || string(b) != want {
		t.Errorf("marshalView = %s, %v; want %s", b, err, want)
	}
}
