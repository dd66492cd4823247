package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
	"github.com/runledger/runledger/statemodel"
)

// throughput starts n single-task runs in one burst (at most 32 API calls
// in flight), every tenth failing its first attempt, with one worker of
// concurrency 64, and reports the wall time from the first trigger to the
// last run's ended_at, runs per second, and the p50 and p99 run latency
// (created_at to ended_at).
func (b *bench) throughput(ctx context.Context, n int) error {
	res, err := b.burst(ctx, n, devstack.Options{})
	if err != nil {
		return err
	}
	b.rep.figure("throughput_wall_s", res.wall.Seconds(), "s")
	b.rep.figure("throughput_runs_per_s", res.rate, "runs/s")
	b.rep.figure("throughput_latency_p50_ms", quantile(res.lat, 0.50), "ms")
	b.rep.figure("throughput_latency_p99_ms", quantile(res.lat, 0.99), "ms")
	b.rep.note("throughput: %d single-task runs (10%% failing once, retry 100 ms x2), worker concurrency 64: all triggered in %.1f s, all ended after %.1f s = %.1f runs/s (target >= 55); latency p50 %.0f ms, p99 %.0f ms",
		n, res.triggered.Seconds(), res.wall.Seconds(), res.rate, quantile(res.lat, 0.50), quantile(res.lat, 0.99))
	return nil
}

// burstResult is one burst's measure: when all were triggered and all
// ended (from the first trigger), runs per second, and each run's latency
// in ms.
type burstResult struct {
	triggered, wall time.Duration
	rate            float64
	lat             []float64
}

// burst is the throughput scenario's burst of n runs on a stack of its
// own started with o.
func (b *bench) burst(ctx context.Context, n int, o devstack.Options) (burstResult, error) {
	st, err := b.startStack(ctx, o)
	if err != nil {
		return burstResult{}, err
	}
	defer st.Stop(context.Background())
	var succeeded atomic.Int64
	allDone := make(chan struct{})
	stop, err := benchWorker(st, "throughput", 64, func(ctx context.Context, t worker.Task) error {
		err := failFirst(ctx, t)
		if err == nil && succeeded.Add(1) == int64(n) {
			close(allDone)
		}
		return err
	})
	if err != nil {
		return burstResult{}, err
	}
	defer stop()
	api := newAPIClient(st.Info.APIURL, st.Info.APIKey)
	if err := api.createJob(ctx, map[string]any{
		"name": "tput", "pool": pool,
		"retry": map[string]any{"max_attempts": 3, "initial_interval": "100ms", "backoff_coefficient": 2},
	}); err != nil {
		return burstResult{}, err
	}

	start := time.Now()
	ids, err := api.triggerMany(ctx, "tput", n, 32, func(i int) map[string]any {
		if i%10 == 9 {
			return map[string]any{"fail_first": true}
		}
		return nil
	})
	if err != nil {
		return burstResult{}, err
	}
	triggered := time.Since(start)
	select {
	case <-allDone:
	case <-time.After(10 * time.Minute):
		return burstResult{}, fmt.Errorf("throughput: %d of %d runs' tasks succeeded within 10 min", succeeded.Load(), n)
	case <-ctx.Done():
		return burstResult{}, ctx.Err()
	}
	runs, err := waitRuns(ctx, st.Store, ids, 2*time.Minute)
	if err != nil {
		return burstResult{}, err
	}
	var lat []float64
	var last time.Time
	for _, id := range ids {
		r := runs[id]
		if r.ExecutionState != statemodel.RunSucceeded {
			return burstResult{}, fmt.Errorf("throughput run %s ended %s", id, r.ExecutionState)
		}
		lat = append(lat, ms(r.EndedAt.Sub(r.CreatedAt)))
		if r.EndedAt.After(last) {
			last = r.EndedAt
		}
	}
	wall := last.Sub(start)
	return burstResult{triggered: triggered, wall: wall, rate: float64(n) / wall.Seconds(), lat: lat}, nil
}
