package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
)

// TestSignalOutputFlowsDownstream: a signal that approves with an output
// hands it to the signal task's downstream task as its input, as a
// worker's output is, and the task answer shows it; an output over 16 KiB
// is refused with 413 naming the field, and nothing is written.
func TestSignalOutputFlowsDownstream(t *testing.T) {
	s := startStack(t, devstack.Options{})
	inputs := make(chan json.RawMessage, 4)
	s.startWorker("default", "signal-outputs", 2, func(_ context.Context, task worker.Task) error {
		if task.Task == "publish" {
			inputs <- task.Inputs()["gate"]
		}
		return nil
	})
	s.createJob(approvalJob("signal-outputs", nil))
	run := s.trigger("signal-outputs", nil)
	token := s.signalToken(run, "gate", 1)
	s.waitTask(run, "gate", "RUNNING", 10*time.Second)

	before := s.tableItems()
	big := `"` + strings.Repeat("x", protocol.MaxOutputBytes) + `"`
	r := s.signal("Bearer "+token, run, "gate", map[string]any{"outcome": "succeeded", "by": "ann", "output": json.RawMessage(big)})
	if r.Status != http.StatusRequestEntityTooLarge || r.code() != "payload_too_large" || !strings.Contains(r.message(), "output") {
		t.Fatalf("a signal with a %d-byte output: %d %s, want 413 payload_too_large naming output", len(big), r.Status, r.Raw)
	}
	oneSentence(t, "signal output too large", r)
	if d := tableDiff(before, s.tableItems()); d != "" {
		t.Fatalf("the refused signal wrote to the table:\n%s", d)
	}

	const out = `{"approved_limit":5000,"by":"ann"}`
	s.signal("Bearer "+token, run, "gate", map[string]any{"outcome": "succeeded", "by": "ann",
		"output": json.RawMessage(`{"approved_limit": 5000, "by": "ann"}`)}).must(t, http.StatusOK)
	s.waitRun(run, 30*time.Second, "SUCCEEDED")
	select {
	case in := <-inputs:
		if string(in) != out {
			t.Errorf("publish's input from gate: %s, want %s", in, out)
		}
	default:
		t.Error("publish ran no handler")
	}
	if got := outputOf(t, s, run, "gate"); got != out {
		t.Errorf("gate's task answer: output %s, want %s", got, out)
	}
}
