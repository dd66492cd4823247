package protocol_test

import (
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
)

// Lambda's on-failure record (testdata holds one in its documented shape)
// is recognised on the events queue by its requestContext, and what the
// local stack writes reads back the same.
func TestInvocationFailureRecord(t *testing.T) {
	t.Parallel()
	ev, err := protocol.DecodeEvent(mustRead(t, "invocation_failure.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := ev.InvocationFailure
	if f == nil || ev.Completion != nil {
		t.Fatalf("decoded %+v, want an invocation failure", ev)
	}
	if f.RequestID != "c0ffee00-1234-4abc-9def-000000000001" || f.Condition != protocol.ConditionRetriesExhausted ||
		f.ApproximateInvokeCount != 3 || f.FunctionError != "Unhandled" || !strings.Contains(f.ErrorMessage, "timed out") ||
		f.Ref() != (protocol.AttemptRef{Run: "r1", Task: "main", Attempt: 2}) || f.Envelope.Token != "tok" ||
		!f.Timestamp.Equal(time.Date(2030, 1, 2, 3, 4, 5, 678_000_000, time.UTC)) {
		t.Fatalf("record %+v", f)
	}
	b, err := wire.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	again, err := protocol.DecodeEvent(string(b))
	if err != nil || again.InvocationFailure == nil || again.InvocationFailure.RequestID != f.RequestID ||
		again.InvocationFailure.Envelope.Attempt != 2 || again.InvocationFailure.ErrorType != f.ErrorType {
		t.Fatalf("written %s read back %+v, %v", b, again.InvocationFailure, err)
	}
	for _, bad := range []string{
		`{"requestContext": {}, "requestPayload": {"run": "r", "task": "t", "attempt": 1, "token": "k"}}`,
		`{"requestContext": {"requestId": "x"}, "requestPayload": {"run": "r", "task": "t", "attempt": 1}}`,
		`{"requestContext": {"requestId": "x"}, "requestPayload": {"run": "r", "task": "t", "attempt": 0, "token": "k"}}`,
	} {
		if _, err := protocol.DecodeEvent(bad); err == nil {
			t.Errorf("DecodeEvent(%s) accepted it", bad)
		}
	}
}
