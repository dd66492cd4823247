package main

import (
	"context"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// timerPace spaces the paced runs' triggers: 10 a second, well within what
// the local stack sustains, so their lateness is the timer path's own.
const timerPace = 100 * time.Millisecond

// timerPrecision runs n single-task runs whose first attempt fails, with a
// 2 s retry delay and no jitter, and reports how late attempt 2 was
// dispatched: the observed_at of its dispatch.accepted transition (the
// attempt's queued_at) minus the retry_at the UP_FOR_RETRY transition
// stored. It does so twice: n runs started 10 a second (timer_late_*, the
// figure the target is about), then n runs started in one burst, whose
// timers all come due within the same second (timer_burst_late_*: the
// timer path's queueing).
func (b *bench) timerPrecision(ctx context.Context, n int) error {
	st, err := b.startStack(ctx, devstack.Options{})
	if err != nil {
		return err
	}
	defer st.Stop(context.Background())
	stop, err := benchWorker(st, "timer", 16, failFirst)
	if err != nil {
		return err
	}
	defer stop()
	api := newAPIClient(st.Info.APIURL, st.Info.APIKey)
	if err := api.createJob(ctx, map[string]any{
		"name": "timer", "pool": pool,
		"retry": map[string]any{"max_attempts": 2, "initial_interval": "2s", "backoff_coefficient": 2, "jitter": "none"},
	}); err != nil {
		return err
	}
	failing := map[string]any{"fail_first": true}

	var paced []string
	tick := time.NewTicker(timerPace)
	for range n {
		id, err := api.trigger(ctx, "timer", failing)
		if err != nil {
			tick.Stop()
			return err
		}
		paced = append(paced, id)
		<-tick.C
	}
	tick.Stop()
	late, err := lateness(ctx, st.Store, paced)
	if err != nil {
		return err
	}
	burst, err := api.triggerMany(ctx, "timer", n, 10, func(int) map[string]any { return failing })
	if err != nil {
		return err
	}
	burstLate, err := lateness(ctx, st.Store, burst)
	if err != nil {
		return err
	}

	b.rep.figure("timer_late_p50_ms", quantile(late, 0.50), "ms")
	b.rep.figure("timer_late_p99_ms", quantile(late, 0.99), "ms")
	b.rep.figure("timer_burst_late_p50_ms", quantile(burstLate, 0.50), "ms")
	b.rep.figure("timer_burst_late_p99_ms", quantile(burstLate, 0.99), "ms")
	b.rep.note("timer precision: runs retried 2 s after a failure (jitter none); attempt 2 dispatched after retry_at by (target p99 <= 1 s)\n"+
		"  %d runs started 10/s:     p50 %.0f ms, p99 %.0f ms (min %.0f, max %.0f)\n"+
		"  %d runs started at once:  p50 %.0f ms, p99 %.0f ms (min %.0f, max %.0f)",
		n, quantile(late, 0.5), quantile(late, 0.99), quantile(late, 0), quantile(late, 1),
		n, quantile(burstLate, 0.5), quantile(burstLate, 0.99), quantile(burstLate, 0), quantile(burstLate, 1))
	return nil
}

// lateness waits for the runs to succeed and returns each one's retry
// lateness in milliseconds.
func lateness(ctx context.Context, st *store.Store, ids []string) ([]float64, error) {
	return latenessWithin(ctx, st, ids, 3*time.Minute)
}

// latenessWithin is lateness, waiting for the runs at most within.
func latenessWithin(ctx context.Context, st *store.Store, ids []string, within time.Duration) ([]float64, error) {
	runs, err := waitRuns(ctx, st, ids, within)
	if err != nil {
		return nil, err
	}
	var late []float64
	for _, id := range ids {
		if r := runs[id]; r.ExecutionState != statemodel.RunSucceeded {
			return nil, fmt.Errorf("timer run %s ended %s", id, r.ExecutionState)
		}
		d, err := retryLateness(ctx, st, ledger.InstanceKey{Run: id, Task: "main"})
		if err != nil {
			return nil, err
		}
		late = append(late, ms(d))
	}
	return late, nil
}

// retryLateness reads an instance's history: attempt 2's dispatch minus the
// retry_at of the UP_FOR_RETRY transition before it.
func retryLateness(ctx context.Context, st *store.Store, key ledger.InstanceKey) (time.Duration, error) {
	h, err := st.FullHistory(ctx, key)
	if err != nil {
		return 0, err
	}
	var retryAt, dispatched time.Time
	for _, tr := range h {
		switch {
		case tr.To == statemodel.StateUpForRetry:
			retryAt = tr.RetryAt
		case tr.Event == statemodel.EvDispatched && tr.Attempt == 2:
			dispatched = tr.ObservedAt
		}
	}
	if retryAt.IsZero() || dispatched.IsZero() {
		return 0, fmt.Errorf("history of %s: no retry_at or no dispatch of attempt 2 in %d records", key, len(h))
	}
	return dispatched.Sub(retryAt), nil
}
