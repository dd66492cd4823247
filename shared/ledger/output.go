package ledger

import (
	"context"

	"github.com/runledger/runledger/statemodel"
)

// Outputs reads what tasks handed on: the outputs of a run's tasks, for
// the claim answer of a task downstream of them.
type Outputs interface {
	// GetOutputs reads the named instances of run in one batched read
	// and answers the output of each that is SUCCEEDED with one; a task
	// that is not there, not SUCCEEDED or without an output is absent.
	GetOutputs(ctx context.Context, run string, tasks []string) (map[string][]byte, error)
}

// SucceededOutput is the output of a SUCCEEDED instance's successful
// attempt (its current one); nil when it is not SUCCEEDED or has none.
func SucceededOutput(s statemodel.Snapshot) []byte {
	if s.State != statemodel.StateSucceeded {
		return nil
	}
	for i := len(s.Attempts) - 1; i >= 0; i-- {
		if a := s.Attempts[i]; a.Outcome == statemodel.OutcomeSucceeded {
			return a.Output
		}
	}
	return nil
}

// OutputsOf picks SucceededOutput of each instance: GetOutputs' answer.
func OutputsOf(insts []Instance) map[string][]byte {
	out := map[string][]byte{}
	for _, i := range insts {
		if o := SucceededOutput(i.Snapshot); o != nil {
			out[i.Key.Task] = o
		}
	}
	return out
}
