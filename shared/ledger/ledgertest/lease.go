package ledgertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
)

var leaseCases = []Case{
	{"WorkerLeaseOrder", workerLeaseOrder},
	{"WorkerLeaseUnorderedBoots", workerLeaseUnorderedBoots},
	{"WorkerLeaseSeqJump", workerLeaseSeqJump},
}

// workerLeaseOrder: leases of one worker name are ordered by (boot start
// time, seq), whatever order SQS delivers them in: an old boot's final
// lease that arrives after the new boot's first one never replaces it.
func workerLeaseOrder(t *testing.T, h *Harness) {
	ctx := context.Background()
	if got, err := h.Store.GetWorkerLease(ctx, "w1"); err != nil || got.BootID != "" || got.Name != "w1" {
		t.Fatalf("a worker never seen: %+v %v, want the zero lease", got, err)
	}
	oldStart, newStart := T0, T0.Add(5*time.Second)
	lease := func(boot string, started time.Time, seq int64) ledger.WorkerLease {
		return ledger.WorkerLease{Name: "w1", BootID: boot, BootStartedAt: started, Seq: seq,
			ExpiresAt: T0.Add(time.Minute), EndsAt: T0.Add(time.Minute + time.Duration(seq)*time.Second), UpdatedAt: T0,
			Running: []ledger.AttemptKey{{Run: "r", Task: "t", Attempt: int(seq)}}}
	}
	steps := []struct {
		name     string
		put      ledger.WorkerLease
		wantBoot string
		wantSeq  int64
	}{
		{"first lease of the old boot", lease("old", oldStart, 1), "old", 1},
		{"a newer lease of the same boot", lease("old", oldStart, 3), "old", 3},
		{"an older lease of the same boot arrives late", lease("old", oldStart, 2), "old", 3},
		{"the new boot's first lease", lease("new", newStart, 1), "new", 1},
		// The old boot's final lease (seq 4, its highest) arrives last.
		{"the old boot's final lease arrives late", lease("old", oldStart, 4), "new", 1},
		{"the new boot renews", lease("new", newStart, 2), "new", 2},
		{"a boot whose start is unknown", lease("legacy", time.Time{}, 9), "new", 2},
	}
	for _, st := range steps {
		if err := h.Store.PutWorkerLease(ctx, st.put); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got, err := h.Store.GetWorkerLease(ctx, "w1")
		if err != nil {
			t.Fatal(err)
		}
		if got.BootID != st.wantBoot || got.Seq != st.wantSeq {
			t.Fatalf("%s: stored lease of boot %s seq %d, want boot %s seq %d", st.name, got.BootID, got.Seq, st.wantBoot, st.wantSeq)
		}
	}
	got, err := h.Store.GetWorkerLease(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if !got.BootStartedAt.Equal(newStart) || !got.EndsAt.Equal(T0.Add(time.Minute+2*time.Second)) || !got.ExpiresAt.Equal(T0.Add(time.Minute)) ||
		!got.UpdatedAt.Equal(T0) || len(got.Running) != 1 || got.Running[0] != (ledger.AttemptKey{Run: "r", Task: "t", Attempt: 2}) {
		t.Fatalf("stored lease %+v: a field was lost", got)
	}
	if err := h.Store.PutWorkerLease(ctx, ledger.WorkerLease{Name: "a#b", BootID: "x"}); !errors.Is(err, ledger.ErrInvalidKey) {
		t.Fatalf("a worker name with the key separator: %v, want invalid key", err)
	}
}

// workerLeaseUnorderedBoots: two boots whose starts cannot be told apart
// replace each other.
func workerLeaseUnorderedBoots(t *testing.T, h *Harness) {
	ctx := context.Background()
	for _, boot := range []string{"a", "b", "a"} {
		if err := h.Store.PutWorkerLease(ctx, ledger.WorkerLease{Name: "w2", BootID: boot, Seq: 1, ExpiresAt: T0}); err != nil {
			t.Fatal(err)
		}
		got, err := h.Store.GetWorkerLease(ctx, "w2")
		if err != nil {
			t.Fatal(err)
		}
		if got.BootID != boot {
			t.Fatalf("stored boot %s after a lease of boot %s", got.BootID, boot)
		}
	}
}

// workerLeaseSeqJump: within one boot, a lease whose seq runs more than
// ledger.MaxLeaseSeqJump past the stored one is dropped, so it cannot
// lock out the boot's later leases; a jump of exactly the bound is taken.
func workerLeaseSeqJump(t *testing.T, h *Harness) {
	ctx := context.Background()
	lease := func(seq int64) ledger.WorkerLease {
		return ledger.WorkerLease{Name: "w3", BootID: "b", BootStartedAt: T0, Seq: seq, ExpiresAt: T0.Add(time.Minute)}
	}
	steps := []struct {
		name    string
		seq     int64
		wantSeq int64
	}{
		{"the boot's first lease", 5, 5},
		{"a seq far beyond", 1 << 62, 5},
		{"one past the bound", 5 + ledger.MaxLeaseSeqJump + 1, 5},
		{"the boot's next lease", 6, 6},
		{"exactly the bound", 6 + ledger.MaxLeaseSeqJump, 6 + ledger.MaxLeaseSeqJump},
	}
	for _, st := range steps {
		if err := h.Store.PutWorkerLease(ctx, lease(st.seq)); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got, err := h.Store.GetWorkerLease(ctx, "w3")
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != st.wantSeq {
			t.Fatalf("%s (seq %d): stored seq %d, want %d", st.name, st.seq, got.Seq, st.wantSeq)
		}
	}
}
