package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

var mapCases = []Case{
	{"MapChildrenAndCounts", mapChildrenAndCounts},
}

// mapChildrenAndCounts: a map item is created once with its elements;
// releasing children is conditioned on the release mark and on room
// under max_parallel; children are created once, outside the run's read
// (ReadRun reads the map's counts, not its children) and listed in index
// order, page by page; a child's end moves the counts in its own write,
// exactly once (a duplicate end moves nothing), and an operator's retry
// of an ended child moves them back.
func mapChildrenAndCounts(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("maps", "each"))
	run := v.Run.ID
	items := make([][]byte, 1203)
	for i := range items {
		items[i] = []byte(fmt.Sprint(i))
	}
	m := ledger.MapState{Run: run, Task: "each", Total: len(items), MaxParallel: 3, Tolerated: 0}
	if err := h.Store.CreateMap(ctx, m, items); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.CreateMap(ctx, m, items); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("a second CreateMap: %v, want ErrConflict", err)
	}
	chunk, err := h.Store.MapItems(ctx, run, "each", 2)
	if err != nil || len(chunk) != len(items)-2*ledger.MapItemsPerChunk || string(chunk[0]) != fmt.Sprint(2*ledger.MapItemsPerChunk) {
		t.Fatalf("chunk 2: %d items (%v)", len(chunk), err)
	}
	got, err := h.Store.ReleaseChildren(ctx, m, 2)
	if err != nil || got.Next != 2 || got.Running != 2 {
		t.Fatalf("release 2: %+v, %v", got, err)
	}
	if found, err := h.Store.ReleaseChildren(ctx, m, 1); !errors.Is(err, ledger.ErrVersionConflict) || found.Next != 2 {
		t.Fatalf("a release from a stale mark: %v (mark found %d), want ErrVersionConflict and the mark 2", err, found.Next)
	}
	if _, err := h.Store.ReleaseChildren(ctx, got, 2); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("a release past max_parallel: %v, want ErrInvalidInput", err)
	}
	now := h.Clock.Now()
	var children []ledger.Instance
	for i := range 2 {
		c, err := ledger.NewInstance(ledger.NewRun{ID: run, Job: "maps"}, ledger.NewTask{
			ID: ledger.ChildTask("each", i), Pool: "default", Policy: Policy(), Scheduled: true, Item: items[i]}, now)
		if err != nil {
			t.Fatal(err)
		}
		children = append(children, c)
	}
	for range 2 { // the second time changes nothing
		if err := h.Store.CreateChildren(ctx, children); err != nil {
			t.Fatal(err)
		}
	}
	key := func(i int) ledger.InstanceKey { return ledger.InstanceKey{Run: run, Task: ledger.ChildTask("each", i)} }
	h.Step(t, key(0), Dispatch(1), now)
	h.Step(t, key(0), Started(1, "w"), now)
	done := Ev(statemodel.EvFailed, 1)
	done.ErrorCategory, done.Retryable = "boom", new(bool)
	h.Step(t, key(0), done, now)
	if res, err := h.Store.Transition(ctx, key(0), done, now, Policy()); err != nil || res.Outcome != statemodel.Duplicate {
		t.Fatalf("the same end again: %s, %v", res.Outcome, err)
	}
	check := func(when string, want ledger.MapState) {
		t.Helper()
		got, err := h.Store.GetMap(ctx, run, "each")
		if err != nil || got != want {
			t.Fatalf("%s: map %+v (%v), want %+v", when, got, err, want)
		}
		view, err := h.Store.ReadRun(ctx, run)
		if err != nil || len(view.Tasks) != 1 || view.Maps["each"] != want {
			t.Fatalf("%s: ReadRun reads %d tasks and map %+v (%v)", when, len(view.Tasks), view.Maps["each"], err)
		}
	}
	want := ledger.MapState{Run: run, Task: "each", Total: len(items), Next: 2, Running: 1, Failed: 1, MaxParallel: 3}
	check("after child 0 failed", want)
	retry := Ev(statemodel.EvManualRetry, 0)
	retry.Operator, retry.Reason = "ana", "again"
	h.Step(t, key(0), retry, now)
	want.Running, want.Failed = 2, 0
	check("after child 0 was retried", want)

	inst, err := h.Store.GetInstance(ctx, key(1))
	if err != nil || string(inst.Item) != "1" {
		t.Fatalf("child 1: item %q (%v)", inst.Item, err)
	}
	page, next, err := h.Store.ListChildren(ctx, run, "each", 1, "")
	if err != nil || len(page) != 1 || page[0].Key != key(0) || next == "" {
		t.Fatalf("first page: %d children, next %q (%v)", len(page), next, err)
	}
	page, next, err = h.Store.ListChildren(ctx, run, "each", 1, next)
	if err != nil || len(page) != 1 || page[0].Key != key(1) {
		t.Fatalf("second page: %v (%v)", page, err)
	}
	if next != "" {
		if page, _, err = h.Store.ListChildren(ctx, run, "each", 1, next); err != nil || len(page) != 0 {
			t.Fatalf("third page: %d children (%v)", len(page), err)
		}
	}
	if _, _, err := h.Store.ListChildren(ctx, run, "each", 1, "bogus!"); !errors.Is(err, ledger.ErrInvalidPageToken) {
		t.Fatalf("a bad token: %v", err)
	}
	if _, _, err := h.Store.GetMapOutput(ctx, run, "each"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("output before the end: %v", err)
	}
	if err := h.Store.SetMapOutput(ctx, run, "each", []byte(`[1,null]`), false); err != nil {
		t.Fatal(err)
	}
	if out, truncated, err := h.Store.GetMapOutput(ctx, run, "each"); err != nil || string(out) != `[1,null]` || truncated {
		t.Fatalf("output: %s %v %v", out, truncated, err)
	}
}
