package api

import (
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// A task's answer lists every attempt: those older than the instance holds
// from their attempt items, the rest from the instance, in order, each
// with its late events and how many were dropped.
func TestRenderTaskListsEvictedAttempts(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const total = statemodel.MaxInlineAttempts + 5
	rec := func(n int) statemodel.AttemptRecord {
		return statemodel.AttemptRecord{N: n, QueuedAt: t0, StartedAt: t0, EndedAt: t0, Outcome: statemodel.OutcomeFailed, ErrorCategory: "boom"}
	}
	var tv ledger.TaskView
	for n := 1; n <= total; n++ {
		a := ledger.Attempt{AttemptRecord: rec(n)}
		if n == 1 {
			a.Late = []statemodel.LateEvent{{Attempt: 1, EventID: "late", Type: statemodel.EvSucceeded, Actor: statemodel.ActorWorker}}
			a.LateDropped = 3
		}
		tv.Attempts = append(tv.Attempts, a)
	}
	snap := statemodel.Snapshot{State: statemodel.StateFailed, Attempt: total}
	for n := total - statemodel.MaxInlineAttempts + 1; n <= total; n++ {
		snap.Attempts = append(snap.Attempts, rec(n))
	}
	tv.Instance = ledger.Instance{Key: ledger.InstanceKey{Run: "r", Task: "main"}, Snapshot: snap}
	v := renderTask(tv)
	if len(v.Attempts) != total {
		t.Fatalf("%d attempts rendered, want %d", len(v.Attempts), total)
	}
	for i, a := range v.Attempts {
		if a.N != i+1 || a.State != "FAILED" {
			t.Fatalf("attempt %d rendered as n %d, %s", i+1, a.N, a.State)
		}
	}
	if a := v.Attempts[0]; len(a.LateEvents) != 1 || a.LateEventsDropped != 3 {
		t.Fatalf("attempt 1: %d late events, %d dropped; want 1 and 3", len(a.LateEvents), a.LateEventsDropped)
	}
}
