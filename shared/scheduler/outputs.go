package scheduler

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
)

// addInputs puts the outputs of inst's direct upstream tasks that
// succeeded with one into a claim answer's envelope (one batched read,
// none for a task without upstream tasks). The queue message never
// carries them: it stays small, and an output is read when it is needed.
func (s *Service) addInputs(ctx context.Context, inst ledger.Instance, env *protocol.Envelope) error {
	if _, i, ok := ledger.ParseChild(inst.Key.Task); ok {
		env.Item, env.Index = inst.Item, &i
	}
	if len(inst.DependsOn) == 0 {
		return nil
	}
	outs, err := s.store.GetOutputs(ctx, inst.Key.Run, inst.DependsOn)
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
	return nil
}
