package workers

import (
	"testing"

	"github.com/runledger/runledger/shared/protocol"
)

// A worker sees the event id it sent, whatever scope the scheduler recorded
// it under; the scheduler's own ids are shown as recorded.
func TestClientEventIDUndoesTheScope(t *testing.T) {
	t.Parallel()
	ref := protocol.AttemptRef{Run: "r", Task: "t", Attempt: 12}
	for _, route := range []string{routeClaim, routeHeartbeat, routeComplete} {
		for _, id := range []string{"done-1", "01JD8Z", "a.b_c-d"} {
			if got := ClientEventID(scopedEventID(ref, route, id)); got != id {
				t.Errorf("ClientEventID(%q) = %q, want %q", scopedEventID(ref, route, id), got, id)
			}
		}
	}
	for _, own := range []string{"dispatch:2", "deps:1", "lease:3:17", "created", "complete", "complete:x:id", "claim::id"} {
		if got := ClientEventID(own); got != own {
			t.Errorf("ClientEventID(%q) = %q, want it unchanged", own, got)
		}
	}
}
