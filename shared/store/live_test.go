package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/emulator/emulatortest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// seedFinishedPointers writes n run pointers of job that look like the
// pointer of a finished run (a real one, cloned under new run ids) with
// BatchWriteItem: the history a job accumulates, cheaply.
func seedFinishedPointers(t *testing.T, ts *testStore, job string, n int) {
	t.Helper()
	ctx := context.Background()
	v := ts.mustCreate(t, newRun(job, "a"))
	if _, err := ts.UpdateRunState(ctx, v.Run, store.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired}); err != nil {
		t.Fatal(err)
	}
	tmpl := getItem(t, ts.table, "JOB#"+job, "RUN#"+v.Run.ID)
	var batch []types.WriteRequest
	flush := func() {
		if _, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{ts.table: batch}}); err != nil {
			t.Fatal(err)
		}
		batch = nil
	}
	for i := range n {
		id := fmt.Sprintf("01SEED%020d", i)
		it := map[string]types.AttributeValue{}
		for k, a := range tmpl {
			if s, ok := a.(*types.AttributeValueMemberS); ok {
				a = &types.AttributeValueMemberS{Value: strings.ReplaceAll(s.Value, v.Run.ID, id)}
			}
			it[k] = a
		}
		batch = append(batch, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
		if len(batch) == 25 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
}

func unfinishedIDs(t *testing.T, st *store.Store, job string) []string {
	t.Helper()
	runs, err := st.ListUnfinishedRuns(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return out
}

// The live index lists exactly the unfinished runs of a job: a run enters
// it at creation (no action beyond the pointer CreateRun writes anyway) and
// leaves it when UpdateRunState stores a terminal state.
func TestLiveIndexFollowsUnfinishedRuns(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	a := ts.mustCreate(t, newRun("wf", "x"))
	b := ts.mustCreate(t, newRun("wf", "x"))
	ts.mustCreate(t, newRun("other", "x"))
	if got := unfinishedIDs(t, ts.Store, "wf"); !slices.Equal(got, []string{a.Run.ID, b.Run.ID}) {
		t.Fatalf("unfinished runs of wf: %v, want %s and %s", got, a.Run.ID, b.Run.ID)
	}
	running, err := ts.UpdateRunState(ctx, a.Run, store.RunUpdate{ExecutionState: statemodel.RunRunning, PublicationState: statemodel.PublicationNotRequired})
	if err != nil {
		t.Fatal(err)
	}
	if got := unfinishedIDs(t, ts.Store, "wf"); len(got) != 2 {
		t.Fatalf("a RUNNING run left the live index: %v", got)
	}
	if _, err := ts.UpdateRunState(ctx, running, store.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired}); err != nil {
		t.Fatal(err)
	}
	if got := unfinishedIDs(t, ts.Store, "wf"); !slices.Equal(got, []string{b.Run.ID}) {
		t.Fatalf("after %s ended: %v, want only %s", a.Run.ID, got, b.Run.ID)
	}
	if busy, err := ts.HasUnfinishedRuns(ctx, "wf"); err != nil || !busy {
		t.Fatalf("HasUnfinishedRuns(wf) = %t, %v with %s unfinished", busy, err, b.Run.ID)
	}
	if _, err := ts.UpdateRunState(ctx, b.Run, store.RunUpdate{ExecutionState: statemodel.RunCancelled, PublicationState: statemodel.PublicationNotRequired}); err != nil {
		t.Fatal(err)
	}
	if got := unfinishedIDs(t, ts.Store, "wf"); len(got) != 0 {
		t.Fatalf("unfinished runs of wf after both ended: %v", got)
	}
	if busy, err := ts.HasUnfinishedRuns(ctx, "wf"); err != nil || busy {
		t.Fatalf("HasUnfinishedRuns(wf) = %t, %v after both ended", busy, err)
	}
}

// What the unfinished runs of a job cost to find does not grow with the
// runs it finished: 600 finished runs of the job, one unfinished, and both
// reads examine a handful of items (they read every pointer before).
func TestUnfinishedRunsCostFollowsLiveWork(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	const finished = 600
	seedFinishedPointers(t, ts, "wf", finished)
	var c emulatortest.ReadCounter
	counted := store.New(env.DynamoDBClient(c.Option), ts.table, store.WithClock(ts.clock.Now))

	if busy, err := counted.HasUnfinishedRuns(ctx, "wf"); err != nil || busy {
		t.Fatalf("HasUnfinishedRuns with only finished runs: %t %v", busy, err)
	}
	if n := c.Items(); n > 20 {
		t.Fatalf("HasUnfinishedRuns examined %d items with %d finished runs and none unfinished, want at most 20", n, finished)
	}
	c.Reset()
	if got := unfinishedIDs(t, counted, "wf"); len(got) != 0 {
		t.Fatalf("unfinished runs: %v", got)
	}
	live := ts.mustCreate(t, newRun("wf", "x"))
	// Old runs, newer than the live one: the newest pointers do not find
	// it, the live index does.
	seedFinishedPointers(t, ts, "wf", 30)
	c.Reset()
	if busy, err := counted.HasUnfinishedRuns(ctx, "wf"); err != nil || !busy {
		t.Fatalf("HasUnfinishedRuns with %s unfinished: %t %v", live.Run.ID, busy, err)
	}
	if got := unfinishedIDs(t, counted, "wf"); !slices.Equal(got, []string{live.Run.ID}) {
		t.Fatalf("unfinished runs: %v, want %s", got, live.Run.ID)
	}
	if n := c.Items(); n > 20 {
		t.Fatalf("finding 1 unfinished run among %d examined %d items, want at most 20", finished+31, n)
	}
}

// A job's dependency edges follow its upstream jobs through create, update
// (same transaction as the job) and delete, and ListDependents reads only
// the edges of the job asked about.
func TestDependencyEdges(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	dependents := func(job string) []string {
		t.Helper()
		got, err := ts.ListDependents(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if _, err := ts.CreateJob(ctx, store.Job{Name: "down", Upstream: []string{"up2", "up1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.CreateJob(ctx, store.Job{Name: "side", Upstream: []string{"up1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.CreateJob(ctx, store.Job{Name: "down", Upstream: []string{"up3"}}); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("second create: %v, want already exists", err)
	}
	if got := dependents("up1"); !slices.Equal(got, []string{"down", "side"}) {
		t.Fatalf("dependents of up1: %v", got)
	}
	if got := dependents("up3"); len(got) != 0 {
		t.Fatalf("a refused create left edges: dependents of up3 %v", got)
	}
	j, err := ts.GetJob(ctx, "down")
	if err != nil || !slices.Equal(j.Upstream, []string{"up1", "up2"}) {
		t.Fatalf("stored upstream %v %v", j.Upstream, err)
	}
	if _, err := ts.UpdateJob(ctx, store.Job{Name: "down", Upstream: []string{"up2", "up3"}}, 1); err != nil {
		t.Fatal(err)
	}
	if got := dependents("up1"); !slices.Equal(got, []string{"side"}) {
		t.Fatalf("dependents of up1 after the update: %v", got)
	}
	if got := dependents("up3"); !slices.Equal(got, []string{"down"}) {
		t.Fatalf("dependents of up3 after the update: %v", got)
	}
	if _, err := ts.UpdateJob(ctx, store.Job{Name: "down", Upstream: []string{"up1"}}, 1); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("stale update: %v, want version conflict", err)
	}
	if got := dependents("up1"); !slices.Equal(got, []string{"side"}) {
		t.Fatalf("a refused update moved edges: dependents of up1 %v", got)
	}
	if _, err := ts.SetJobPaused(ctx, "down", true); err != nil {
		t.Fatal(err)
	}
	if err := ts.DeleteJob(ctx, "down"); err != nil {
		t.Fatal(err)
	}
	for _, up := range []string{"up2", "up3"} {
		if got := dependents(up); len(got) != 0 {
			t.Fatalf("dependents of %s after delete: %v", up, got)
		}
	}
	if err := ts.DeleteJob(ctx, "down"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v, want not found", err)
	}
	many := make([]string, store.MaxUpstreamJobs+1)
	for i := range many {
		many[i] = fmt.Sprintf("u%d", i)
	}
	for name, up := range map[string][]string{"too many": many, "itself": {"loop"}, "twice": {"a", "a"}} {
		if _, err := ts.CreateJob(ctx, store.Job{Name: "loop", Upstream: up}); !errors.Is(err, store.ErrInvalidInput) {
			t.Errorf("%s: %v, want invalid input", name, err)
		}
	}
}

// A live run whose derived state did not change gets its backstop moved
// ahead, so the next passes do not list it again; version and states stay.
func TestRearmRunBackstop(t *testing.T) {
	t.Parallel()
	ts := newStore(t, store.WithRunBackstop(5*time.Minute))
	ctx := context.Background()
	v := ts.mustCreate(t, newRun("wf", "x"))
	now := ts.clock.Advance(6 * time.Minute)
	due := func() int {
		n := 0
		for shard := range 16 {
			timers, _, err := ts.ListDueTimers(ctx, shard, now, 0, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range timers {
				if d.Item == store.TimerOfRun && d.Run == v.Run.ID {
					n++
				}
			}
		}
		return n
	}
	if due() != 1 {
		t.Fatal("the run's backstop is not due after 6 minutes")
	}
	run, err := ts.GetRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ts.RearmRunBackstop(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := ts.GetRun(ctx, v.Run.ID)
	if err != nil || !stored.TimerAt.Equal(now.Add(5*time.Minute)) || !got.TimerAt.Equal(stored.TimerAt) ||
		stored.Version != run.Version || stored.ExecutionState != run.ExecutionState {
		t.Fatalf("re-armed run %+v (%v), want timer %s at version %d", stored, err, now.Add(5*time.Minute), run.Version)
	}
	if due() != 0 {
		t.Fatal("the re-armed backstop is still listed as due")
	}
	moved, err := ts.UpdateRunState(ctx, stored, store.RunUpdate{ExecutionState: statemodel.RunRunning, PublicationState: statemodel.PublicationNotRequired})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.RearmRunBackstop(ctx, run); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("re-arm from a stale read: %v, want version conflict", err)
	}
	done, err := ts.UpdateRunState(ctx, moved, store.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.RearmRunBackstop(ctx, done); !errors.Is(err, store.ErrInvalidInput) {
		t.Fatalf("re-arm of a finished run: %v, want invalid input", err)
	}
}
