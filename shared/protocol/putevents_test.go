package protocol_test

import (
	"errors"
	"testing"

	"github.com/runledger/runledger/shared/protocol"
)

// An entry's Time becomes its runs' logical time: it lies in the years
// 1970 to 9999, as every logical time does; one outside is refused
// naming the entry's field.
func TestPutEventsTimeInLogicalRange(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		time string
		ok   bool
	}{
		{"", true},
		{"1970-01-01T00:00:00Z", true},
		{"9999-12-31T23:59:59Z", true},
		{"2026-11-30T10:00:00+02:00", true},
		{"0001-01-01T00:00:00Z", false},
		{"1969-12-31T23:59:59Z", false},
		{"1970-01-01T00:30:00+01:00", false},
		{"yesterday", false},
	} {
		p := protocol.PutEvents{Entries: []protocol.PutEventsEntry{{Source: "shop", DetailType: "x", Detail: "{}", Time: c.time}}}
		err := p.Check()
		var fe *protocol.FieldError
		switch {
		case c.ok && err != nil:
			t.Errorf("Time %q refused: %v", c.time, err)
		case !c.ok && (!errors.As(err, &fe) || fe.Field != "Entries[0].Time"):
			t.Errorf("Time %q: %v, want a refusal of Entries[0].Time", c.time, err)
		}
	}
}
