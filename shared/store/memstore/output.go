package memstore

import (
	"context"

	"github.com/runledger/runledger/shared/ledger"
)

// GetOutputs reads the named instances of run and answers their outputs.
func (s *outputs) GetOutputs(ctx context.Context, run string, tasks []string) (map[string][]byte, error) {
	op := opError("get outputs of %s", run)
	if err := s.enter(ctx, nil); err != nil {
		return nil, op(err)
	}
	defer s.mu.Unlock()
	var insts []ledger.Instance
	for _, t := range tasks {
		key := ledger.InstanceKey{Run: run, Task: t}
		if err := ledger.CheckInstanceKey(key); err != nil {
			return nil, op(err)
		}
		if in, ok := s.instances[key]; ok {
			insts = append(insts, cloneInstance(in.inst))
		}
	}
	return ledger.OutputsOf(insts), nil
}
