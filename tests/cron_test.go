package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
)

// cronPair is two local stacks on one table and one set of queues, under
// one frozen clock: two tickers (four, with the stacks' own, which tick
// every 250 ms on the same clock) race for every slot.
type cronPair struct {
	a, b  *stack
	clock *stepClock
	base  time.Time // the first slot
}

func startCronPair(t *testing.T) *cronPair {
	t.Helper()
	// Half a minute before a minute boundary, near real time.
	base := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	clock := frozenAt(base.Add(-30 * time.Second))
	a := startStack(t, devstack.Options{Now: clock.Now})
	b := startStack(t, devstack.Options{Name: a.opts.Name, Now: clock.Now})
	if a.Info.Table != b.Info.Table || a.Info.Queues["default"] != b.Info.Queues["default"] {
		t.Fatalf("the stacks do not share table and queues: %+v %+v", a.Info, b.Info)
	}
	return &cronPair{a: a, b: b, clock: clock, base: base}
}

// slot is the logical time of the k-th slot of an every-minute job.
func (p *cronPair) slot(k int) time.Time { return p.base.Add(time.Duration(k-1) * time.Minute) }

// fire moves the clock one second past slot k and runs three Ticks on each
// stack's scheduler at once; then it waits until every pass of the stacks'
// own tickers that may have read the old clock is over.
func (p *cronPair) fire(t *testing.T, k int) {
	t.Helper()
	p.clock.Set(p.slot(k).Add(time.Second))
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, svc := range []*scheduler.Service{p.a.Service, p.b.Service} {
		for range 3 {
			wg.Go(func() {
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if _, err := svc.Tick(ctx); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		t.Errorf("tick: %v", err)
	}
	p.settle(t)
}

// settle waits for two more completed invocations of each stack's own
// ticker: ticker invocations never overlap, so any that was under way
// when settle began is over.
func (p *cronPair) settle(t *testing.T) {
	t.Helper()
	for _, s := range []*stack{p.a, p.b} {
		before := s.Counters.Snapshot().Functions["ticker"].Invocations
		eventually(t, 30*time.Second, "ticker passes", func() (bool, string) {
			n := s.Counters.Snapshot().Functions["ticker"].Invocations
			return n >= before+2, fmt.Sprintf("%d invocations since %d", n, before)
		})
	}
}

// runsOf lists a job's runs, newest first.
func (s *stack) runsOf(job string) []runDoc {
	s.t.Helper()
	r := s.call("GET", "/v1/runs?job="+url.QueryEscape(job)+"&limit=500", nil).must(s.t, http.StatusOK)
	var l struct {
		Runs []json.RawMessage `json:"runs"`
	}
	if err := json.Unmarshal(r.Raw, &l); err != nil {
		s.t.Fatal(err)
	}
	out := make([]runDoc, len(l.Runs))
	for i, raw := range l.Runs {
		if err := json.Unmarshal(raw, &out[i].Run); err != nil {
			s.t.Fatal(err)
		}
	}
	return out
}

// nextFire is the job's next_fire_time ("" when null).
func (s *stack) nextFire(job string) string {
	s.t.Helper()
	r := s.call("GET", "/v1/jobs/"+job, nil).must(s.t, http.StatusOK)
	v, _ := r.Body["job"].(map[string]any)["next_fire_time"].(string)
	return v
}

// runAtSlot finds the run of a slot in a listing.
func runAtSlot(runs []runDoc, slot time.Time) (runDoc, int) {
	var found runDoc
	n := 0
	for _, r := range runs {
		if r.Run.LogicalTime == protocol.FormatTime(slot) {
			found = r
			n++
		}
	}
	return found, n
}

func cronJob(name, overlap string) map[string]any {
	return map[string]any{
		"name": name, "schedule": map[string]any{"cron": "* * * * *", "timezone": "UTC"},
		"overlap": overlap,
		// No worker serves the pool: runs stay QUEUED, unfinished, as long
		// as the test needs (an hour of the frozen clock).
		"timeouts": map[string]any{"queue": "1h"},
	}
}

// 9a. Two tickers (two stacks on one table, each also ticking on its own)
// race for each slot of an every-minute cron job: every slot makes exactly
// one run, and the job's next_fire_time moves to the next slot.
func TestCronOneRunPerSlotTwoTickers(t *testing.T) {
	p := startCronPair(t)
	s := p.a
	s.createJob(cronJob("every-minute", "allow"))
	if got, want := s.nextFire("every-minute"), protocol.FormatTime(p.slot(1)); got != want {
		t.Fatalf("next_fire_time %s, want %s", got, want)
	}
	for k := 1; k <= 3; k++ {
		p.fire(t, k)
		runs := p.b.runsOf("every-minute")
		if len(runs) != k {
			t.Fatalf("after slot %d: %d runs, want %d", k, len(runs), k)
		}
		for j := 1; j <= k; j++ {
			if _, n := runAtSlot(runs, p.slot(j)); n != 1 {
				t.Fatalf("after slot %d: %d runs for slot %d, want 1", k, n, j)
			}
		}
		if got, want := s.nextFire("every-minute"), protocol.FormatTime(p.slot(k+1)); got != want {
			t.Fatalf("after slot %d: next_fire_time %s, want %s", k, got, want)
		}
	}
	// overlap allow: the unfinished runs of earlier slots all stand.
	for _, r := range p.a.runsOf("every-minute") {
		if r.Run.ExecutionState != "QUEUED" {
			t.Errorf("run %s of %s is %s, want QUEUED", r.Run.ID, r.Run.LogicalTime, r.Run.ExecutionState)
		}
	}
}

// 9b. overlap skip: while the previous run is unfinished a slot makes no
// run but still moves next_fire_time on; once it finished, the next slot
// runs again.
func TestCronOverlapSkip(t *testing.T) {
	p := startCronPair(t)
	s := p.a
	s.createJob(cronJob("skipper", "skip"))
	p.fire(t, 1)
	first, n := runAtSlot(s.runsOf("skipper"), p.slot(1))
	if n != 1 || first.Run.ExecutionState != "QUEUED" {
		t.Fatalf("slot 1: %d runs, %+v", n, first.Run)
	}

	p.fire(t, 2)
	runs := s.runsOf("skipper")
	if len(runs) != 1 {
		t.Fatalf("slot 2 with slot 1 unfinished: %d runs, want 1 (skipped)", len(runs))
	}
	if got, want := s.nextFire("skipper"), protocol.FormatTime(p.slot(3)); got != want {
		t.Fatalf("next_fire_time %s, want %s", got, want)
	}
	if d := s.run(first.Run.ID); d.Run.ExecutionState != "QUEUED" || d.task("main").State != "QUEUED" {
		t.Fatalf("skip touched the previous run: %s, main %s", d.Run.ExecutionState, d.task("main").State)
	}

	// The previous run finishes (cancelled): the next slot runs.
	s.call("POST", "/v1/runs/"+first.Run.ID+"/cancel", map[string]any{"reason": "make room"}).must(t, http.StatusOK)
	s.waitRun(first.Run.ID, 10*time.Second, "CANCELLED")
	p.fire(t, 3)
	runs = s.runsOf("skipper")
	third, n := runAtSlot(runs, p.slot(3))
	if len(runs) != 2 || n != 1 {
		t.Fatalf("slot 3 after slot 1 finished: %d runs, %d of slot 3; want 2 and 1", len(runs), n)
	}
	if _, n := runAtSlot(runs, p.slot(2)); n != 0 {
		t.Fatalf("slot 2 has %d runs, want 0", n)
	}
	if d := s.run(third.Run.ID); d.Run.ExecutionState != "QUEUED" || d.task("main").State != "QUEUED" {
		t.Fatalf("slot 3 run %s, main %s; want QUEUED", d.Run.ExecutionState, d.task("main").State)
	}
	if got, want := s.nextFire("skipper"), protocol.FormatTime(p.slot(4)); got != want {
		t.Fatalf("next_fire_time %s, want %s", got, want)
	}
}

// 9c. overlap cancel_previous: the next slot cancels the unfinished run
// (its queued task at once) and starts its own, which the racing tickers
// leave alone.
func TestCronOverlapCancelPrevious(t *testing.T) {
	p := startCronPair(t)
	s := p.a
	s.createJob(cronJob("canceller", "cancel_previous"))
	p.fire(t, 1)
	first, n := runAtSlot(s.runsOf("canceller"), p.slot(1))
	if n != 1 || first.Run.ExecutionState != "QUEUED" {
		t.Fatalf("slot 1: %d runs, %+v", n, first.Run)
	}
	for k := 2; k <= 3; k++ {
		p.fire(t, k)
		runs := s.runsOf("canceller")
		if len(runs) != k {
			t.Fatalf("after slot %d: %d runs, want %d", k, len(runs), k)
		}
		for j := 1; j <= k; j++ {
			r, n := runAtSlot(runs, p.slot(j))
			if n != 1 {
				t.Fatalf("after slot %d: %d runs of slot %d, want 1", k, n, j)
			}
			d := s.run(r.Run.ID)
			want := "CANCELLED"
			if j == k {
				want = "QUEUED" // the newest slot's run is the one that stands
			}
			if d.Run.ExecutionState != want || d.task("main").State != want {
				t.Errorf("after slot %d: run of slot %d is %s (main %s), want %s", k, j, d.Run.ExecutionState, d.task("main").State, want)
			}
			if want == "CANCELLED" {
				h := s.history(r.Run.ID, "main")
				if last := h[len(h)-1]; last.To != "CANCELLED" || last.Reason != "overlap: cancel_previous" {
					t.Errorf("slot %d main ended by %+v, want CANCELLED for overlap: cancel_previous", j, last)
				}
			}
		}
		if got, want := s.nextFire("canceller"), protocol.FormatTime(p.slot(k+1)); got != want {
			t.Fatalf("after slot %d: next_fire_time %s, want %s", k, got, want)
		}
	}
}
