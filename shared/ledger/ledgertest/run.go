package ledgertest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

var runCases = []Case{
	{"SlotClaimRace", slotClaimRace},
	{"IdempotencyKey", idempotencyKey},
	{"IdempotencyKeyRace", idempotencyKeyRace},
	{"Runs", runs},
	{"LiveIndexFollowsUnfinishedRuns", liveIndex},
	{"RearmRunBackstop", rearmRunBackstop},
	{"ScheduledTasksAndRunStart", scheduledTasksAndRunStart},
	{"RunTrigger", runTrigger},
	{"InstanceSecret", instanceSecret},
}

// runTrigger: a run keeps its trigger, backfill id, priority and trace id
// (none stays none) through every read
// (GetRun, ReadRun, ListRuns, GetInstanceAndRun); a run without a valid
// trigger, a backfill run without its backfill id, or another run with
// one, is refused and writes nothing.
func runTrigger(t *testing.T, h *Harness) {
	ctx := context.Background()
	var made []ledger.NewRun
	for i, tr := range statemodel.AllTriggers() {
		nr := NewRun("trig", "main")
		nr.Trigger = tr
		nr.Priority = i%5 + 1 // and its priority
		if i%2 == 1 {
			nr.TraceID = fmt.Sprintf("4bf92f3577b34da6a3ce929d0e0e47%02x", i)
		}
		if tr == statemodel.TriggerBackfill {
			nr.BackfillID = "01BACKFILL"
		}
		if tr == statemodel.TriggerEvent {
			nr.Event = &protocol.RunEvent{ID: "ev-1", Source: "shop", DetailType: "Order Placed"}
		}
		h.MustCreate(t, nr)
		made = append(made, nr)
	}
	for _, nr := range made {
		check := func(how string, r ledger.Run, err error) {
			t.Helper()
			if err == nil && r.TraceID != nr.TraceID {
				t.Fatalf("%s %s: trace id %q, want %q", how, nr.ID, r.TraceID, nr.TraceID)
			}
			if err != nil || r.Trigger != nr.Trigger || r.BackfillID != nr.BackfillID || r.Priority != nr.Priority {
				t.Fatalf("%s %s: trigger %q backfill %q priority %d (%v); want %q %q %d", how, nr.ID, r.Trigger, r.BackfillID, r.Priority, err, nr.Trigger, nr.BackfillID, nr.Priority)
			}
			if !reflect.DeepEqual(r.Event, nr.Event) {
				t.Fatalf("%s %s: event %+v, want %+v", how, nr.ID, r.Event, nr.Event)
			}
		}
		r, err := h.Store.GetRun(ctx, nr.ID)
		check("GetRun", r, err)
		v, err := h.Store.ReadRun(ctx, nr.ID)
		check("ReadRun", v.Run, err)
		_, r, err = h.Store.GetInstanceAndRun(ctx, ledger.InstanceKey{Run: nr.ID, Task: "main"})
		check("GetInstanceAndRun", r, err)
	}
	runs, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: "trig"})
	if err != nil || len(runs) != len(made) {
		t.Fatalf("ListRuns: %d runs, %v", len(runs), err)
	}
	for _, r := range runs {
		if !r.Trigger.Valid() {
			t.Fatalf("ListRuns: run %s has trigger %q", r.ID, r.Trigger)
		}
	}
	bad := []func(*ledger.NewRun){
		func(nr *ledger.NewRun) { nr.Trigger = "" },
		func(nr *ledger.NewRun) { nr.Trigger = "cron" },
		func(nr *ledger.NewRun) { nr.Trigger = statemodel.TriggerBackfill },
		func(nr *ledger.NewRun) { nr.BackfillID = "01BACKFILL" },
		func(nr *ledger.NewRun) { nr.TraceID = "4BF92F3577B34DA6A3CE929D0E0E4736" },
		func(nr *ledger.NewRun) { nr.TraceID = "00000000000000000000000000000000" },
	}
	for i, mutate := range bad {
		nr := NewRun("trig-bad", "main")
		mutate(&nr)
		if _, err := h.CreateRun(ctx, nr, h.Clock.Now()); !errors.Is(err, ledger.ErrInvalidInput) {
			t.Fatalf("bad trigger #%d: %v, want invalid input", i, err)
		}
		if _, err := h.Store.GetRun(ctx, nr.ID); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("bad trigger #%d wrote run %s (%v)", i, nr.ID, err)
		}
	}
}

// scheduledTasksAndRunStart: a task marked Scheduled is created SCHEDULED
// with its verdict recorded; GetInstanceAndRun reads an instance with its
// run.
func scheduledTasksAndRunStart(t *testing.T, h *Harness) {
	ctx := context.Background()
	nr := NewRun("sched", "root", "leaf")
	nr.Tasks[0].Scheduled = true
	nr.Tasks[1].DependsOn = []string{"root"}
	v := h.MustCreate(t, nr)
	root := ledger.InstanceKey{Run: v.Run.ID, Task: "root"}
	inst, run, err := h.Store.GetInstanceAndRun(ctx, root)
	if err != nil || inst.Snapshot.State != statemodel.StateScheduled || run.ID != v.Run.ID || string(run.Params) != string(nr.Params) {
		t.Fatalf("GetInstanceAndRun: %s, run %q, %v; want SCHEDULED with its run", inst.Snapshot.State, run.ID, err)
	}
	hist := h.FullHistory(t, root)
	if len(hist) != 2 || hist[1].Event != statemodel.EvDepsMet || hist[1].EventID != ledger.DepsEventID(1) {
		t.Fatalf("root's history %+v: want created, deps.met", hist)
	}
	if leaf := h.MustInstance(t, ledger.InstanceKey{Run: v.Run.ID, Task: "leaf"}); leaf.Snapshot.State != statemodel.StateCreated {
		t.Fatalf("leaf is %s, want CREATED", leaf.Snapshot.State)
	}
	if _, _, err := h.Store.GetInstanceAndRun(ctx, ledger.InstanceKey{Run: v.Run.ID, Task: "absent"}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("GetInstanceAndRun of a missing task: %v", err)
	}
	got, err := h.Store.GetRun(ctx, v.Run.ID)
	if err != nil || got.ExecutionState != statemodel.RunQueued || got.Version != v.Run.Version {
		t.Fatalf("run %+v, %v; want QUEUED at version %d", got, err, v.Run.Version)
	}
}

// slotClaimRace: concurrent CreateRun calls for the same slot yield exactly
// one run; the others learn which run holds the slot and write nothing.
func slotClaimRace(t *testing.T, h *Harness) {
	ctx := context.Background()
	for round := range 5 {
		slot := T0.Add(time.Duration(round) * time.Hour)
		type attempt struct {
			run string
			err error
		}
		got := Race(8, func(int) attempt {
			nr := NewRun("cron", "extract", "load")
			nr.LogicalTime, nr.ClaimSlot = slot, true
			_, err := h.CreateRun(ctx, nr, h.Clock.Now())
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
			var ex *ledger.ExistingRunError
			if !errors.Is(a.err, ledger.ErrSlotTaken) || !errors.As(a.err, &ex) || ex.RunID != winner {
				t.Fatalf("round %d caller %d: %v; want ErrSlotTaken naming %s", round, i, a.err, winner)
			}
			if _, err := h.Store.GetRun(ctx, a.run); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("round %d: losing run %s exists (%v)", round, a.run, err)
			}
		}
	}
	runs, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: "cron"})
	if err != nil || len(runs) != 5 {
		t.Fatalf("job has %d runs (%v), want 5", len(runs), err)
	}
	nr := NewRun("cron", "x")
	nr.ClaimSlot = true
	nr.LogicalTime = time.Time{}
	if _, err := h.CreateRun(ctx, nr, h.Clock.Now()); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("a slot claim without a logical time: %v, want invalid input", err)
	}
}

// idempotencyKey: the same key answers with the same run, another body is
// a mismatch, and an expired key is free again.
func idempotencyKey(t *testing.T, h *Harness) {
	ctx := context.Background()
	first := NewRun("idem", "main")
	first.Idempotency = &ledger.Idempotency{Key: "k-1", BodyHash: "h1"}
	h.MustCreate(t, first)

	again := NewRun("idem", "main")
	again.Idempotency = &ledger.Idempotency{Key: "k-1", BodyHash: "h1"}
	_, err := h.CreateRun(ctx, again, h.Clock.Now())
	var ex *ledger.ExistingRunError
	if !errors.Is(err, ledger.ErrIdempotentReplay) || !errors.As(err, &ex) || ex.RunID != first.ID || ex.BodyHash != "h1" {
		t.Fatalf("same key, same body: %v; want replay of %s", err, first.ID)
	}
	other := NewRun("idem", "main")
	other.Idempotency = &ledger.Idempotency{Key: "k-1", BodyHash: "h2"}
	if _, err := h.CreateRun(ctx, other, h.Clock.Now()); !errors.Is(err, ledger.ErrIdempotencyMismatch) || !errors.As(err, &ex) || ex.RunID != first.ID {
		t.Fatalf("same key, other body: %v; want mismatch naming %s", err, first.ID)
	}
	// The same key of another job is another key.
	elsewhere := NewRun("idem-2", "main")
	elsewhere.Idempotency = &ledger.Idempotency{Key: "k-1", BodyHash: "h2"}
	h.MustCreate(t, elsewhere)
	h.Clock.Advance(ledger.IdempotencyTTL + time.Second)
	later := NewRun("idem", "main")
	later.Idempotency = &ledger.Idempotency{Key: "k-1", BodyHash: "h2"}
	if _, err := h.CreateRun(ctx, later, h.Clock.Now()); err != nil {
		t.Fatalf("expired key: %v", err)
	}
}

// idempotencyKeyRace: concurrent creations with one idempotency key yield
// one run, whatever partition the key is stored on; the others answer it
// as a replay and write nothing. Several keys of one job race at once, so
// keys on different shards of the job do not meet.
func idempotencyKeyRace(t *testing.T, h *Harness) {
	ctx := context.Background()
	type attempt struct {
		key, run string
		err      error
	}
	const keys, callers = 4, 6
	got := Race(keys*callers, func(i int) attempt {
		nr := NewRun("idem-race", "main")
		key := fmt.Sprintf("k-%d", i%keys)
		nr.Idempotency = &ledger.Idempotency{Key: key, BodyHash: "h"}
		_, err := h.CreateRun(ctx, nr, h.Clock.Now())
		return attempt{key, nr.ID, err}
	})
	winners := map[string]string{}
	for _, a := range got {
		if a.err == nil {
			if w, ok := winners[a.key]; ok {
				t.Fatalf("key %s yielded two runs: %s and %s", a.key, w, a.run)
			}
			winners[a.key] = a.run
		}
	}
	if len(winners) != keys {
		t.Fatalf("%d of %d keys yielded a run", len(winners), keys)
	}
	for _, a := range got {
		if a.err == nil {
			continue
		}
		var ex *ledger.ExistingRunError
		if !errors.Is(a.err, ledger.ErrIdempotentReplay) || !errors.As(a.err, &ex) || ex.RunID != winners[a.key] {
			t.Fatalf("key %s: %v; want a replay of %s", a.key, a.err, winners[a.key])
		}
		if _, err := h.Store.GetRun(ctx, a.run); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("key %s: the losing run %s exists (%v)", a.key, a.run, err)
		}
	}
}

// runs: reading, listing and deriving runs.
func runs(t *testing.T, h *Harness) {
	ctx := context.Background()
	nr := NewRun("wf", "extract", "load", "publish")
	nr.Tasks[1].DependsOn = []string{"extract"}
	nr.Tasks[2].DependsOn = []string{"load"}
	nr.Tasks[2].Publish = true
	nr.Tasks[1].Executor = []byte(`{"type":"lambda","function":"fn"}`)
	v := h.MustCreate(t, nr)
	if v.Run.ExecutionState != statemodel.RunQueued || v.Run.PublicationState != statemodel.PublicationPending || v.Run.Version != 1 ||
		!v.Run.TimerAt.Equal(T0.Add(ledger.DefaultRunBackstop)) {
		t.Fatalf("new run %+v", v.Run)
	}
	if _, err := h.CreateRun(ctx, nr, T0); !errors.Is(err, ledger.ErrAlreadyExists) {
		t.Fatalf("same run id again: %v", err)
	}
	other := h.MustCreate(t, NewRun("other", "main"))

	read, err := h.Store.ReadRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(read.Tasks) != 3 || read.Run.ID != v.Run.ID || string(read.Run.Params) != `{"p":1}` || !read.Run.LogicalTime.Equal(T0) {
		t.Fatalf("read run %+v with %d tasks", read.Run, len(read.Tasks))
	}
	for i, task := range read.Tasks {
		in := task.Instance
		if in.Snapshot.State != statemodel.StateCreated || in.Pool != "default" || string(in.Payload) != `{"x":1}` || in.Job != "wf" ||
			in.Policy.Timeouts != Policy().Timeouts || !in.Policy.Retry.Equal(Policy().Retry) || in.TimerKind != statemodel.TimerNone ||
			!in.Snapshot.EqualState(v.Tasks[i].Instance.Snapshot) {
			t.Fatalf("instance %+v", in)
		}
	}
	if read.Tasks[1].Instance.Key.Task != "load" || !slices.Equal(read.Tasks[1].Instance.DependsOn, []string{"extract"}) || !read.Tasks[2].Instance.Publish {
		t.Fatalf("dag fields lost: %+v", read.Tasks)
	}
	if string(read.Tasks[1].Instance.Executor) != `{"type":"lambda","function":"fn"}` || read.Tasks[0].Instance.Executor != nil {
		t.Fatalf("executors %q and %q, want the second task's only", read.Tasks[0].Instance.Executor, read.Tasks[1].Instance.Executor)
	}
	if in, err := h.Store.GetInstance(ctx, read.Tasks[1].Instance.Key); err != nil || string(in.Executor) != string(nr.Tasks[1].Executor) {
		t.Fatalf("get instance: executor %q (%v)", in.Executor, err)
	}
	if _, err := h.Store.ReadRun(ctx, "absent"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("read of a missing run: %v", err)
	}
	if _, err := h.Store.GetRun(ctx, "absent"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("get of a missing run: %v", err)
	}

	// Listings: global newest first, per job, by status.
	all, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{})
	if err != nil || len(all) != 2 || all[0].ID != other.Run.ID || all[1].ID != v.Run.ID {
		t.Fatalf("global listing %v (%v), want newest first", ids(all), err)
	}
	page, next, err := h.Store.ListRuns(ctx, ledger.RunFilter{Limit: 1})
	if err != nil || len(page) != 1 || next == "" {
		t.Fatalf("first page %v next %q (%v)", ids(page), next, err)
	}
	page, _, err = h.Store.ListRuns(ctx, ledger.RunFilter{Limit: 1, Token: next})
	if err != nil || len(page) != 1 || page[0].ID != v.Run.ID {
		t.Fatalf("second page %v (%v)", ids(page), err)
	}
	if _, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: "wf", Token: next}); !errors.Is(err, ledger.ErrInvalidPageToken) {
		t.Fatalf("a global token on a job listing: %v, want invalid token", err)
	}
	byJob, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: "wf"})
	if err != nil || len(byJob) != 1 || byJob[0].ID != v.Run.ID || byJob[0].ExecutionState != statemodel.RunQueued {
		t.Fatalf("job listing %v (%v)", ids(byJob), err)
	}

	// Derived state with a version compare-and-set.
	running, err := h.Store.UpdateRunState(ctx, read.Run, ledger.RunUpdate{ExecutionState: statemodel.RunRunning, PublicationState: statemodel.PublicationPending})
	if err != nil || running.Version != 2 || running.Status != statemodel.StatusRunning {
		t.Fatalf("to RUNNING: %+v %v", running, err)
	}
	// A second finisher that read version 1 cannot regress it.
	if _, err := h.Store.UpdateRunState(ctx, read.Run, ledger.RunUpdate{ExecutionState: statemodel.RunQueued, PublicationState: statemodel.PublicationPending}); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("stale run update: %v, want version conflict", err)
	}
	end := h.Clock.Advance(time.Minute)
	done, err := h.Store.UpdateRunState(ctx, running, ledger.RunUpdate{ExecutionState: statemodel.RunFailed, PublicationState: statemodel.PublicationFailed})
	if err != nil || !done.EndedAt.Equal(end) || !done.TimerAt.IsZero() {
		t.Fatalf("to FAILED: %+v %v", done, err)
	}
	stored, err := h.Store.GetRun(ctx, v.Run.ID)
	if err != nil || stored.Version != 3 || stored.ExecutionState != statemodel.RunFailed || stored.Status != statemodel.StatusFailed ||
		!stored.TimerAt.IsZero() || !stored.EndedAt.Equal(end) || string(stored.Spec) != `{"tasks":[]}` {
		t.Fatalf("stored run %+v %v", stored, err)
	}
	failed, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: "wf", Status: statemodel.StatusFailed})
	if err != nil || len(failed) != 1 {
		t.Fatalf("failed runs of wf: %v %v", ids(failed), err)
	}
	failed, _, err = h.Store.ListRuns(ctx, ledger.RunFilter{Status: statemodel.StatusFailed})
	if err != nil || len(failed) != 1 || failed[0].ID != v.Run.ID {
		t.Fatalf("failed runs: %v %v", ids(failed), err)
	}
	missing := read.Run
	missing.ID = "gone"
	if _, err := h.Store.UpdateRunState(ctx, missing, ledger.RunUpdate{ExecutionState: statemodel.RunRunning, PublicationState: statemodel.PublicationPending}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("update of a missing run: %v", err)
	}
	if _, err := h.Store.UpdateRunState(ctx, stored, ledger.RunUpdate{ExecutionState: "BOGUS", PublicationState: statemodel.PublicationPending}); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("update to an unknown state: %v", err)
	}
}

// liveIndex: the unfinished runs of a job are listed oldest first from
// creation until a terminal state is stored, and HasUnfinishedRuns agrees.
func liveIndex(t *testing.T, h *Harness) {
	ctx := context.Background()
	unfinished := func(job string) []string {
		t.Helper()
		runs, err := h.Store.ListUnfinishedRuns(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range runs {
			if !r.LogicalTime.Equal(T0) {
				t.Errorf("unfinished run %s has logical time %s, want %s", r.ID, r.LogicalTime, T0)
			}
			out = append(out, r.ID)
		}
		return out
	}
	busy := func(job string) bool {
		t.Helper()
		b, err := h.Store.HasUnfinishedRuns(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if busy("wf") || len(unfinished("wf")) != 0 {
		t.Fatal("a job without runs has unfinished runs")
	}
	a := h.MustCreate(t, NewRun("wf", "x"))
	b := h.MustCreate(t, NewRun("wf", "x"))
	h.MustCreate(t, NewRun("other", "x"))
	if got := unfinished("wf"); !slices.Equal(got, []string{a.Run.ID, b.Run.ID}) {
		t.Fatalf("unfinished runs of wf: %v, want %s and %s", got, a.Run.ID, b.Run.ID)
	}
	running, err := h.Store.UpdateRunState(ctx, a.Run, ledger.RunUpdate{ExecutionState: statemodel.RunRunning, PublicationState: statemodel.PublicationNotRequired})
	if err != nil {
		t.Fatal(err)
	}
	if got := unfinished("wf"); len(got) != 2 {
		t.Fatalf("a RUNNING run left the unfinished runs: %v", got)
	}
	if _, err := h.Store.UpdateRunState(ctx, running, ledger.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired}); err != nil {
		t.Fatal(err)
	}
	if got := unfinished("wf"); !slices.Equal(got, []string{b.Run.ID}) || !busy("wf") {
		t.Fatalf("after %s ended: %v (busy %t), want only %s", a.Run.ID, got, busy("wf"), b.Run.ID)
	}
	if _, err := h.Store.UpdateRunState(ctx, b.Run, ledger.RunUpdate{ExecutionState: statemodel.RunCancelled, PublicationState: statemodel.PublicationNotRequired}); err != nil {
		t.Fatal(err)
	}
	if got := unfinished("wf"); len(got) != 0 || busy("wf") {
		t.Fatalf("unfinished runs of wf after both ended: %v (busy %t)", got, busy("wf"))
	}
	if !busy("other") {
		t.Fatal("job other has an unfinished run")
	}
	if _, err := h.Store.ListUnfinishedRuns(ctx, "a#b"); !errors.Is(err, ledger.ErrInvalidKey) {
		t.Fatalf("unfinished runs of an invalid job name: %v", err)
	}
}

// rearmRunBackstop: a live run whose derived state did not change gets its
// backstop moved ahead, so it is no longer due; version and states stay.
func rearmRunBackstop(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("wf", "x"))
	now := h.Clock.Advance(ledger.DefaultRunBackstop + time.Minute)
	due := func() int {
		timers, _ := allDue(t, h, now, 0)
		n := 0
		for _, d := range timers {
			if d.Item == ledger.TimerOfRun && d.Run == v.Run.ID {
				if d.Job != "wf" || d.Kind != ledger.TimerKindRunBackstop {
					t.Errorf("run backstop listed as %+v", d)
				}
				n++
			}
		}
		return n
	}
	if due() != 1 {
		t.Fatal("the run's backstop is not due after its backstop interval")
	}
	run, err := h.Store.GetRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.Store.RearmRunBackstop(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := h.Store.GetRun(ctx, v.Run.ID)
	if err != nil || !stored.TimerAt.Equal(now.Add(ledger.DefaultRunBackstop)) || !got.TimerAt.Equal(stored.TimerAt) ||
		stored.Version != run.Version || stored.ExecutionState != run.ExecutionState {
		t.Fatalf("re-armed run %+v (%v), want timer %s at version %d", stored, err, now.Add(ledger.DefaultRunBackstop), run.Version)
	}
	if due() != 0 {
		t.Fatal("the re-armed backstop is still listed as due")
	}
	moved, err := h.Store.UpdateRunState(ctx, stored, ledger.RunUpdate{ExecutionState: statemodel.RunRunning, PublicationState: statemodel.PublicationNotRequired})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.RearmRunBackstop(ctx, run); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("re-arm from a stale read: %v, want version conflict", err)
	}
	done, err := h.Store.UpdateRunState(ctx, moved, ledger.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.RearmRunBackstop(ctx, done); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("re-arm of a finished run: %v, want invalid input", err)
	}
	gone := moved
	gone.ID = "gone"
	if _, err := h.Store.RearmRunBackstop(ctx, gone); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("re-arm of a missing run: %v, want not found", err)
	}
}

// instanceSecret: a task's secret is stored with its instance and read
// back by every read of the instance (CreateRun's view, GetInstance,
// GetInstanceAndRun, ReadRun, a transition's result), unchanged by its
// writes; a task created without one has none. It is in no other record:
// history, attempts, runs and their listing hold no trace of it, and an
// instance prints, encodes and logs it as a placeholder. A secret of the
// wrong length is refused and nothing is written.
func instanceSecret(t *testing.T, h *Harness) {
	ctx := context.Background()
	secret := make(ledger.Secret, ledger.SecretBytes)
	for i := range secret {
		secret[i] = byte(0xA0 + i)
	}
	nr := NewRun("secret", "kept", "legacy")
	nr.Tasks[0].Secret = slices.Clone(secret)
	v := h.MustCreate(t, nr)
	kept := ledger.InstanceKey{Run: nr.ID, Task: "kept"}
	legacy := ledger.InstanceKey{Run: nr.ID, Task: "legacy"}
	check := func(how string, inst ledger.Instance, want ledger.Secret) {
		t.Helper()
		if !bytes.Equal(inst.Secret, want) {
			t.Fatalf("%s: instance %s has secret %x, want %x", how, inst.Key, []byte(inst.Secret), []byte(want))
		}
	}
	check("CreateRun", v.Tasks[0].Instance, secret)
	check("CreateRun", v.Tasks[1].Instance, nil)

	now := h.Clock.Now()
	events := []statemodel.Event{Ev(statemodel.EvDepsMet, 0), Dispatch(1), Started(1, "w"), Succeeded(1)}
	for _, e := range events {
		held := h.MustInstance(t, kept)
		check("GetInstance", held, secret)
		res, err := h.Store.TransitionFrom(ctx, held, e, now, Policy())
		if err != nil || res.Outcome != statemodel.Applied {
			t.Fatalf("%s: %s, %v", e, res.Outcome, err)
		}
		check("TransitionFrom "+string(e.Type), res.Instance, secret)
		if e.Type == statemodel.EvStarted {
			if _, err := h.Store.Heartbeat(ctx, kept, 1, now.Add(time.Second), Policy().Timeouts.Heartbeat); err != nil {
				t.Fatal(err)
			}
		}
	}
	inst, _, err := h.Store.GetInstanceAndRun(ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	check("GetInstanceAndRun", inst, secret)
	check("GetInstance", h.MustInstance(t, legacy), nil)
	view, err := h.Store.ReadRun(ctx, nr.ID)
	if err != nil {
		t.Fatal(err)
	}
	check("ReadRun", view.Tasks[0].Instance, secret)
	check("ReadRun", view.Tasks[1].Instance, nil)

	// Nothing else carries it, in any encoding.
	traces := []string{string(secret), hex.EncodeToString(secret), base64.StdEncoding.EncodeToString(secret), fmt.Sprint([]byte(secret))}
	hidden := func(what string, v any) {
		t.Helper()
		j, _ := json.Marshal(v) // an instance's policy holds a func: no JSON
		var logged strings.Builder
		slog.New(slog.NewTextHandler(&logged, nil)).Info("dump", "v", v)
		for _, shown := range []string{fmt.Sprintf("%+v", v), fmt.Sprintf("%#v", v), string(j), logged.String()} {
			for _, trace := range traces {
				if strings.Contains(shown, trace) {
					t.Fatalf("%s shows the instance secret: %s", what, shown)
				}
			}
		}
	}
	hidden("the instance", inst)
	hidden("the instance's secret", inst.Secret)
	hidden("the run view", view)
	hidden("the history", h.FullHistory(t, kept))
	a, err := h.Store.GetAttempt(ctx, kept, 1)
	if err != nil {
		t.Fatal(err)
	}
	hidden("attempt 1", a)
	r, err := h.Store.GetRun(ctx, nr.ID)
	if err != nil {
		t.Fatal(err)
	}
	hidden("the run", r)
	runs, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: "secret"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("ListRuns: %d runs, %v", len(runs), err)
	}
	hidden("the run's listing", runs)

	for _, n := range []int{1, ledger.SecretBytes - 1, ledger.SecretBytes + 1} {
		bad := NewRun("secret-bad", "main")
		bad.Tasks[0].Secret = make(ledger.Secret, n)
		if _, err := h.CreateRun(ctx, bad, h.Clock.Now()); !errors.Is(err, ledger.ErrInvalidInput) {
			t.Fatalf("a secret of %d bytes: %v, want invalid input", n, err)
		}
		if _, err := h.Store.GetRun(ctx, bad.ID); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a secret of %d bytes wrote run %s (%v)", n, bad.ID, err)
		}
	}
}
