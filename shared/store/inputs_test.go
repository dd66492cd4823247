package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// TestAttemptsBoundedInTheInstanceItem: manual retries add attempts without
// limit, but the instance item holds only the latest
// statemodel.MaxInlineAttempts records, so its size does not grow with
// them; every attempt stays readable from its own item, and a late event
// of an evicted attempt is still recorded on it.
func TestAttemptsBoundedInTheInstanceItem(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	p := ledgertest.Policy()
	v := ts.MustCreate(t, ledgertest.NewRun("many-attempts", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.Clock.Now()
	ts.Step(t, key, ledgertest.Ev(statemodel.EvDepsMet, 0), now)
	ref := strings.Repeat("r", 2048) // the largest output_ref a worker may report
	size := func() int {
		return store.ItemSize(getItem(t, ts.table, "RUN#"+key.Run, "TASK#"+key.Task))
	}
	const total = 4 * statemodel.MaxInlineAttempts
	var sizeAtLimit int
	for n := 1; n <= total; n++ {
		ts.Step(t, key, ledgertest.Dispatch(n), now)
		ts.Step(t, key, ledgertest.Started(n, "w"), now)
		failed := ledgertest.Ev(statemodel.EvFailed, n)
		failed.OutputRef, failed.ErrorCategory, failed.Retryable = ref, "boom", new(bool)
		ts.Step(t, key, failed, now)
		if n == statemodel.MaxInlineAttempts {
			sizeAtLimit = size()
		}
		if n < total {
			retry := ledgertest.Ev(statemodel.EvManualRetry, 0)
			retry.Operator, retry.Reason = "ana", "again"
			ts.Step(t, key, retry, now)
		}
	}
	inst, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(inst.Snapshot.Attempts); got != statemodel.MaxInlineAttempts || inst.Snapshot.Attempt != total {
		t.Fatalf("the instance holds %d records at attempt %d, want %d at %d", got, inst.Snapshot.Attempt, statemodel.MaxInlineAttempts, total)
	}
	// The item stops growing once it holds MaxInlineAttempts records (the
	// recent event ids, a bounded list too, still differ a little).
	if final := size(); final > sizeAtLimit+2048 {
		t.Fatalf("the instance item grew from %d bytes at %d attempts to %d at %d", sizeAtLimit, statemodel.MaxInlineAttempts, final, total)
	}
	t.Logf("instance item: %d bytes with %d attempts of 2 KiB output_ref each", size(), total)

	view, err := ts.ReadRun(ctx, key.Run)
	if err != nil {
		t.Fatal(err)
	}
	atts := view.Tasks[0].Attempts
	if len(atts) != total {
		t.Fatalf("%d attempt items, want %d", len(atts), total)
	}
	for i, a := range atts {
		if a.N != i+1 || a.Outcome != statemodel.OutcomeFailed || a.OutputRef != ref || a.TokenHash != fmt.Sprintf("hash-%d", i+1) {
			t.Fatalf("attempt item %d: n %d, outcome %s, output_ref %d bytes, token hash %q", i+1, a.N, a.Outcome, len(a.OutputRef), a.TokenHash)
		}
	}
	late := ledgertest.Ev(statemodel.EvSucceeded, 1)
	if res, err := ts.Harness.Store.Transition(ctx, key, late, now, p); err != nil || res.Outcome != statemodel.Stale {
		t.Fatalf("attempt 1's late success: %s, %v", res.Outcome, err)
	}
	a1, err := ts.GetAttempt(ctx, key, 1)
	if err != nil || len(a1.Late) != 1 || a1.Late[0].EventID != late.ID || a1.TokenHash != "hash-1" {
		t.Fatalf("attempt 1: %+v, %v", a1, err)
	}
	if _, err := ts.GetAttempt(ctx, key, total+1); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("attempt %d: %v, want ErrNotFound", total+1, err)
	}
}
