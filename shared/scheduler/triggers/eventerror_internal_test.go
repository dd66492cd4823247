package triggers

import (
	"errors"
	"fmt"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
)

// An event whose jobs met a transient and a permanent error is retried
// (the transient job still gets its run); one with permanent errors only
// is dropped.
func TestEventErrorRetriesATransientJob(t *testing.T) {
	t.Parallel()
	throttled := fmt.Errorf("start run of a: %w", ledger.ErrThrottled)
	invalid := fmt.Errorf("start run of b: %w", ledger.ErrInvalidInput)
	if err := eventError([]error{invalid, throttled}, transient); !transient(err) || errors.Is(err, ledger.ErrInvalidInput) {
		t.Errorf("eventError(permanent, transient) = %v: want the transient one only, retried", err)
	}
	if err := eventError([]error{invalid}, transient); err == nil || transient(err) {
		t.Errorf("eventError(permanent) = %v: want it, not retried", err)
	}
	if err := eventError(nil, transient); err != nil {
		t.Errorf("eventError(none) = %v", err)
	}
}

// transient classifies these errors as the kernel's Kernel.Transient
// does: an input the store refused stays refused, throttling goes away.
func transient(err error) bool {
	return err != nil && !errors.Is(err, ledger.ErrInvalidInput)
}
