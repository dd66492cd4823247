package scheduler_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// groupCounts reads a limiter group and answers its shards and counts
// summed, failing when the shards hold more active runs than the limit.
func (f *fixture) groupCounts(t *testing.T, name string) (shards, limit, active, waiting int) {
	t.Helper()
	g, err := ledger.Group(context.Background(), f.st, name)
	if err != nil {
		t.Fatal(err)
	}
	limit, active, waiting = ledger.GroupCounts(g)
	if active > limit {
		t.Fatalf("group %s: %d active over its limit %d", name, active, limit)
	}
	return len(g), limit, active, waiting
}

// setConcurrency updates job name's concurrency limit.
func (f *fixture) setConcurrency(t *testing.T, name string, limit int) {
	t.Helper()
	ctx := context.Background()
	j, err := jobspec.Parse([]byte(fmt.Sprintf(`{"name":%q,"concurrency":{"limit":%d}}`, name, limit)), f.svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	cur, err := f.st.GetJob(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Jobs().UpdateJob(ctx, j, cur.Version); err != nil {
		t.Fatal(err)
	}
}

// A job whose concurrency limit (2,500) exceeds one limiter item's is a
// group of three shard limiters: its runs are admitted across the shards,
// never more than the limit at once; a run that ends hands its room to a
// run waiting in another shard (the borrow); the answers name the group;
// a raised limit re-shares the group over four shards and admits the
// runs waiting; every run ends and the group ends empty.
func TestFlowGroupLimitShardsAndHandsOn(t *testing.T) {
	f := newFixture(t)
	const limit, extra = 2500, 10
	f.createJob(t, fmt.Sprintf(`{"name":"wide","concurrency":{"limit":%d}}`, limit))
	var runs []string
	for range limit + extra {
		runs = append(runs, f.trigger(t, "wide", f.clock.Now()).Run.ID)
	}
	running := map[string]protocol.Envelope{}
	receive := func(want int) {
		t.Helper()
		got := 0
		for _, env := range f.drainEnvelopes(t) {
			if _, dup := running[env.Run]; dup {
				continue
			}
			running[env.Run] = env
			got++
		}
		if got != want {
			t.Fatalf("%d runs dispatched, want %d", got, want)
		}
	}
	receive(limit)
	if n, l, a, w := f.groupCounts(t, "wide/"); n != 3 || l != limit || a != limit || w != extra {
		t.Fatalf("group: %d shards, limit %d, %d active, %d waiting; want 3, %d, %d, %d", n, l, a, w, limit, limit, extra)
	}
	var waiting []string
	for _, id := range runs {
		if _, ok := running[id]; !ok {
			waiting = append(waiting, id)
		}
	}
	if adm := f.admissionOf(t, waiting[0]); adm == nil || adm.State != protocol.AdmissionWaiting || adm.Limiter != "wide/" || adm.Reason != "concurrency" {
		t.Fatalf("waiting run's admission %+v; want waiting in the group wide/", adm)
	}
	if adm := f.admissionOf(t, runs[0]); adm == nil || adm.State != protocol.AdmissionAdmitted || adm.Limiter != "wide/" {
		t.Fatalf("admitted run's admission %+v; want admitted in the group wide/", adm)
	}

	// Runs of every shard end, one by one: each hands its room on, to a
	// run waiting in its own shard or, borrowed, in another.
	ended := 0
	for _, id := range runs[:3] {
		f.finish(t, running[id], protocol.OutcomeSucceeded)
		delete(running, id)
		ended++
		receive(1)
		if _, _, a, _ := f.groupCounts(t, "wide/"); a != limit {
			t.Fatalf("after %d ended, %d active; want %d", ended, a, limit)
		}
	}

	// A raised limit re-shares the group over four shards and admits the
	// runs still waiting.
	f.setConcurrency(t, "wide", 3005)
	receive(extra - 3)
	if n, l, a, w := f.groupCounts(t, "wide/"); n != 4 || l != 3005 || a != limit+extra-3 || w != 0 {
		t.Fatalf("group after the raise: %d shards, limit %d, %d active, %d waiting; want 4, 3005, %d, 0", n, l, a, w, limit+extra-3)
	}

	for id, env := range running {
		f.finish(t, env, protocol.OutcomeSucceeded)
		delete(running, id)
	}
	receive(0)
	if _, l, a, w := f.groupCounts(t, "wide/"); l != 3005 || a != 0 || w != 0 {
		t.Fatalf("group at the end: limit %d, %d active, %d waiting", l, a, w)
	}
	for _, id := range runs {
		if v := f.readRun(t, id); v.Run.ExecutionState != statemodel.RunSucceeded {
			t.Fatalf("run %s ended %s", id, v.Run.ExecutionState)
		}
	}
}
