package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/signals"
	"github.com/runledger/runledger/statemodel"
)

// A succeeding signal's output is kept with its attempt and handed to the
// direct downstream task in its claim answer's inputs, as a worker's
// output is; an output over the limit is refused by the same check as a
// completion's (TooLarge, naming output) and writes nothing.
func TestSignalOutputFlowsDownstream(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	run := f.triggerJob(t, `{"name":"gated","tasks":[
		{"id":"gate","executor":{"type":"signal"}},
		{"id":"next","depends_on":["gate"]}]}`)
	key := ledger.InstanceKey{Run: run, Task: "gate"}
	gate, err := f.st.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if gate.Snapshot.State != statemodel.StateRunning {
		t.Fatalf("gate is %s, want RUNNING (waiting for its signal)", gate.Snapshot.State)
	}

	big := json.RawMessage(`"` + strings.Repeat("x", protocol.MaxOutputBytes) + `"`)
	err = f.svc.Signals().SignalTask(ctx, key, protocol.SignalRequest{Outcome: protocol.SignalSucceeded, By: "ana", Output: big}, signals.Auth{})
	var fe *protocol.FieldError
	if !errors.As(err, &fe) || fe.Field != "output" || !fe.TooLarge {
		t.Fatalf("signal with a %d-byte output: %v, want a too-large output", len(big), err)
	}
	if after, err := f.st.GetInstance(ctx, key); err != nil || after.Snapshot.Version != gate.Snapshot.Version {
		t.Fatalf("the refused signal wrote: version %d -> %d (%v)", gate.Snapshot.Version, after.Snapshot.Version, err)
	}

	out := `{"approved_amount":120,"note":"ok"}`
	req := protocol.SignalRequest{Outcome: protocol.SignalSucceeded, By: "ana", Output: json.RawMessage("{ \"approved_amount\": 120, \"note\": \"ok\" }")}
	if err := f.svc.Signals().SignalTask(ctx, key, req, signals.Auth{}); err != nil {
		t.Fatal(err)
	}
	gate, err = f.st.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(ledger.SucceededOutput(gate.Snapshot)); got != out {
		t.Fatalf("gate is %s with output %s, want SUCCEEDED with %s", gate.Snapshot.State, got, out)
	}

	var env protocol.Envelope
	for _, e := range f.drainEnvelopes(t) {
		if e.Run == run && e.Task == "next" {
			env = e
		}
	}
	if env.Task == "" {
		t.Fatal("next was not dispatched after the signal")
	}
	ans, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "w@boot", "claim-next")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(ans.Envelope.Inputs["gate"]); got != out {
		t.Fatalf("next's inputs %v, want gate: %s", ans.Envelope.Inputs, out)
	}
}
