package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// burstRetry is the retry interval of the timer burst: longer than SQS's
// longest message delay, so no delay message is armed and the ticker's
// due-timer pass alone dispatches the retries.
const burstRetry = 20 * time.Minute

// burstLead is how long before the retries are due the bench clock
// resumes: a tick or two happen before them.
const burstLead = 3 * time.Second

// stepClock is the burst stack's clock: real time, except that it can be
// held (it reads one instant while held) and then set forward, after
// which it runs on at real speed. Holding it while the first attempts
// fail gives every retry the same retry_at, so all of them come due in
// the same instant, which no trigger rate on this machine could arrange.
type stepClock struct {
	mu     sync.Mutex
	offset time.Duration
	held   time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held.IsZero() {
		return c.held
	}
	return time.Now().Add(c.offset)
}

// hold stops the clock at its current reading and returns it.
func (c *stepClock) hold() time.Time {
	now := c.Now()
	c.mu.Lock()
	c.held = now
	c.mu.Unlock()
	return now
}

// resumeAt lets the clock run again from t.
func (c *stepClock) resumeAt(t time.Time) {
	c.mu.Lock()
	c.held = time.Time{}
	c.offset = time.Until(t)
	c.mu.Unlock()
}

// timerBurst runs n single-task runs whose first attempt fails while the
// stack's clock is held, so their n retry timers are due at one instant,
// then lets the clock run from burstLead before it and reports how late
// each attempt 2 was dispatched (timer_burst<n>_late_*; target p99 <= 1 s).
func (b *bench) timerBurst(ctx context.Context, n int) error {
	clk := &stepClock{}
	st, err := b.startStack(ctx, devstack.Options{Now: clk.Now})
	if err != nil {
		return err
	}
	defer st.Stop(context.Background())
	stop, err := benchWorker(st, "burst", 64, failFirst)
	if err != nil {
		return err
	}
	defer stop()
	api := newAPIClient(st.Info.APIURL, st.Info.APIKey)
	if err := api.createJob(ctx, map[string]any{
		"name": "burst", "pool": pool,
		"retry": map[string]any{"max_attempts": 2, "initial_interval": burstRetry.String(), "max_interval": burstRetry.String(),
			"backoff_coefficient": 2, "jitter": "none"},
		// The leases given while the clock is held end by the held clock:
		// long enough for the whole staging.
		"timeouts": map[string]any{"heartbeat": "10m", "queue": "1h", "run": "1h"},
	}); err != nil {
		return err
	}

	t0 := clk.hold()
	ids, err := api.triggerMany(ctx, "burst", n, 32, func(int) map[string]any { return map[string]any{"fail_first": true} })
	if err != nil {
		return err
	}
	staged := time.Now()
	if err := waitRetrying(ctx, st.Store, ids, 5*time.Minute); err != nil {
		return err
	}
	stagedIn := time.Since(staged)
	clk.resumeAt(t0.Add(burstRetry - burstLead))
	late, err := latenessWithin(ctx, st.Store, ids, 10*time.Minute)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("timer_burst%d_late", n)
	b.rep.figure(name+"_p50_ms", quantile(late, 0.50), "ms")
	b.rep.figure(name+"_p99_ms", quantile(late, 0.99), "ms")
	b.rep.figure(name+"_max_ms", quantile(late, 1), "ms")
	b.rep.note("timer burst: %d retry timers due at one instant (first attempts failed under a held clock, %.1f s to stage), dispatched by the ticker's pass: late p50 %.0f ms, p99 %.0f ms (target <= 1000), min %.0f, max %.0f",
		n, stagedIn.Seconds(), quantile(late, 0.5), quantile(late, 0.99), quantile(late, 0), quantile(late, 1))
	return nil
}

// waitRetrying polls the runs' one task until each waits for its retry.
func waitRetrying(ctx context.Context, st *store.Store, ids []string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	pending := ids
	for len(pending) > 0 {
		var mu sync.Mutex
		var still []string
		sem := make(chan struct{}, 16)
		var wg sync.WaitGroup
		for _, id := range pending {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				inst, err := st.GetInstance(ctx, ledger.InstanceKey{Run: id, Task: "main"})
				if err == nil && inst.Snapshot.State == statemodel.StateUpForRetry {
					return
				}
				mu.Lock()
				still = append(still, id)
				mu.Unlock()
			})
		}
		wg.Wait()
		pending = still
		if len(pending) > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%d of %d runs not waiting for their retry within %s (first: %s)", len(pending), len(ids), within, pending[0])
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}
