package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// TestMapStoredInTheRunPartitionRunsOn: a map written as the store wrote
// maps before their children had partitions of their own (children and
// count shards under RUN#<run>, no child_parts on the map item) is read,
// run on and ended by today's store in a fresh process: its children end
// and count, further released children join the others in the run's
// partition (the listing, which reads only that layout's partition, finds
// them), and the pages come in index order.
func TestMapStoredInTheRunPartitionRunsOn(t *testing.T) {
	ctx := context.Background()
	table := newTable(t)
	before := ledgertest.NewHarness(t, func(_ testing.TB, now func() time.Time) ledger.Storage {
		return store.New(db, table, store.WithClock(now), store.WithMapsInRunPartition())
	})
	v := before.MustCreate(t, ledgertest.NewRun("maps", "each"))
	run := v.Run.ID
	const total, first = 60, 40
	items := make([][]byte, total)
	for i := range items {
		items[i] = []byte(fmt.Sprint(i))
	}
	m := ledger.MapState{Run: run, Task: "each", Total: total, MaxParallel: total}
	if err := before.Store.CreateMap(ctx, m, items); err != nil {
		t.Fatal(err)
	}
	m, err := before.Store.ReleaseChildren(ctx, m, first)
	if err != nil {
		t.Fatal(err)
	}
	now := before.Clock.Now()
	child := func(i int) ledger.Instance {
		c, err := ledger.NewInstance(ledger.NewRun{ID: run, Job: "maps"}, ledger.NewTask{
			ID: ledger.ChildTask("each", i), Pool: "default", Policy: ledgertest.Policy(), Scheduled: true, Item: items[i]}, now)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var children []ledger.Instance
	for i := range first {
		children = append(children, child(i))
	}
	if err := before.Store.CreateChildren(ctx, children); err != nil {
		t.Fatal(err)
	}
	key := func(i int) ledger.InstanceKey { return ledger.InstanceKey{Run: run, Task: ledger.ChildTask("each", i)} }
	for _, i := range []int{0, 33} {
		before.Step(t, key(i), ledgertest.Dispatch(1), now)
		before.Step(t, key(i), ledgertest.Started(1, "w"), now)
	}

	after := ledgertest.NewHarness(t, func(_ testing.TB, now func() time.Time) ledger.Storage {
		return store.New(db, table, store.WithClock(now))
	})
	after.Step(t, key(0), ledgertest.Succeeded(1), now)
	failed := ledgertest.Ev(statemodel.EvFailed, 1)
	failed.ErrorCategory, failed.Retryable = "boom", new(bool)
	after.Step(t, key(33), failed, now)
	if m, err = after.Store.ReleaseChildren(ctx, m, total-first); err != nil {
		t.Fatal(err)
	}
	children = children[:0]
	for i := first; i < total; i++ {
		children = append(children, child(i))
	}
	if err := after.Store.CreateChildren(ctx, children); err != nil {
		t.Fatal(err)
	}
	after.Step(t, key(total-1), ledgertest.Dispatch(1), now)

	want := ledger.MapState{Run: run, Task: "each", Total: total, Next: total, Running: total - 2, Succeeded: 1, Failed: 1, MaxParallel: total}
	if got, err := after.Store.GetMap(ctx, run, "each"); err != nil || got != want {
		t.Fatalf("map %+v (%v), want %+v", got, err, want)
	}
	if view, err := after.Store.ReadRun(ctx, run); err != nil || view.Maps["each"] != want {
		t.Fatalf("ReadRun's map %+v (%v), want %+v", view.Maps["each"], err, want)
	}
	if h := after.FullHistory(t, key(33)); len(h) == 0 || h[len(h)-1].To != statemodel.StateFailed {
		t.Fatalf("child 33's history: %+v", h)
	}
	var listed []string
	token := ""
	for pages := 0; pages <= total; pages++ {
		page, next, err := after.Store.ListChildren(ctx, run, "each", 15, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range page {
			listed = append(listed, c.Key.Task)
		}
		if token = next; token == "" {
			break
		}
	}
	if len(listed) != total {
		t.Fatalf("listed %d children, want %d", len(listed), total)
	}
	for i, task := range listed {
		if task != key(i).Task {
			t.Fatalf("child %d listed as %s", i, task)
		}
	}
	if inst := after.MustInstance(t, key(total-1)); inst.Snapshot.State != statemodel.StateQueued {
		t.Fatalf("child %d: %s, want QUEUED", total-1, inst.Snapshot.State)
	}
}
