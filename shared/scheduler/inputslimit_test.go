package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/scheduler/workers"
	"github.com/runledger/runledger/statemodel"
)

// paddedOutputs is a store whose outputs read as JSON strings of size
// bytes, whatever was stored: outputs as large as a store can hold,
// larger than the API lets a worker report.
type paddedOutputs struct {
	scheduler.Store
	size int
}

func (p paddedOutputs) GetOutputs(ctx context.Context, run string, tasks []string) (map[string][]byte, error) {
	outs, err := p.Store.GetOutputs(ctx, run, tasks)
	for t := range outs {
		outs[t] = []byte(`"` + strings.Repeat("x", p.size-2) + `"`)
	}
	return outs, err
}

// Five upstream tasks whose outputs are 256 KiB each give their common
// downstream task 1.25 MiB of inputs, more than protocol.MaxInputsBytes:
// its claim fails it (inputs_too_large, no retry, though its policy allows
// three attempts) and is refused as an illegal transition, which the
// worker SDK takes as final; the claim's retry answers the same and
// writes nothing; the run fails.
func TestInputsOverTheBoundFailTheTask(t *testing.T) {
	f := newFixture(t)
	f = assemble(paddedOutputs{Store: f.st, size: 256 << 10}, f.q, f.pool, f.clock, "", nil)
	ups := []string{"u0", "u1", "u2", "u3", "u4"}
	var tasks []string
	for _, u := range ups {
		tasks = append(tasks, `{"id":"`+u+`"}`)
	}
	f.createJob(t, `{"name":"big","retry":{"max_attempts":3,"initial_interval":"1s","jitter":"none"},"tasks":[`+
		strings.Join(tasks, ",")+`,{"id":"join","depends_on":["`+strings.Join(ups, `","`)+`"]}]}`)
	v := f.trigger(t, "big", time.Time{})
	ctx := context.Background()
	for i, env := range f.drainEnvelopes(t) {
		if _, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "w@boot", fmt.Sprint("claim-", i)); err != nil {
			t.Fatal(err)
		}
		c := protocol.Completion{Run: env.Run, Task: env.Task, Attempt: env.Attempt, EventID: "done",
			Outcome: protocol.OutcomeSucceeded, Output: json.RawMessage(`"small"`)}
		if _, err := f.svc.Workers().Complete(ctx, c, env.Token); err != nil {
			t.Fatal(err)
		}
	}
	envs := f.drainEnvelopes(t)
	if len(envs) != 1 || envs[0].Task != "join" {
		t.Fatalf("envelopes %+v, want join's", envs)
	}
	join := envs[0]
	ans, err := f.svc.Workers().Claim(ctx, refOf(join), join.Token, "w@boot", "claim-join")
	if !errors.Is(err, workers.ErrInputsTooLarge) || !errors.Is(err, protocol.ErrIllegalTransition) {
		n := 0
		if ans.Envelope != nil {
			n = len(ans.Envelope.Inputs)
		}
		t.Fatalf("join's claim: %v (answered with %d inputs), want the inputs-too-large refusal, an illegal transition", err, n)
	}
	key := ledger.InstanceKey{Run: v.Run.ID, Task: "join"}
	inst, err := f.st.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := inst.Snapshot.AttemptN(1)
	if inst.Snapshot.State != statemodel.StateFailed || a.ErrorCategory != workers.CategoryInputsTooLarge || inst.Snapshot.Attempt != 1 {
		t.Fatalf("join: %s attempt %d %+v, want FAILED by attempt 1 with %s", inst.Snapshot.State, inst.Snapshot.Attempt, a, workers.CategoryInputsTooLarge)
	}
	before, err := ledger.FullHistory(ctx, f.st, key)
	if err != nil {
		t.Fatal(err)
	}
	// The worker retries its claim (same event id): the same answer, no write.
	if _, err := f.svc.Workers().Claim(ctx, refOf(join), join.Token, "w@boot", "claim-join"); !errors.Is(err, workers.ErrInputsTooLarge) {
		t.Fatalf("the claim's retry: %v, want the same refusal", err)
	}
	if after, err := ledger.FullHistory(ctx, f.st, key); err != nil || len(after) != len(before) {
		t.Fatalf("the claim's retry wrote: %d records, then %d (%v)", len(before), len(after), err)
	}
	if run := f.readRun(t, v.Run.ID); run.Run.ExecutionState != statemodel.RunFailed {
		t.Fatalf("run %s, want FAILED", run.Run.ExecutionState)
	}
}

// Inputs of exactly protocol.MaxInputsBytes, encoded, are answered.
func TestInputsAtTheBoundAreAnswered(t *testing.T) {
	f := newFixture(t)
	// One upstream: {"u0":<output>} is its output plus 7 bytes.
	f = assemble(paddedOutputs{Store: f.st, size: protocol.MaxInputsBytes - len(`{"u0":}`)}, f.q, f.pool, f.clock, "", nil)
	f.createJob(t, `{"name":"edge","tasks":[{"id":"u0"},{"id":"down","depends_on":["u0"]}]}`)
	f.trigger(t, "edge", time.Time{})
	ctx := context.Background()
	up := f.drainEnvelopes(t)[0]
	if _, err := f.svc.Workers().Claim(ctx, refOf(up), up.Token, "w@boot", "claim-up"); err != nil {
		t.Fatal(err)
	}
	c := protocol.Completion{Run: up.Run, Task: up.Task, Attempt: up.Attempt, EventID: "done", Outcome: protocol.OutcomeSucceeded,
		Output: json.RawMessage(`1`)}
	if _, err := f.svc.Workers().Complete(ctx, c, up.Token); err != nil {
		t.Fatal(err)
	}
	down := f.drainEnvelopes(t)[0]
	ans, err := f.svc.Workers().Claim(ctx, refOf(down), down.Token, "w@boot", "claim-down")
	if err != nil {
		t.Fatalf("claim with inputs at the bound: %v", err)
	}
	if b, _ := json.Marshal(ans.Envelope.Inputs); len(b) != protocol.MaxInputsBytes {
		t.Fatalf("inputs encode to %d bytes, want exactly %d", len(b), protocol.MaxInputsBytes)
	}
}
