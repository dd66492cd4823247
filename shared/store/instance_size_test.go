package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// realistic gives an event the ids a deployment's have: a worker's ULID
// event id, the claim's token hash (64 hex digits), an SQS message id.
func realistic(e statemodel.Event) statemodel.Event {
	e.ID = fmt.Sprintf("01JF%022d", time.Now().UnixNano()%1e15)
	if e.TokenHash != "" {
		e.TokenHash = strings.Repeat("7f", 32)
		e.ExecutorID = "3b1f6c2e-9d4a-4f8e-a6b1-2c7d9e0f1a2b"
	}
	if e.WorkerID != "" {
		e.WorkerID = "ip-10-0-12-34@4711"
	}
	return e
}

// TestInstanceItemUnderOneKB: a task instance's item stays within 1 KB
// before and after every step of a single-task run and of a run retried
// once, so each of its writes costs one write unit (store.WriteUnits).
func TestInstanceItemUnderOneKB(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		steps func(now time.Time, retryAt func() time.Time) []func() (statemodel.Event, time.Time)
	}{
		{"single task", func(now time.Time, _ func() time.Time) []func() (statemodel.Event, time.Time) {
			return []func() (statemodel.Event, time.Time){
				func() (statemodel.Event, time.Time) { return ledgertest.Ev(statemodel.EvDepsMet, 0), now },
				func() (statemodel.Event, time.Time) { return ledgertest.Dispatch(1), now },
				func() (statemodel.Event, time.Time) { return ledgertest.Started(1, "w"), now },
				func() (statemodel.Event, time.Time) { return ledgertest.Succeeded(1), now.Add(time.Second) },
			}
		}},
		{"retried once", func(now time.Time, retryAt func() time.Time) []func() (statemodel.Event, time.Time) {
			return []func() (statemodel.Event, time.Time){
				func() (statemodel.Event, time.Time) { return ledgertest.Ev(statemodel.EvDepsMet, 0), now },
				func() (statemodel.Event, time.Time) { return ledgertest.Dispatch(1), now },
				func() (statemodel.Event, time.Time) { return ledgertest.Started(1, "w"), now },
				func() (statemodel.Event, time.Time) {
					f := ledgertest.Ev(statemodel.EvFailed, 1)
					exit := 1
					f.ExitCode, f.ErrorCategory = &exit, "exit_status"
					return f, now.Add(time.Second)
				},
				func() (statemodel.Event, time.Time) { return ledgertest.Ev(statemodel.EvRetryDue, 0), retryAt() },
				func() (statemodel.Event, time.Time) { return ledgertest.Dispatch(2), retryAt() },
				func() (statemodel.Event, time.Time) { return ledgertest.Started(2, "w"), retryAt() },
				func() (statemodel.Event, time.Time) { return ledgertest.Succeeded(2), retryAt().Add(time.Second) },
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := newStore(t)
			v := ts.MustCreate(t, ledgertest.NewRun("lean", "main"))
			key := v.Tasks[0].Instance.Key
			size := func() int {
				return store.ItemSize(getItem(t, ts.table, "RUN#"+key.Run, "TASK#"+key.Task))
			}
			var retry time.Time
			retryAt := func() time.Time { return retry }
			sizes := []int{size()}
			for i, step := range tc.steps(ts.Clock.Now(), retryAt) {
				e, at := step()
				ts.Step(t, key, realistic(e), at)
				if inst := ts.MustInstance(t, key); !inst.Snapshot.RetryAt.IsZero() {
					retry = inst.Snapshot.RetryAt
				}
				sizes = append(sizes, size())
				if sizes[i+1] > 1024 {
					t.Fatalf("after step %d (%s) the instance item is %d bytes: %v", i+1, e.Type, sizes[i+1], sizes)
				}
			}
			if sizes[0] > 1024 {
				t.Fatalf("the created instance item is %d bytes", sizes[0])
			}
			inst := ts.MustInstance(t, key)
			if inst.Snapshot.State != statemodel.StateSucceeded {
				t.Fatalf("ended %s", inst.Snapshot.State)
			}
			hist := ts.FullHistory(t, key)
			if got, err := statemodel.Replay(hist); err != nil || !got.EqualState(inst.Snapshot) {
				t.Fatalf("replay of %d records: %v, equal %t", len(hist), err, got.EqualState(inst.Snapshot))
			}
			for n := 1; n <= inst.Snapshot.Attempt; n++ {
				a, err := ts.GetAttempt(t.Context(), key, n)
				if err != nil || a.N != n || a.WorkerID == "" {
					t.Fatalf("attempt %d: %+v, %v", n, a, err)
				}
			}
			t.Logf("instance item sizes: %v", sizes)
		})
	}
}

var _ = ledger.MaxItemSize
