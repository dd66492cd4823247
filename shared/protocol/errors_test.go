package protocol_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// TestEveryCodeKeepsItsStatus pins the status of every code, now derived
// from its class and the table's special cases.
func TestEveryCodeKeepsItsStatus(t *testing.T) {
	want := map[protocol.Code]int{
		protocol.CodeInvalidJSON: 400, protocol.CodeUnauthorized: 401, protocol.CodeInvalidToken: 401,
		protocol.CodeNotFound: 404, protocol.CodeConflict: 409, protocol.CodeIllegalTransition: 409,
		protocol.CodeAlreadyClaimed: 409, protocol.CodeStaleAttempt: 409, protocol.CodeVersionConflict: 412,
		protocol.CodePayloadTooLarge: 413, protocol.CodeMisdirectedRequest: 421, protocol.CodeInvalidField: 422,
		protocol.CodeInvalidCron: 422, protocol.CodeInvalidTimezone: 422, protocol.CodeDependencyCycle: 422,
		protocol.CodeLimitQueueFull: 429, protocol.CodeInternal: 500, protocol.CodeUnavailable: 503,
	}
	if len(want) != len(protocol.Codes()) {
		t.Fatalf("%d codes pinned, protocol.Codes has %d", len(want), len(protocol.Codes()))
	}
	for _, c := range protocol.Codes() {
		if c.Status() != want[c] {
			t.Errorf("%s: %d, want %d", c, c.Status(), want[c])
		}
	}
	if got := protocol.Code("no_such_code").Status(); got != 500 {
		t.Errorf("an unknown code: %d, want 500", got)
	}
}

func TestAnswerReadsTheClassAndCodeThroughWrapping(t *testing.T) {
	for _, c := range []struct {
		err   error
		class fault.Class
		code  protocol.Code
	}{
		{fmt.Errorf("claim: %w", protocol.ErrStaleAttempt), fault.Conflict, protocol.CodeStaleAttempt},
		{fmt.Errorf("claim: %w", protocol.ErrInvalidAttemptToken), fault.Forbidden, protocol.CodeInvalidToken},
		{&statemodel.TransitionError{Err: statemodel.ErrIllegalTransition}, fault.Conflict, protocol.CodeIllegalTransition},
	} {
		a, ok := protocol.Answer(c.err)
		if !ok || a.Class() != c.class || protocol.Code(a.Code()) != c.code {
			t.Errorf("%v: %v %v, want %s %s", c.err, a, ok, c.class, c.code)
		}
	}
	if _, ok := protocol.Answer(errors.New("boom")); ok {
		t.Error("an unclassified error has an answer")
	}
}
