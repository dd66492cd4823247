package workers

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// A store refusal keeps its own meaning whatever the attempt's state: an
// item over DynamoDB's limit is payload_too_large (413), never
// already_claimed. These answers need no read of the instance.
func TestClassifyRefusalKeepsStoreErrors(t *testing.T) {
	t.Parallel()
	w := New(Params{Kernel: permanent{}}) // no store: these errors are answered before any read
	ref := protocol.AttemptRef{Run: "r", Task: "t", Attempt: 1}
	for _, want := range []error{ledger.ErrItemTooLarge, ledger.ErrInvalidKey, ledger.ErrInvalidInput} {
		for _, route := range []string{routeClaim, routeHeartbeat, routeComplete} {
			err := w.classifyRefusal(context.Background(), route, ref, ledger.Instance{}, fmt.Errorf("transition r/t: %w", want))
			if !errors.Is(err, want) || errors.Is(err, protocol.ErrAlreadyClaimed) || errors.Is(err, statemodel.ErrIllegalTransition) {
				t.Errorf("%s refused with %v: answered %v, want the store's error", route, want, err)
			}
		}
	}
}

// permanent is a kernel to which no error is transient; it has nothing
// else.
type permanent struct{ Kernel }

func (permanent) Transient(error) bool { return false }
