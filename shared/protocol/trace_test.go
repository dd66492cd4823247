package protocol_test

import (
	"testing"

	"github.com/runledger/runledger/shared/protocol"
)

func TestParseTraceParent(t *testing.T) {
	t.Parallel()
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"00-" + tid + "-" + sid + "-01", true},
		{" 00-" + tid + "-" + sid + "-00 ", true},
		{"01-" + tid + "-" + sid + "-01-future", true}, // a later version's first four fields
		{"00-" + tid + "-" + sid + "-01-extra", false},
		{"ff-" + tid + "-" + sid + "-01", false},
		{"00-00000000000000000000000000000000-" + sid + "-01", false},
		{"00-" + tid + "-0000000000000000-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-" + sid + "-01", false},
		{"", false},
		{"00-not-a-traceparent-01", false},
	} {
		gotT, gotS, ok := protocol.ParseTraceParent(tc.in)
		if ok != tc.ok || (ok && (gotT != tid || gotS != sid)) {
			t.Errorf("ParseTraceParent(%q) = %q, %q, %t; want ok %t", tc.in, gotT, gotS, ok, tc.ok)
		}
	}
}

// Every delivery of a claim names the same span: the ids are derived
// from the names, distinct per attempt and from the run's.
func TestSpanIDsAreDerived(t *testing.T) {
	t.Parallel()
	a1 := protocol.AttemptRef{Run: "r", Task: "t", Attempt: 1}
	a2 := protocol.AttemptRef{Run: "r", Task: "t", Attempt: 2}
	if protocol.AttemptSpanID(a1) != protocol.AttemptSpanID(a1) {
		t.Fatal("the same attempt got two span ids")
	}
	ids := map[string]bool{protocol.RunSpanID("r"): true, protocol.AttemptSpanID(a1): true, protocol.AttemptSpanID(a2): true}
	if len(ids) != 3 {
		t.Fatalf("run and attempt span ids collide: %v", ids)
	}
	tp := protocol.AttemptTraceParent(protocol.NewTraceID(), a1)
	if _, sid, ok := protocol.ParseTraceParent(tp); !ok || sid != protocol.AttemptSpanID(a1) {
		t.Fatalf("AttemptTraceParent %q does not parse back to its span", tp)
	}
	if protocol.AttemptTraceParent("", a1) != "" {
		t.Fatal("a run without a trace id got a traceparent")
	}
}
