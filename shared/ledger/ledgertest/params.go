package ledgertest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

var paramsCases = []Case{
	{"RunParams", runParams},
}

// paramsOfSize is a JSON object of exactly n bytes (n >= 12).
func paramsOfSize(n int) []byte {
	p := []byte(`{"pad":"` + strings.Repeat("x", n-10) + `"}`)
	if len(p) != n {
		panic(fmt.Sprintf("params of %d bytes, want %d", len(p), n))
	}
	return p
}

// runParams: a run's params, none, small, at the store's inline bound
// and past it, 4 KB and the API's 64 KiB, read back the same through
// every read that answers them (GetRun, ReadRun, GetInstanceAndRun,
// ListRuns by job and of all runs, MarkDeadlineMissed's run, and GetRun
// after the run ended), whether a store keeps them in the run item or
// apart.
func runParams(t *testing.T, h *Harness) {
	ctx := context.Background()
	sizes := map[string][]byte{
		"none": nil, "small": []byte(`{"p":1}`), "512": paramsOfSize(512), "513": paramsOfSize(513),
		"4k": paramsOfSize(4096), "64k": paramsOfSize(64 << 10),
	}
	made := map[string]ledger.NewRun{}
	for _, name := range []string{"none", "small", "512", "513", "4k", "64k"} {
		nr := NewRun("params", "main")
		nr.Params = sizes[name]
		nr.DeadlineAt = h.Clock.Now().Add(time.Second)
		v := h.MustCreate(t, nr)
		if !bytes.Equal(v.Run.Params, nr.Params) {
			t.Fatalf("%s: CreateRun answers params of %d bytes, want %d", name, len(v.Run.Params), len(nr.Params))
		}
		made[name] = nr
	}
	check := func(name, how string, got []byte) {
		t.Helper()
		if want := made[name].Params; !bytes.Equal(got, want) {
			t.Fatalf("%s: %s reads params of %d bytes (%.20q), want %d", name, how, len(got), got, len(want))
		}
	}
	for name, nr := range made {
		r, err := h.Store.GetRun(ctx, nr.ID)
		if err != nil {
			t.Fatalf("%s: GetRun: %v", name, err)
		}
		check(name, "GetRun", r.Params)
		v, err := h.Store.ReadRun(ctx, nr.ID)
		if err != nil || len(v.Tasks) != 1 {
			t.Fatalf("%s: ReadRun: %d tasks, %v", name, len(v.Tasks), err)
		}
		check(name, "ReadRun", v.Run.Params)
		_, ir, err := h.Store.GetInstanceAndRun(ctx, ledger.InstanceKey{Run: nr.ID, Task: "main"})
		if err != nil {
			t.Fatalf("%s: GetInstanceAndRun: %v", name, err)
		}
		check(name, "GetInstanceAndRun", ir.Params)
	}
	byID := func(how string, runs []ledger.Run) {
		t.Helper()
		seen := 0
		for name, nr := range made {
			i := slices.IndexFunc(runs, func(r ledger.Run) bool { return r.ID == nr.ID })
			if i < 0 {
				continue
			}
			seen++
			check(name, how, runs[i].Params)
		}
		if seen != len(made) {
			t.Fatalf("%s listed %d of the %d runs", how, seen, len(made))
		}
	}
	runs, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: "params"})
	if err != nil {
		t.Fatalf("ListRuns of the job: %v", err)
	}
	byID("ListRuns of the job", runs)
	all, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Limit: ledger.MaxListLimit})
	if err != nil {
		t.Fatalf("ListRuns: %v", err)
	}
	byID("ListRuns", all)

	h.Clock.Advance(2 * time.Second)
	for name, nr := range made {
		run, err := h.Store.GetRun(ctx, nr.ID)
		if err != nil {
			t.Fatalf("%s: GetRun: %v", name, err)
		}
		// A copy read without them (a caller building a run by hand) still
		// gets the stored run's params back.
		bare := run
		bare.Params = nil
		marked, ok, err := h.Store.MarkDeadlineMissed(ctx, bare)
		if err != nil || !ok {
			t.Fatalf("%s: MarkDeadlineMissed: %t %v", name, ok, err)
		}
		check(name, "MarkDeadlineMissed", marked.Params)
		ended, err := h.Store.UpdateRunState(ctx, run, ledger.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired})
		if err != nil {
			t.Fatalf("%s: end: %v", name, err)
		}
		check(name, "UpdateRunState", ended.Params)
		after, err := h.Store.GetRun(ctx, nr.ID)
		if err != nil || after.ExecutionState != statemodel.RunSucceeded {
			t.Fatalf("%s: GetRun after its end: %s, %v", name, after.ExecutionState, err)
		}
		check(name, "GetRun after its end", after.Params)
	}
}
