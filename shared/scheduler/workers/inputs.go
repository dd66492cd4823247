package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// CategoryInputsTooLarge: the outputs of the task's upstream tasks come
// to more than protocol.MaxInputsBytes; no worker would read such a
// claim answer, and a retry would meet the same inputs.
const CategoryInputsTooLarge = "inputs_too_large"

// ErrInputsTooLarge: a claim's inputs are over protocol.MaxInputsBytes;
// the claim failed the task (CategoryInputsTooLarge). It is an illegal
// transition to the claimer, as any later call of the attempt will be.
var ErrInputsTooLarge = protocol.NewError(protocol.CodeIllegalTransition, "inputs too large", fmt.Sprintf(
	"The task's inputs are over %d bytes in total, so it failed with error_category inputs_too_large.", protocol.MaxInputsBytes)).
	Wrapping(protocol.ErrIllegalTransition)

// addInputs puts the outputs of inst's direct upstream tasks that
// succeeded with one into a claim answer's envelope (one batched read,
// none for a task without upstream tasks). The queue message never
// carries them: it stays small, and an output is read when it is needed.
// Outputs over protocol.MaxInputsBytes in total are ErrInputsTooLarge.
func (w *Room) addInputs(ctx context.Context, inst ledger.Instance, env *protocol.Envelope) error {
	if _, i, ok := ledger.ParseChild(inst.Key.Task); ok {
		env.Item, env.Index = inst.Item, &i
	}
	if len(inst.DependsOn) == 0 {
		return nil
	}
	outs, err := w.store.GetOutputs(ctx, inst.Key.Run, inst.DependsOn)
	if err != nil {
		return fmt.Errorf("inputs of %s: %w", inst.Key, err)
	}
	if len(outs) == 0 {
		return nil
	}
	env.Inputs = make(map[string]json.RawMessage, len(outs))
	for t, o := range outs {
		env.Inputs[t] = json.RawMessage(o)
	}
	if n := inputsSize(env.Inputs); n > protocol.MaxInputsBytes {
		return fmt.Errorf("%w: %s's inputs are %d bytes, over %d", ErrInputsTooLarge, inst.Key, n, protocol.MaxInputsBytes)
	}
	return nil
}

// claimEnvelope is the envelope a won claim of attempt n of inst (as read
// with run) answers with, its inputs added; cur is the instance as the
// claim left it, which inputs too large end FAILED (the error answered is
// then the reason).
func (w *Room) claimEnvelope(ctx context.Context, inst ledger.Instance, run ledger.Run, cur ledger.Instance, n int, token string) (protocol.Envelope, error) {
	env := w.k.Envelope(inst, run, n, token)
	// The attempt's own span, derived from its name: every delivery of
	// the claim answers the same one, and the process that records the
	// attempt's end exports its span under it.
	env.TraceParent = protocol.AttemptTraceParent(run.TraceID, protocol.AttemptRef{Run: inst.Key.Run, Task: inst.Key.Task, Attempt: n})
	fence, ok, err := w.store.Fence(ctx, inst.Key, n)
	if err != nil {
		return protocol.Envelope{}, err
	}
	if ok {
		env.Fence = &fence
	}
	if err := w.addInputs(ctx, inst, &env); errors.Is(err, ErrInputsTooLarge) {
		return protocol.Envelope{}, w.failInputsTooLarge(ctx, cur, n, err)
	} else if err != nil {
		return protocol.Envelope{}, err
	}
	return env, nil
}

// inputsSize is the length of inputs encoded as a JSON object.
func inputsSize(inputs map[string]json.RawMessage) int {
	n := len("{}") + max(len(inputs)-1, 0) // braces and commas
	for t, o := range inputs {
		key, _ := json.Marshal(t)
		n += len(key) + len(":") + len(o)
	}
	return n
}

// failInputsTooLarge ends the claimed attempt n of cur FAILED with
// CategoryInputsTooLarge and no retry, and answers cause. The event's id
// is the attempt's own, so the claimer's retry of its claim writes nothing
// new; a store error is answered instead, and that retry tries again.
func (w *Room) failInputsTooLarge(ctx context.Context, cur ledger.Instance, n int, cause error) error {
	ev := statemodel.Event{ID: fmt.Sprintf("inputs-too-large:%d", n), Type: statemodel.EvFailed, Actor: statemodel.ActorWorker,
		Attempt: n, ErrorCategory: CategoryInputsTooLarge, Retryable: new(bool), Reason: protocol.ClipReason(cause.Error())}
	res, err := w.store.TransitionFrom(ctx, cur, ev, w.k.Now(), w.k.Policy())
	if err != nil && !errors.Is(err, statemodel.ErrIllegalTransition) {
		return fmt.Errorf("record %s#%d failed (%v): %w", cur.Key, n, cause, err)
	}
	if err == nil && res.Outcome == statemodel.Applied {
		w.k.Follow(ctx, res)
	}
	return cause
}
