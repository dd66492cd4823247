package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

var mapCases = []Case{
	{"MapChildrenAndCounts", mapChildrenAndCounts},
	{"MapWideChildren", mapWideChildren},
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

// mapWideChildren: a map of more children than a store spreads them over
// (the DynamoDB store keeps 64 partitions of children) behaves as a small
// one: ends anywhere move the counts the map and the run read, each child
// reads alone with its attempts and history, a running child's lease
// timer is listed due as the child's, and pages of children come in index
// order, each child once.
func mapWideChildren(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("maps", "wide"))
	run := v.Run.ID
	const total = 150
	items := make([][]byte, total)
	for i := range items {
		items[i] = []byte(fmt.Sprint(i))
	}
	m := ledger.MapState{Run: run, Task: "wide", Total: total, MaxParallel: total}
	if err := h.Store.CreateMap(ctx, m, items); err != nil {
		t.Fatal(err)
	}
	var err error
	for _, k := range []int{100, 50} {
		if m, err = h.Store.ReleaseChildren(ctx, m, k); err != nil {
			t.Fatal(err)
		}
	}
	now := h.Clock.Now()
	children := make([]ledger.Instance, total)
	for i := range children {
		c, err := ledger.NewInstance(ledger.NewRun{ID: run, Job: "maps"}, ledger.NewTask{
			ID: ledger.ChildTask("wide", i), Pool: "default", Policy: Policy(), Scheduled: true, Item: items[i]}, now)
		if err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	if err := h.Store.CreateChildren(ctx, children); err != nil {
		t.Fatal(err)
	}
	key := func(i int) ledger.InstanceKey { return ledger.InstanceKey{Run: run, Task: ledger.ChildTask("wide", i)} }
	for _, i := range []int{0, 64, 65, 128, 149} {
		h.Step(t, key(i), Dispatch(1), now)
		h.Step(t, key(i), Started(1, "w"), now)
	}
	for _, i := range []int{0, 64, 128} {
		h.Step(t, key(i), Succeeded(1), now)
	}
	failed := Ev(statemodel.EvFailed, 1)
	failed.ErrorCategory, failed.Retryable = "boom", new(bool)
	h.Step(t, key(65), failed, now)

	want := ledger.MapState{Run: run, Task: "wide", Total: total, Next: total, Running: total - 4, Succeeded: 3, Failed: 1, MaxParallel: total}
	if got, err := h.Store.GetMap(ctx, run, "wide"); err != nil || got != want {
		t.Fatalf("map %+v (%v), want %+v", got, err, want)
	}
	if view, err := h.Store.ReadRun(ctx, run); err != nil || len(view.Tasks) != 1 || view.Maps["wide"] != want {
		t.Fatalf("ReadRun reads %d tasks and map %+v (%v), want %+v", len(view.Tasks), view.Maps["wide"], err, want)
	}
	if inst := h.MustInstance(t, key(128)); inst.Snapshot.State != statemodel.StateSucceeded || string(inst.Item) != "128" {
		t.Fatalf("child 128: %s, item %q", inst.Snapshot.State, inst.Item)
	}
	if a, err := h.Store.GetAttempt(ctx, key(64), 1); err != nil || a.N != 1 || a.WorkerID != "w" {
		t.Fatalf("child 64's attempt: %+v (%v)", a, err)
	}
	if hist := h.FullHistory(t, key(65)); len(hist) == 0 || hist[len(hist)-1].To != statemodel.StateFailed {
		t.Fatalf("child 65's history: %+v", hist)
	}
	due, _ := allDue(t, h, now.Add(24*time.Hour), 1000)
	leased := false
	for _, d := range due {
		leased = leased || (d.Run == run && d.Task == key(149).Task && d.Item == ledger.TimerOfInstance)
	}
	if !leased {
		t.Fatalf("child 149's lease is not among the %d due timers", len(due))
	}

	var listed []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > total {
			t.Fatal("the children's pages do not end")
		}
		page, next, err := h.Store.ListChildren(ctx, run, "wide", 40, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range page {
			listed = append(listed, c.Key.Task)
		}
		if next == "" {
			break
		}
		token = next
	}
	if len(listed) != total {
		t.Fatalf("listed %d children, want %d", len(listed), total)
	}
	for i, task := range listed {
		if task != key(i).Task {
			t.Fatalf("child %d listed as %s: not in index order", i, task)
		}
	}
}
