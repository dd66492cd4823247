package ledgertest

import (
	"context"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel/limiter"
)

var slotHolderCases = []Case{
	{"limiter holds task instances (run/task, a map child's task[i]) as holders", testSlotHolders},
}

// A task limiter's holders are task instances, "<run>/<task>": their ids
// keep their '/', '[' and ']' through the waiting and admitted items.
func testSlotHolders(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "task:warehouse/db-1"
	first := limiter.Place{Priority: 3, CreatedAt: T0, RunID: "run-001/load"}
	child := limiter.Place{Priority: 2, CreatedAt: T0, RunID: "run-002/load[7]"}
	if e := enter(t, h, name, 1, first); !e.Admitted {
		t.Fatalf("the first holder waits: %+v", e)
	}
	if e := enter(t, h, name, 1, child); e.Admitted || e.Reason != limiter.ReasonConcurrency {
		t.Fatalf("the second holder: %+v", e)
	}
	ws, err := h.Store.ListWaiting(ctx, name, 10)
	if err != nil || len(ws) != 1 || ws[0].Place != child {
		t.Fatalf("waiting: %+v, %v", ws, err)
	}
	if at, err := ledger.FindInLimiter(ctx, h.Store, name, child); err != nil || at.Reason == "" {
		t.Fatalf("the waiting child is not found: %+v, %v", at, err)
	}
	if left, err := h.Turns.LeaveLimiter(ctx, h.Store, name, first.RunID); err != nil || !left {
		t.Fatalf("leave: %v, %v", left, err)
	}
	got, err := h.Turns.AdmitNext(ctx, h.Store, name, limiter.Rate{}, h.Clock.Now())
	if err != nil || len(got) != 1 || got[0].RunID != child.RunID {
		t.Fatalf("hand-off: %+v, %v", got, err)
	}
	adm, err := h.Store.ListAdmitted(ctx, name)
	if err != nil || len(adm) != 1 || adm[0].RunID != child.RunID {
		t.Fatalf("admitted: %+v, %v", adm, err)
	}
	exact(t, h, name)
}
