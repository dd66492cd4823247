package ledgertest

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

var outputCases = []Case{
	{"OutputKeptWithTheSucceededAttempt", outputKept},
}

// outputKept: a success's output is written with the attempt (in the
// instance's write), read back by GetInstance, ReadRun and GetOutputs; a
// failed attempt's output is not kept, and GetOutputs leaves out a task
// that did not succeed or is not there. The largest output (16 KiB) fits.
func outputKept(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("outputs", "a", "b", "c"))
	now := h.Clock.Now()
	big := []byte(`"` + strings.Repeat("x", 16<<10-2) + `"`)
	finish := func(task string, ev statemodel.Event) {
		key := ledger.InstanceKey{Run: v.Run.ID, Task: task}
		h.Step(t, key, Ev(statemodel.EvDepsMet, 0), now)
		h.Step(t, key, Dispatch(1), now)
		h.Step(t, key, Started(1, "w"), now)
		h.Step(t, key, ev, now)
	}
	ok := Succeeded(1)
	ok.Output = big
	finish("a", ok)
	failed := Ev(statemodel.EvFailed, 1)
	failed.Output, failed.Retryable = []byte(`{"partial":true}`), new(bool)
	finish("b", failed)

	inst := h.MustInstance(t, ledger.InstanceKey{Run: v.Run.ID, Task: "a"})
	if got := ledger.SucceededOutput(inst.Snapshot); !bytes.Equal(got, big) {
		t.Fatalf("a's stored output is %d bytes, want %d", len(got), len(big))
	}
	view, err := h.Store.ReadRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tv := range view.Tasks {
		got := ledger.SucceededOutput(tv.Instance.Snapshot)
		if want := map[string][]byte{"a": big}[tv.Instance.Key.Task]; !bytes.Equal(got, want) {
			t.Errorf("ReadRun: %s's output is %q, want %d bytes", tv.Instance.Key.Task, got, len(want))
		}
		for _, a := range tv.Instance.Snapshot.Attempts {
			if a.Outcome != statemodel.OutcomeSucceeded && a.Output != nil {
				t.Errorf("%s's %s attempt kept an output", tv.Instance.Key.Task, a.Outcome)
			}
		}
	}
	outs, err := h.Store.GetOutputs(ctx, v.Run.ID, []string{"a", "b", "c", "absent"})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || !bytes.Equal(outs["a"], big) {
		t.Errorf("GetOutputs answered %d outputs (a: %d bytes), want a's only", len(outs), len(outs["a"]))
	}
	if _, err := h.Store.GetOutputs(ctx, v.Run.ID, []string{""}); err == nil {
		t.Error("GetOutputs of an empty task name: no error")
	}
}
