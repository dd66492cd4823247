package worker

import (
	"encoding/json"
	"fmt"

	"github.com/runledger/runledger/shared/protocol"
)

// MaxOutputBytes bounds an output (protocol.MaxOutputBytes).
const MaxOutputBytes = protocol.MaxOutputBytes

// Inputs are the outputs of the task's direct upstream tasks that
// succeeded with one, by task name, as the claim answered them; nil when
// none.
func (t Task) Inputs() map[string]json.RawMessage { return t.inputs }

// Item is a map child's element of the array its map task rendered; nil
// for a task that is not a map child.
func (t Task) Item() json.RawMessage { return t.item }

// Index is a map child's position in that array; ok is false for a task
// that is not a map child.
func (t Task) Index() (i int, ok bool) {
	if t.index == nil {
		return 0, false
	}
	return *t.index, true
}

// SetOutput sets the attempt's output to v as JSON: a successful
// completion reports the last value set, the task answer shows it, and
// the direct downstream tasks get it in their Inputs. It refuses a value
// that does not encode or encodes to more than MaxOutputBytes. Safe to
// call from any goroutine.
func (t Task) SetOutput(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("set output of %s: %w", t.Ref(), err)
	}
	if err := protocol.CheckOutput(b); err != nil {
		return fmt.Errorf("set output of %s: %w", t.Ref(), err)
	}
	if t.out == nil {
		return fmt.Errorf("set output of %s: the task was not handed out by a worker", t.Ref())
	}
	t.out.mu.Lock()
	t.out.output = b
	t.out.mu.Unlock()
	return nil
}

func (o *taskOutput) getOutput() json.RawMessage {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.output
}
