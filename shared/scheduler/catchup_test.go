package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store/memstore"
	"github.com/runledger/runledger/statemodel"
)

// The catch-up of missed slots, on the in-memory store under the
// fixture's clock (2030-01-02T03:04:05Z at the start).

// slotRuns lists a job's runs by logical time, oldest first.
func (f *fixture) slotRuns(t *testing.T, job string) []ledger.Run {
	t.Helper()
	var out []ledger.Run
	token := ""
	for {
		runs, next, err := f.st.ListRuns(context.Background(), ledger.RunFilter{Job: job, Limit: 500, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, runs...)
		if next == "" {
			break
		}
		token = next
	}
	slices.SortFunc(out, func(a, b ledger.Run) int { return a.LogicalTime.Compare(b.LogicalTime) })
	return out
}

func (f *fixture) job(t *testing.T, name string) ledger.Job {
	t.Helper()
	j, err := f.st.GetJob(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// logicalTimes are the runs' logical times in the API's format.
func logicalTimes(runs []ledger.Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = protocol.FormatTime(r.LogicalTime)
	}
	return out
}

// byTrigger counts the runs by trigger.
func byTrigger(runs []ledger.Run) map[statemodel.Trigger]int {
	out := map[statemodel.Trigger]int{}
	for _, r := range runs {
		out[r.Trigger]++
	}
	return out
}

// slotsFrom are n slots step apart from first, in the API's format.
func slotsFrom(first time.Time, step time.Duration, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = protocol.FormatTime(first.Add(time.Duration(i) * step))
	}
	return out
}

// An hourly job paused for 30 days: on resume, none skips all 720 slots,
// latest runs the latest one, all runs the 24 inside the default 24 h
// window (the first batch before the answer, the rest on the next tick);
// the rest count as missed, and the schedule is back on time.
func TestCatchupOnResume(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	resumeAt := start.Add(30 * 24 * time.Hour)            // 2030-02-01T03:04:05Z
	latest := time.Date(2030, 2, 1, 3, 0, 0, 0, time.UTC) // the last slot before the resume
	next := latest.Add(time.Hour)
	for _, c := range []struct {
		policy     string
		runs       []string // after the ticks
		missed     int64
		atResume   int // runs when the resume answers
		pendingNow bool
	}{
		{"none", nil, 720, 0, false},
		{"latest", []string{protocol.FormatTime(latest)}, 719, 1, false},
		{"all", slotsFrom(latest.Add(-23*time.Hour), time.Hour, 24), 696, 10, true},
	} {
		t.Run(c.policy, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			f.createJob(t, fmt.Sprintf(`{"name": "hourly", "schedule": {"cron": "0 * * * *", "catchup": %q}}`, c.policy))
			if _, err := f.st.SetJobPaused(ctx, "hourly", true); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(resumeAt.Sub(start))
			f.tick(t, f.svc) // a paused job fires nothing
			if n := len(f.slotRuns(t, "hourly")); n != 0 {
				t.Fatalf("%d runs while paused", n)
			}

			j, err := f.svc.Triggers().ResumeJob(ctx, "hourly")
			if err != nil {
				t.Fatal(err)
			}
			if j.Paused || !j.NextFireAt.Equal(next) || j.MissedSlots != c.missed || j.CatchupNext.IsZero() != !c.pendingNow {
				t.Fatalf("resumed job: paused %v, next fire %s (want %s), missed %d (want %d), catch-up from %s",
					j.Paused, protocol.FormatTime(j.NextFireAt), protocol.FormatTime(next), j.MissedSlots, c.missed, protocol.FormatTime(j.CatchupNext))
			}
			if n := len(f.slotRuns(t, "hourly")); n != c.atResume {
				t.Fatalf("%d runs when the resume answered, want %d", n, c.atResume)
			}
			f.tick(t, f.svc)
			f.tick(t, f.svc) // nothing left to do
			runs := f.slotRuns(t, "hourly")
			if got := logicalTimes(runs); !slices.Equal(got, c.runs) {
				t.Fatalf("runs at %v, want %v", got, c.runs)
			}
			if got := byTrigger(runs); got[statemodel.TriggerCatchup] != len(runs) {
				t.Fatalf("triggers %v, want every run catchup", got)
			}
			j = f.job(t, "hourly")
			if !j.NextFireAt.Equal(next) || j.MissedSlots != c.missed || !j.CatchupNext.IsZero() {
				t.Fatalf("after the ticks: next fire %s, missed %d, catch-up from %s", protocol.FormatTime(j.NextFireAt), j.MissedSlots, protocol.FormatTime(j.CatchupNext))
			}
			// Resuming a running job changes nothing.
			again, err := f.svc.Triggers().ResumeJob(ctx, "hourly")
			if err != nil || again.Version != j.Version || again.MissedSlots != c.missed {
				t.Fatalf("resume again: %+v %v", again, err)
			}
		})
	}
}

// The ticker was down for ten minutes (no pause): an every-minute job's
// slots over two ticker periods old are missed and caught up by policy;
// the two it still sees on time run as scheduled, in the same pass, and
// the schedule is back on time.
func TestCatchupTickerDown(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	first := time.Date(2030, 1, 2, 3, 5, 0, 0, time.UTC)
	minutes := func(from, to int) []string { // the slots 03:from .. 03:to
		return slotsFrom(first.Add(time.Duration(from-5)*time.Minute), time.Minute, to-from+1)
	}
	for _, c := range []struct {
		policy  string
		runs    []string
		missed  int64
		catchup int // runs with trigger catchup; the others are schedule
	}{
		// Down from 03:05:01 to 03:15:01: 03:06 .. 03:13 are over two
		// minutes late, 03:14 and 03:15 are not.
		{"none", append(minutes(5, 5), minutes(14, 15)...), 8, 0},
		{"latest", append(minutes(5, 5), minutes(13, 15)...), 7, 1},
		{"all", minutes(5, 15), 0, 8},
	} {
		t.Run(c.policy, func(t *testing.T) {
			f := newFixture(t)
			f.createJob(t, fmt.Sprintf(`{"name": "minutely", "schedule": {"cron": "* * * * *", "catchup": %q}}`, c.policy))
			f.clock.Advance(first.Add(time.Second).Sub(start))
			f.tick(t, f.svc)
			f.clock.Advance(10 * time.Minute)
			f.tick(t, f.svc)
			runs := f.slotRuns(t, "minutely")
			if got := logicalTimes(runs); !slices.Equal(got, c.runs) {
				t.Fatalf("runs at %v, want %v", got, c.runs)
			}
			if got := byTrigger(runs); got[statemodel.TriggerCatchup] != c.catchup || got[statemodel.TriggerSchedule] != len(runs)-c.catchup {
				t.Fatalf("triggers %v, want %d catchup and the rest schedule", got, c.catchup)
			}
			j := f.job(t, "minutely")
			if want := first.Add(11 * time.Minute); !j.NextFireAt.Equal(want) || j.MissedSlots != c.missed {
				t.Fatalf("next fire %s (want %s), missed %d (want %d)", protocol.FormatTime(j.NextFireAt), protocol.FormatTime(want), j.MissedSlots, c.missed)
			}
			// Back on time: the next slot runs on the next pass.
			f.clock.Advance(time.Minute)
			f.tick(t, f.svc)
			if n := len(f.slotRuns(t, "minutely")); n != len(c.runs)+1 {
				t.Fatalf("%d runs after the next slot, want %d", n, len(c.runs)+1)
			}
		})
	}
}

// A ticker that runs a little late (under two periods) fires every slot it
// has due in one pass: the schedule does not fall behind, and nothing is
// missed.
func TestLateTickFiresEveryDueSlot(t *testing.T) {
	f := newFixture(t)
	f.createJob(t, `{"name": "minutely", "schedule": {"cron": "* * * * *", "catchup": "none"}}`)
	f.clock.Advance(2*time.Minute - 5*time.Second) // 03:06:00: 03:05 and 03:06 due
	f.tick(t, f.svc)
	if got, want := logicalTimes(f.slotRuns(t, "minutely")), []string{"2030-01-02T03:05:00.000Z", "2030-01-02T03:06:00.000Z"}; !slices.Equal(got, want) {
		t.Fatalf("runs at %v, want %v", got, want)
	}
	if j := f.job(t, "minutely"); j.MissedSlots != 0 || protocol.FormatTime(j.NextFireAt) != "2030-01-02T03:07:00.000Z" {
		t.Fatalf("next fire %s, missed %d", protocol.FormatTime(j.NextFireAt), j.MissedSlots)
	}
}

// The window and the newest 1,000: a job every minute, policy all within
// 48 h, paused for three days. The slots older than the window and all
// but the newest 1,000 inside it are missed; the 1,000 runs are created in
// batches across passes, oldest first.
func TestCatchupAllNewestThousandInBatches(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name": "busy", "schedule": {"rate": "1m", "catchup": "all", "catchup_window": "48h"}}`)
	created := f.clock.Now()
	if _, err := f.st.SetJobPaused(ctx, "busy", true); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(72 * time.Hour)
	now := f.clock.Now()
	if _, err := f.svc.Triggers().ResumeJob(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	passes := 0
	for f.job(t, "busy").CatchupNext.IsZero() == false {
		if passes++; passes > 25 {
			t.Fatal("the catch-up is not done after 25 passes")
		}
		f.tick(t, f.svc)
	}
	if passes < 2 {
		t.Fatalf("1,000 runs were created in %d passes, want batches", passes)
	}
	runs := f.slotRuns(t, "busy")
	// Rate slots are one minute apart from the creation; the last before
	// the resume is the resume time itself (three days of whole minutes).
	last := created.Add(72 * time.Hour)
	if want := slotsFrom(last.Add(-999*time.Minute), time.Minute, 1000); !slices.Equal(logicalTimes(runs), want) {
		t.Fatalf("%d runs from %s to %s, want the 1,000 newest slots up to %s",
			len(runs), protocol.FormatTime(runs[0].LogicalTime), protocol.FormatTime(runs[len(runs)-1].LogicalTime), protocol.FormatTime(last))
	}
	j := f.job(t, "busy")
	if total := int64(72 * 60); j.MissedSlots != total-1000 || !j.NextFireAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("missed %d (want %d), next fire %s", j.MissedSlots, total-1000, protocol.FormatTime(j.NextFireAt))
	}
}

// failingMoves is the store with MoveSchedule failing after its write
// would have been decided: the crash between a batch of runs and the move
// of the range.
type failingMoves struct {
	scheduler.Store
	mu    sync.Mutex
	fails int
}

var errCrash = errors.New("crashed before the move")

// left is how many crashes are still to come.
func (s *failingMoves) left() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fails
}

func (s *failingMoves) MoveSchedule(ctx context.Context, name string, m ledger.ScheduleMove) (ledger.Job, error) {
	s.mu.Lock()
	crash := s.fails > 0 && !m.From.CatchupNext.IsZero()
	if crash {
		s.fails--
	}
	s.mu.Unlock()
	if crash {
		return ledger.Job{}, errCrash
	}
	return s.Store.MoveSchedule(ctx, name, m)
}

// A crash between a batch of catch-up runs and the move of the range, and
// two tickers racing over the same job: every decided slot gets exactly
// one run, none is lost, and missed_slots counts each skipped slot once.
func TestCatchupCrashAndRaceNeverLoseOrDoubleASlot(t *testing.T) {
	c := newClock()
	mem := memstore.New(memstore.WithClock(c.Now), memstore.WithTimerHorizon(ledger.IndexEveryTimer))
	crashy := &failingMoves{Store: mem, fails: 2}
	q := newMemQueue()
	pool := q.create(fmt.Sprintf("sched%d-pool", seq.Add(1)))
	f := assemble(crashy, q, pool, c, "", nil)
	other := mustNew(mem, q, scheduler.Config{Pools: map[string]string{"default": pool}, Now: c.Now})
	ctx := context.Background()
	f.createJob(t, `{"name": "racy", "schedule": {"rate": "1m", "catchup": "all", "catchup_window": "3h"}}`)
	start := c.Now()
	c.Advance(10 * time.Hour) // ticker down for ten hours: 600 slots, 180 inside the window

	// The crashes first, by the crashy ticker alone: a racing ticker could
	// otherwise finish the catch-up before the crashy one meets a batch. A
	// crash leaves the range where it was, so each tick after the first
	// (which starts the catch-up) writes a batch again and crashes.
	for tick := 0; crashy.left() > 0; tick++ {
		if tick > 4 {
			t.Fatalf("%d crashes left after %d ticks of the crashy ticker", crashy.left(), tick)
		}
		if _, err := f.svc.Tick(ctx); err != nil && !errors.Is(err, errCrash) {
			t.Fatal(err)
		}
	}
	for pass := 0; f.job(t, "racy").CatchupNext.IsZero() == false || pass == 0; pass++ {
		if pass > 20 {
			t.Fatal("the catch-up is not done after 20 passes")
		}
		var wg sync.WaitGroup
		for _, svc := range []*scheduler.Service{f.svc, other, f.svc, other} {
			wg.Go(func() {
				if _, err := svc.Tick(ctx); err != nil && !errors.Is(err, errCrash) {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	runs := f.slotRuns(t, "racy")
	// 600 slots, start+1m .. now. The 178 over two minutes late inside the
	// window (from now-3h) are caught up, the 3 still on time (now-2m ..
	// now) run as scheduled: one run per slot from now-3h to now. The 419
	// older slots are missed.
	now := start.Add(10 * time.Hour)
	if want := slotsFrom(now.Add(-3*time.Hour), time.Minute, 181); !slices.Equal(logicalTimes(runs), want) {
		t.Fatalf("runs %v\nwant %v", logicalTimes(runs), want)
	}
	if got := byTrigger(runs); got[statemodel.TriggerCatchup] != 178 || got[statemodel.TriggerSchedule] != 3 {
		t.Fatalf("triggers %v, want 178 catchup and 3 schedule", got)
	}
	if j := f.job(t, "racy"); j.MissedSlots != 419 || !j.NextFireAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("missed %d, next fire %s", j.MissedSlots, protocol.FormatTime(j.NextFireAt))
	}
}

// The job's overlap policy governs catch-up runs as it governs scheduled
// ones: with skip, a catch-up of all starts the oldest slot's run and skips
// the others while it is unfinished (they are not missed slots: the policy
// chose them); with cancel_previous, each run cancels the one before it.
func TestCatchupFollowsOverlap(t *testing.T) {
	for _, c := range []struct {
		overlap     string
		runs        int
		unfinished  int
		wantMissed  int64
		description string
	}{
		{"skip", 1, 1, 0, "one run, the others skipped while it is unfinished"},
		{"cancel_previous", 5, 1, 0, "five runs, each cancelling the one before"},
		{"allow", 5, 5, 0, "five runs side by side"},
	} {
		t.Run(c.overlap, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			f.createJob(t, fmt.Sprintf(`{"name": "o", "overlap": %q, "schedule": {"rate": "1h", "catchup": "all"}}`, c.overlap))
			if _, err := f.st.SetJobPaused(ctx, "o", true); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(5 * time.Hour)
			if _, err := f.svc.Triggers().ResumeJob(ctx, "o"); err != nil {
				t.Fatal(err)
			}
			f.tick(t, f.svc)
			runs := f.slotRuns(t, "o")
			unfinished := 0
			for _, r := range runs {
				if !r.ExecutionState.Terminal() {
					unfinished++
				}
			}
			if len(runs) != c.runs || unfinished != c.unfinished {
				t.Fatalf("%d runs, %d unfinished; want %s", len(runs), unfinished, c.description)
			}
			if j := f.job(t, "o"); j.MissedSlots != c.wantMissed || !j.CatchupNext.IsZero() {
				t.Fatalf("missed %d, catch-up from %s", j.MissedSlots, protocol.FormatTime(j.CatchupNext))
			}
		})
	}
}

// A decision longer than one walk (an every-minute job paused 40 days,
// policy all within a year: 57,600 slots) is decided in parts: the resume
// skips what it knows the policy will not run, and the ticker finishes.
func TestCatchupDecidedInParts(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createJob(t, `{"name": "long", "schedule": {"rate": "1m", "catchup": "all", "catchup_window": "8760h"}}`)
	created := f.clock.Now()
	if _, err := f.st.SetJobPaused(ctx, "long", true); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(40 * 24 * time.Hour)
	now := f.clock.Now()
	j, err := f.svc.Triggers().ResumeJob(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	// The first part walked 50,000 slots and kept the newest 1,000 of them.
	if j.MissedSlots != 49_000 || !j.NextFireAt.Equal(created.Add(49_001*time.Minute)) || !j.CatchupNext.IsZero() {
		t.Fatalf("after the resume: missed %d, next fire %s, catch-up from %s", j.MissedSlots, protocol.FormatTime(j.NextFireAt), protocol.FormatTime(j.CatchupNext))
	}
	for pass := 0; ; pass++ {
		if j = f.job(t, "long"); j.CatchupNext.IsZero() && j.NextFireAt.After(now) {
			break
		}
		if pass > 25 {
			t.Fatal("not decided after 25 passes")
		}
		f.tick(t, f.svc)
	}
	// The ticker decides the rest as it finds them: the slots within two
	// ticker periods of now are on time and run as scheduled, the 1,000
	// missed before them are caught up.
	if total := int64(40 * 24 * 60); j.MissedSlots != total-1003 || !j.NextFireAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("missed %d (want %d), next fire %s", j.MissedSlots, total-1003, protocol.FormatTime(j.NextFireAt))
	}
	runs := f.slotRuns(t, "long")
	if want := slotsFrom(now.Add(-1002*time.Minute), time.Minute, 1003); !slices.Equal(logicalTimes(runs), want) {
		t.Fatalf("%d runs from %s, want the newest 1,003", len(runs), protocol.FormatTime(runs[0].LogicalTime))
	}
	if got := byTrigger(runs); got[statemodel.TriggerCatchup] != 1000 || got[statemodel.TriggerSchedule] != 3 {
		t.Fatalf("triggers %v, want 1,000 catchup and 3 schedule", got)
	}
}

// A one-off at missed while the job was paused is a missed slot like any
// other: latest runs it (trigger catchup), none counts it; either way the
// job has no fire left.
func TestCatchupOfAMissedAt(t *testing.T) {
	for _, c := range []struct {
		policy string
		runs   int
		missed int64
	}{{"latest", 1, 0}, {"none", 0, 1}} {
		t.Run(c.policy, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			at := f.clock.Now().Add(time.Hour)
			f.createJob(t, fmt.Sprintf(`{"name": "once", "schedule": {"at": %q, "catchup": %q}}`, protocol.FormatTime(at), c.policy))
			if _, err := f.st.SetJobPaused(ctx, "once", true); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(2 * time.Hour)
			j, err := f.svc.Triggers().ResumeJob(ctx, "once")
			if err != nil {
				t.Fatal(err)
			}
			f.tick(t, f.svc)
			runs := f.slotRuns(t, "once")
			if len(runs) != c.runs || j.MissedSlots != c.missed || !j.NextFireAt.IsZero() {
				t.Fatalf("%d runs, missed %d, next fire %s", len(runs), j.MissedSlots, protocol.FormatTime(j.NextFireAt))
			}
			if c.runs == 1 && (!runs[0].LogicalTime.Equal(at) || runs[0].Trigger != statemodel.TriggerCatchup) {
				t.Fatalf("run at %s, trigger %s", protocol.FormatTime(runs[0].LogicalTime), runs[0].Trigger)
			}
		})
	}
}
