package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
	"github.com/runledger/runledger/statemodel"
	"github.com/runledger/runledger/statemodel/limiter"
)

// flow measures flow control on the local stack: single-task runs per
// second with a concurrency limit of 50 over the same without limits
// (flow_overhead_ratio), the time from an active run's end to the next
// waiting run's admission through a limit of 10 (flow_admit_p99_ms), and
// the most runs seen active in one limiter beyond its limit, from the
// runs' first dispatch to their end (flow_excess).
func (b *bench) flow(ctx context.Context, n int) error {
	st, err := b.startStack(ctx, devstack.Options{})
	if err != nil {
		return err
	}
	defer st.Stop(context.Background())
	var succeeded atomic.Int64
	stop, err := benchWorker(st, "flow", 64, func(ctx context.Context, t worker.Task) error {
		succeeded.Add(1)
		return nil
	})
	if err != nil {
		return err
	}
	defer stop()
	api := newAPIClient(st.Info.APIURL, st.Info.APIKey)
	burst := func(job string, conc map[string]any) (float64, []flowRun, error) {
		def := map[string]any{"name": job, "pool": pool}
		if conc != nil {
			def["concurrency"] = conc
		}
		if err := api.createJob(ctx, def); err != nil {
			return 0, nil, err
		}
		start := time.Now()
		ids, err := api.triggerMany(ctx, job, n, 32, func(int) map[string]any { return nil })
		if err != nil {
			return 0, nil, err
		}
		if _, err := waitRuns(ctx, st.Store, ids, 10*time.Minute); err != nil {
			return 0, nil, err
		}
		runs, last, err := b.flowRuns(ctx, st, ids)
		if err != nil {
			return 0, nil, err
		}
		return float64(n) / last.Sub(start).Seconds(), runs, nil
	}
	// A warm-up burst first: the emulators' first requests are slow, and
	// whichever burst came first would be measured on them.
	if _, _, err := burst("flowwarm", nil); err != nil {
		return err
	}
	// Pairs of bursts, without limits and then with a limit of 50, one
	// after the other: the ratio is the median of the pairs', so one burst
	// that met a pause of the machine does not decide it.
	var ratios []float64
	var pairs []string
	excess := 0
	for i := range flowPairs {
		free, _, err := burst(fmt.Sprintf("flowfree%d", i), nil)
		if err != nil {
			return err
		}
		lim50, runs50, err := burst(fmt.Sprintf("flow50-%d", i), map[string]any{"limit": 50})
		if err != nil {
			return err
		}
		excess = max(excess, flowExcess(runs50, 50))
		ratios = append(ratios, lim50/free)
		pairs = append(pairs, fmt.Sprintf("%.1f/%.1f", lim50, free))
	}
	_, runs10, err := burst("flow10", map[string]any{"limit": 10})
	if err != nil {
		return err
	}
	excess = max(excess, flowExcess(runs10, 10))
	admit := admitLatencies(runs10, 10)
	ratio := median(ratios)
	b.rep.figure("flow_overhead_ratio", ratio, "ratio")
	b.rep.figure("flow_admit_p99_ms", quantile(admit, 0.99), "ms")
	b.rep.figure("flow_excess", float64(excess), "runs")
	b.rep.note("flow: %d single-task runs a burst: runs/s with a concurrency limit of 50 over without, %d pairs: %s (median ratio %.2f, target >= 0.8); through a limit of 10, %d runs waited, end-to-admission p50 %.0f ms, p99 %.0f ms (target <= 200); excess %d (must be 0)",
		n, flowPairs, strings.Join(pairs, ", "), ratio, len(admit), quantile(admit, 0.5), quantile(admit, 0.99), excess)
	return nil
}

// flowPairs is how many pairs of bursts flow_overhead_ratio is the median
// of.
const flowPairs = 3

// flowRun is a run's active interval, its first dispatch to its end, and
// its creation.
type flowRun struct {
	created, start, end time.Time
}

// flowRuns reads each run's first dispatch and end; last is the latest
// end.
func (b *bench) flowRuns(ctx context.Context, st *devstack.Stack, ids []string) ([]flowRun, time.Time, error) {
	var out []flowRun
	var last time.Time
	for _, id := range ids {
		v, err := st.Store.ReadRun(ctx, id)
		if err != nil {
			return nil, last, err
		}
		if v.Run.ExecutionState != statemodel.RunSucceeded {
			return nil, last, fmt.Errorf("flow run %s ended %s", id, v.Run.ExecutionState)
		}
		var first time.Time
		for _, t := range v.Tasks {
			for _, a := range t.Instance.Snapshot.Attempts {
				if !a.QueuedAt.IsZero() && (first.IsZero() || a.QueuedAt.Before(first)) {
					first = a.QueuedAt
				}
			}
		}
		out = append(out, flowRun{created: v.Run.CreatedAt, start: first, end: v.Run.EndedAt})
		if v.Run.EndedAt.After(last) {
			last = v.Run.EndedAt
		}
	}
	return out, last, nil
}

// flowExcess answers the most runs active at once beyond limit, each
// from its first dispatch to its end.
func flowExcess(runs []flowRun, limit int) int {
	spans := make([]limiter.Span, len(runs))
	for i, r := range runs {
		spans[i] = limiter.Span{From: r.start, To: r.end}
	}
	return limiter.MostBeyond(spans, limit)
}

// admitLatencies answers, for each run that waited, the time from the
// latest end of another run before its dispatch to its dispatch, in ms. A
// run waited when it was created before that end; one created later found
// room (the triggers did not keep up with the limit) and is not counted:
// its dispatch followed its own creation, not a hand-off.
func admitLatencies(runs []flowRun, limit int) []float64 {
	byStart := slices.Clone(runs)
	slices.SortFunc(byStart, func(x, y flowRun) int { return x.start.Compare(y.start) })
	var ends []time.Time
	for _, r := range runs {
		ends = append(ends, r.end)
	}
	slices.SortFunc(ends, func(x, y time.Time) int { return x.Compare(y) })
	var out []float64
	for _, r := range byStart[min(limit, len(byStart)):] {
		i, _ := slices.BinarySearchFunc(ends, r.start, func(e, t time.Time) int {
			if e.After(t) {
				return 1
			}
			return -1
		})
		if i == 0 || !r.created.Before(ends[i-1]) {
			continue
		}
		out = append(out, ms(r.start.Sub(ends[i-1])))
	}
	return out
}
