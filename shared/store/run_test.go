package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// TestDueTimers: with 1,000 finished instances and 10 due ones spread over
// shards, the due query over all shards returns exactly the 10, and
// finished items carry no timer attribute.
func TestDueTimers(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	now := ts.clock.Now()

	// 1,000 instances over 21 runs, each skipped (terminal), each run then
	// derived SUCCEEDED, which removes the run's backstop timer too.
	const finished = 1000
	var keys []store.InstanceKey
	var runs []store.RunView
	for made := 0; made < finished; {
		n := min(store.MaxTasksPerRun, finished-made)
		tasks := make([]string, n)
		for i := range tasks {
			tasks[i] = fmt.Sprintf("t%03d", i)
		}
		v := ts.mustCreate(t, newRun("done", tasks...))
		runs = append(runs, v)
		for _, task := range v.Tasks {
			keys = append(keys, task.Instance.Key)
		}
		made += n
	}
	parallel(t, 8, len(keys), func(i int) error {
		_, err := ts.Transition(ctx, keys[i], ev(statemodel.EvDepsSkipped, 0), now, policy())
		return err
	})
	for _, v := range runs {
		fresh, err := ts.ReadRun(ctx, v.Run.ID)
		if err != nil {
			t.Fatal(err)
		}
		d := statemodel.DeriveRunState(fresh.Nodes())
		if _, err := ts.UpdateRunState(ctx, fresh.Run, store.RunUpdate{
			ExecutionState: d.State, PublicationState: statemodel.DerivePublication(fresh.Nodes()),
		}); err != nil || d.State != statemodel.RunSucceeded {
			t.Fatalf("finish run %s (%s): %v", v.Run.ID, d.State, err)
		}
	}

	// 10 live instances whose dependency backstop (CREATED + 1 min) will be
	// due, and 5 whose backstop is an hour away.
	dueTasks := make([]string, 10)
	for i := range dueTasks {
		dueTasks[i] = fmt.Sprintf("due%02d", i)
	}
	due := ts.mustCreate(t, newRun("live", dueTasks...))
	later := newRun("live", "later0", "later1", "later2", "later3", "later4")
	for i := range later.Tasks {
		later.Tasks[i].Policy.DepsRecheck = time.Hour
	}
	ts.mustCreate(t, later)

	at := now.Add(2 * time.Minute) // past the 1-min backstops, before the 5-min run backstops
	var got []store.DueTimer
	shards := map[int]bool{}
	for shard := range tableschema.TimerShards {
		token := ""
		for {
			page, next, err := ts.ListDueTimers(ctx, shard, at, 3, token)
			if err != nil {
				t.Fatalf("shard %d: %v", shard, err)
			}
			for _, d := range page {
				shards[shard] = true
				if d.At.After(at) {
					t.Errorf("timer %+v listed before its time", d)
				}
			}
			got = append(got, page...)
			if next == "" {
				break
			}
			token = next
		}
	}
	var gotTasks []string
	for _, d := range got {
		if d.Item != store.TimerOfInstance || d.Run != due.Run.ID || d.Kind != string(statemodel.TimerDepsRecheck) || d.Job != "live" {
			t.Errorf("unexpected due timer %+v", d)
		}
		gotTasks = append(gotTasks, d.Task)
	}
	slices.Sort(gotTasks)
	if !slices.Equal(gotTasks, dueTasks) {
		t.Fatalf("due timers %v, want exactly %v", gotTasks, dueTasks)
	}
	if len(shards) < 2 {
		t.Fatalf("the 10 due timers sit in %d shard(s); they should spread", len(shards))
	}

	// Finished items carry no timer attribute at all.
	parallel(t, 8, len(keys), func(i int) error {
		it := getItem(t, ts.table, "RUN#"+keys[i].Run, "TASK#"+keys[i].Task)
		for _, a := range []string{tableschema.TimerShard, tableschema.TimerAt, "timer_kind"} {
			if _, ok := it[a]; ok {
				return fmt.Errorf("finished instance %s still has %s", keys[i], a)
			}
		}
		return nil
	})
	for _, v := range runs {
		it := getItem(t, ts.table, "RUN#"+v.Run.ID, "RUN")
		if _, ok := it[tableschema.TimerAt]; ok {
			t.Fatalf("finished run %s still has a timer", v.Run.ID)
		}
	}
}

// parallel runs fn(0..n-1) on workers goroutines and fails on the first
// error.
func parallel(t testing.TB, workers, n int, fn func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// TestSlotClaimRace: concurrent CreateRun calls for the same slot yield
// exactly one run; the others learn which run holds the slot.
func TestSlotClaimRace(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	for round := range 5 {
		slot := t0.Add(time.Duration(round) * time.Hour)
		type attempt struct {
			run string
			err error
		}
		got := race(8, func(int) attempt {
			nr := newRun("cron", "extract", "load")
			nr.LogicalTime, nr.ClaimSlot = slot, true
			_, err := ts.CreateRun(ctx, nr, ts.clock.Now())
			return attempt{nr.ID, err}
		})
		var winner string
		created := 0
		for _, a := range got {
			if a.err == nil {
				created++
				winner = a.run
			}
		}
		if created != 1 {
			t.Fatalf("round %d: %d runs for one slot", round, created)
		}
		for i, a := range got {
			if a.err == nil {
				continue
			}
			var ex *store.ExistingRunError
			if !errors.Is(a.err, store.ErrSlotTaken) || !errors.As(a.err, &ex) || ex.RunID != winner {
				t.Fatalf("round %d caller %d: %v; want ErrSlotTaken naming %s", round, i, a.err, winner)
			}
			if _, err := ts.GetRun(ctx, a.run); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("round %d: losing run %s exists (%v)", round, a.run, err)
			}
		}
	}
	runs, _, err := ts.ListRuns(ctx, store.RunFilter{Job: "cron"})
	if err != nil || len(runs) != 5 {
		t.Fatalf("job has %d runs (%v), want 5", len(runs), err)
	}
}

// TestIdempotencyKey: the same key answers with the same run, another body
// is a mismatch, and an expired key is free again.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	first := newRun("idem", "main")
	first.Idempotency = &store.Idempotency{Key: "k-1", BodyHash: "h1"}
	ts.mustCreate(t, first)

	again := newRun("idem", "main")
	again.Idempotency = &store.Idempotency{Key: "k-1", BodyHash: "h1"}
	_, err := ts.CreateRun(ctx, again, ts.clock.Now())
	var ex *store.ExistingRunError
	if !errors.Is(err, store.ErrIdempotentReplay) || !errors.As(err, &ex) || ex.RunID != first.ID {
		t.Fatalf("same key, same body: %v; want replay of %s", err, first.ID)
	}
	other := newRun("idem", "main")
	other.Idempotency = &store.Idempotency{Key: "k-1", BodyHash: "h2"}
	if _, err := ts.CreateRun(ctx, other, ts.clock.Now()); !errors.Is(err, store.ErrIdempotencyMismatch) {
		t.Fatalf("same key, other body: %v; want mismatch", err)
	}
	ts.clock.Advance(store.IdempotencyTTL + time.Second)
	later := newRun("idem", "main")
	later.Idempotency = &store.Idempotency{Key: "k-1", BodyHash: "h2"}
	if _, err := ts.CreateRun(ctx, later, ts.clock.Now()); err != nil {
		t.Fatalf("expired key: %v", err)
	}
}

// TestRuns: reading, listing and deriving runs.
func TestRuns(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	nr := newRun("wf", "extract", "load", "publish")
	nr.Tasks[1].DependsOn = []string{"extract"}
	nr.Tasks[2].DependsOn = []string{"load"}
	nr.Tasks[2].Publish = true
	v := ts.mustCreate(t, nr)
	if v.Run.ExecutionState != statemodel.RunQueued || v.Run.PublicationState != statemodel.PublicationPending || v.Run.Version != 1 {
		t.Fatalf("new run %+v", v.Run)
	}
	if _, err := ts.CreateRun(ctx, nr, t0); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("same run id again: %v", err)
	}
	other := ts.mustCreate(t, newRun("other", "main"))

	read, err := ts.ReadRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(read.Tasks) != 3 || read.Run.ID != v.Run.ID || string(read.Run.Params) != `{"p":1}` || !read.Run.LogicalTime.Equal(t0) {
		t.Fatalf("read run %+v with %d tasks", read.Run, len(read.Tasks))
	}
	for _, task := range read.Tasks {
		if task.Instance.Snapshot.State != statemodel.StateCreated || task.Instance.Pool != "default" || string(task.Instance.Payload) != `{"x":1}` ||
			task.Instance.Policy.Timeouts != policy().Timeouts || task.Instance.Policy.Retry != policy().Retry {
			t.Fatalf("instance %+v", task.Instance)
		}
	}
	if read.Tasks[1].Instance.Key.Task != "load" || !slices.Equal(read.Tasks[1].Instance.DependsOn, []string{"extract"}) || !read.Tasks[2].Instance.Publish {
		t.Fatalf("dag fields lost: %+v", read.Tasks)
	}
	if _, err := ts.ReadRun(ctx, "absent"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("read of a missing run: %v", err)
	}

	// Listings: global newest first, per job, by status.
	all, _, err := ts.ListRuns(ctx, store.RunFilter{})
	if err != nil || len(all) != 2 || all[0].ID != other.Run.ID || all[1].ID != v.Run.ID {
		t.Fatalf("global listing %v (%v), want newest first", ids(all), err)
	}
	page, next, err := ts.ListRuns(ctx, store.RunFilter{Limit: 1})
	if err != nil || len(page) != 1 || next == "" {
		t.Fatalf("first page %v next %q (%v)", ids(page), next, err)
	}
	page, _, err = ts.ListRuns(ctx, store.RunFilter{Limit: 1, Token: next})
	if err != nil || len(page) != 1 || page[0].ID != v.Run.ID {
		t.Fatalf("second page %v (%v)", ids(page), err)
	}
	if _, _, err := ts.ListRuns(ctx, store.RunFilter{Job: "wf", Token: next}); !errors.Is(err, store.ErrInvalidToken) {
		t.Fatalf("a global token on a job listing: %v, want invalid token", err)
	}
	byJob, _, err := ts.ListRuns(ctx, store.RunFilter{Job: "wf"})
	if err != nil || len(byJob) != 1 || byJob[0].ID != v.Run.ID || byJob[0].ExecutionState != statemodel.RunQueued {
		t.Fatalf("job listing %v (%v)", ids(byJob), err)
	}

	// Derived state with a version compare-and-set.
	unfinished, err := ts.HasUnfinishedRuns(ctx, "wf")
	if err != nil || !unfinished {
		t.Fatalf("unfinished runs of wf: %t %v", unfinished, err)
	}
	running, err := ts.UpdateRunState(ctx, read.Run, store.RunUpdate{ExecutionState: statemodel.RunRunning, PublicationState: statemodel.PublicationPending})
	if err != nil || running.Version != 2 || running.Status != statemodel.StatusRunning {
		t.Fatalf("to RUNNING: %+v %v", running, err)
	}
	// A second finisher that read version 1 cannot regress it.
	if _, err := ts.UpdateRunState(ctx, read.Run, store.RunUpdate{ExecutionState: statemodel.RunQueued, PublicationState: statemodel.PublicationPending}); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("stale run update: %v, want version conflict", err)
	}
	end := ts.clock.Advance(time.Minute)
	done, err := ts.UpdateRunState(ctx, running, store.RunUpdate{ExecutionState: statemodel.RunFailed, PublicationState: statemodel.PublicationFailed})
	if err != nil || !done.EndedAt.Equal(end) || !done.TimerAt.IsZero() {
		t.Fatalf("to FAILED: %+v %v", done, err)
	}
	stored, err := ts.GetRun(ctx, v.Run.ID)
	if err != nil || stored.Version != 3 || stored.ExecutionState != statemodel.RunFailed || !stored.TimerAt.IsZero() || !stored.EndedAt.Equal(end) {
		t.Fatalf("stored run %+v %v", stored, err)
	}
	unfinished, err = ts.HasUnfinishedRuns(ctx, "wf")
	if err != nil || unfinished {
		t.Fatalf("unfinished runs of wf after it failed: %t %v", unfinished, err)
	}
	failed, _, err := ts.ListRuns(ctx, store.RunFilter{Job: "wf", Status: statemodel.StatusFailed})
	if err != nil || len(failed) != 1 {
		t.Fatalf("failed runs of wf: %v %v", ids(failed), err)
	}
	failed, _, err = ts.ListRuns(ctx, store.RunFilter{Status: statemodel.StatusFailed})
	if err != nil || len(failed) != 1 || failed[0].ID != v.Run.ID {
		t.Fatalf("failed runs: %v %v", ids(failed), err)
	}
	missing := read.Run
	missing.ID = "gone"
	if _, err := ts.UpdateRunState(ctx, missing, store.RunUpdate{ExecutionState: statemodel.RunRunning, PublicationState: statemodel.PublicationPending}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a missing run: %v", err)
	}
}

func ids(runs []store.Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

// TestJobs: create, read, list, CAS update, pause, next fire, delete.
func TestJobs(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	fire := t0.Add(time.Hour)
	j, err := ts.CreateJob(ctx, store.Job{Name: "nightly", Spec: []byte(`{"cron":"0 2 * * *"}`), NextFireAt: fire})
	if err != nil || j.Version != 1 || !j.CreatedAt.Equal(t0) {
		t.Fatalf("create: %+v %v", j, err)
	}
	if _, err := ts.CreateJob(ctx, store.Job{Name: "nightly"}); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("create twice: %v", err)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if _, err := ts.CreateJob(ctx, store.Job{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	token := ""
	for {
		page, next, err := ts.ListJobs(ctx, 2, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			names = append(names, j.Name)
		}
		if next == "" {
			break
		}
		token = next
	}
	if !slices.Equal(names, []string{"a", "b", "c", "d", "nightly"}) {
		t.Fatalf("listed %v", names)
	}

	timer := func() (string, bool) {
		it := getItem(t, ts.table, "JOB#nightly", "JOB")
		v, ok := it[tableschema.TimerAt]
		if !ok {
			return "", false
		}
		return fmt.Sprint(v), true
	}
	if _, ok := timer(); !ok {
		t.Fatal("a job with a next fire has no timer")
	}
	due, _, err := ts.ListDueTimers(ctx, shardOf(t, ts, fire), fire, 0, "")
	if err != nil || len(due) != 1 || due[0].Item != store.TimerOfJob || due[0].Job != "nightly" || !due[0].At.Equal(fire) {
		t.Fatalf("job timer: %+v %v", due, err)
	}

	upd, err := ts.UpdateJob(ctx, store.Job{Name: "nightly", Spec: []byte(`{"cron":"0 3 * * *"}`), NextFireAt: fire.Add(time.Hour)}, 1)
	if err != nil || upd.Version != 2 || string(upd.Spec) != `{"cron":"0 3 * * *"}` {
		t.Fatalf("update: %+v %v", upd, err)
	}
	if _, err := ts.UpdateJob(ctx, store.Job{Name: "nightly"}, 1); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("update from version 1 again: %v", err)
	}
	if _, err := ts.UpdateJob(ctx, store.Job{Name: "nope"}, 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a missing job: %v", err)
	}
	paused, err := ts.SetJobPaused(ctx, "nightly", true)
	if err != nil || !paused.Paused || paused.Version != 3 {
		t.Fatalf("pause: %+v %v", paused, err)
	}
	if _, ok := timer(); ok {
		t.Fatal("a paused job keeps its timer")
	}
	// The ticker's view of the fire time: it advances only from the
	// stored one, and a paused job stays out of the index.
	if _, err := ts.SetNextFire(ctx, "nightly", fire, fire.Add(24*time.Hour)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("advance from a fire time that is not stored: %v", err)
	}
	moved, err := ts.SetNextFire(ctx, "nightly", fire.Add(time.Hour), fire.Add(25*time.Hour))
	if err != nil || !moved.NextFireAt.Equal(fire.Add(25*time.Hour)) {
		t.Fatalf("advance: %+v %v", moved, err)
	}
	if _, ok := timer(); ok {
		t.Fatal("advancing a paused job's fire set a timer")
	}
	resumed, err := ts.SetJobPaused(ctx, "nightly", false)
	if err != nil || resumed.Paused || !resumed.NextFireAt.Equal(fire.Add(25*time.Hour)) {
		t.Fatalf("resume: %+v %v", resumed, err)
	}
	if at, ok := timer(); !ok || !strings.Contains(at, "2031-03-15T11:26:53.589793238Z") {
		t.Fatalf("resumed job's timer %q, want its next fire", at)
	}
	if err := ts.DeleteJob(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.GetJob(ctx, "nightly"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := ts.DeleteJob(ctx, "nightly"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

// shardOf finds the shard a timer at `at` was written to, by querying every
// shard (the hash is the store's business).
func shardOf(t *testing.T, ts *testStore, at time.Time) int {
	t.Helper()
	for shard := range tableschema.TimerShards {
		due, _, err := ts.ListDueTimers(context.Background(), shard, at, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(due) > 0 {
			return shard
		}
	}
	t.Fatal("no shard holds the timer")
	return -1
}
