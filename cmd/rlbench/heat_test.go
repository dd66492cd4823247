package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
)

// TestHeatTraceSumsToStoreReports: the write units of each step of a
// run's life, summed two ways, agree: the store's capacity reports (what
// it knows it writes: items and index entries) and the heat trace (the
// same size rules applied to the items DynamoDB Local hands back, with
// the index entries each write puts, moves or removes). The steps include
// a heartbeat, whose item is over 1 KB (its one-minute lease rides a
// delay message, so no timers entry moves), and
// the re-arming of a run's backstop, which moves its timers entry and
// rewrites its live entry.
func TestHeatTraceSumsToStoreReports(t *testing.T) {
	ctx := context.Background()
	env, err := emulator.Start(ctx, emulator.Options{Services: []string{emulator.ServiceDynamoDB}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop emulators: %v", err)
		}
	})
	heat := newHeatTrace()
	var (
		mu      sync.Mutex
		reports []store.CapacityReport
	)
	db := env.DynamoDBClient(heat.dynamoOption)
	const table = "heat-sum"
	if err := store.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	var st *store.Store
	h := ledgertest.NewHarness(t, func(_ testing.TB, now func() time.Time) ledger.Storage {
		st = store.New(db, table, store.WithClock(now), store.WithCapacityReports(func(r store.CapacityReport) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, r)
		}))
		return st
	})

	// step runs one step and compares its two sums; it answers the items
	// the step's transactions named.
	step := func(name string, do func()) []txItem {
		t.Helper()
		heat.take()
		mu.Lock()
		reports = nil
		mu.Unlock()
		do()
		traced := 0.0
		loads, tx := heat.take()
		for _, l := range loads {
			traced += l.WCU
		}
		mu.Lock()
		defer mu.Unlock()
		reported := 0.0
		var ops []string
		for _, r := range reports {
			reported += r.ComputedWCU()
			ops = append(ops, fmt.Sprintf("%s items %v index entries %v", r.Operation, r.ItemSizes, r.IndexWriteSizes))
		}
		if len(reports) == 0 {
			t.Fatalf("%s: the store reported no write", name)
		}
		if reported != traced {
			t.Errorf("%s: the store reports %.0f WCU (%s), the trace of its writes %.0f", name, reported, strings.Join(ops, "; "), traced)
		}
		return tx
	}

	nr := ledgertest.NewRun("heat", "main")
	var v ledger.RunView
	created := step("create", func() { v = h.MustCreate(t, nr) })
	// The creation is one transaction: the trace names the run's item in it.
	if !slices.ContainsFunc(created, func(it txItem) bool { return strings.Contains(it.PK, v.Run.ID) }) {
		t.Errorf("creation's transaction items %+v, want the run's", created)
	}
	key := v.Tasks[0].Instance.Key
	var now time.Time
	step("dispatch", func() { now = h.ToQueued(t, key) })
	step("start", func() { h.Step(t, key, ledgertest.Started(1, "w"), now) })
	step("heartbeat", func() {
		if _, err := st.Heartbeat(ctx, key, 1, now.Add(time.Second), time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	// A heartbeat is one write of the instance, under 1 KB (one WCU), and
	// moves no timers entry: its lease rides a delay message.
	mu.Lock()
	if len(reports) != 1 || reports[0].ItemSizes[0] > 1024 || len(reports[0].IndexWriteSizes) != 0 {
		t.Errorf("heartbeat reports %+v, want one write of an item under 1 KB and no index entry", reports)
	}
	mu.Unlock()
	// A minute on, the backstop re-armed is a minute later: its timers
	// entry moves.
	h.Clock.Advance(time.Minute)
	step("rearm backstop", func() {
		run, err := st.GetRun(ctx, v.Run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.RearmRunBackstop(ctx, run); err != nil {
			t.Fatal(err)
		}
	})
}
