package store

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
)

// GetOutputs reads the named instances of run with one strongly
// consistent BatchGetItem (per 100 tasks) and answers their outputs.
func (s *outputs) GetOutputs(ctx context.Context, run string, tasks []string) (map[string][]byte, error) {
	op := func(err error) error { return fmt.Errorf("get outputs of %s: %w", run, err) }
	keys := make([]map[string]types.AttributeValue, 0, len(tasks))
	for _, t := range tasks {
		if err := ledger.CheckInstanceKey(ledger.InstanceKey{Run: run, Task: t}); err != nil {
			return nil, op(err)
		}
		pk, err := s.instancePK(ctx, ledger.InstanceKey{Run: run, Task: t})
		if err != nil {
			return nil, op(err)
		}
		keys = append(keys, keyOf(pk, instanceSK(t)))
	}
	if len(keys) == 0 {
		return map[string][]byte{}, nil
	}
	var insts []ledger.Instance
	var derr error
	err := s.batchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		i, err := decodeInstance(it)
		if err != nil {
			derr = err
			return
		}
		insts = append(insts, i)
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, op(err)
	}
	return ledger.OutputsOf(insts), nil
}
