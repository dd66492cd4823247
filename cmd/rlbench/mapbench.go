package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/worker"
	"github.com/runledger/runledger/statemodel"
)

// mapBench runs a job of one map task over n no-op children (max_parallel
// 100) on the metered stack and answers its wall time and its DynamoDB
// calls by kind, and their time, per child.
func (b *bench) mapRun(ctx context.Context, cs *costStack, api *apiClient, n int) (id string, wall time.Duration, perChild map[string]float64, stepMS float64, err error) {
	items := make([]int, n)
	for i := range items {
		items[i] = i
	}
	job := fmt.Sprintf("map-%d", n)
	if err := api.createJob(ctx, map[string]any{"name": job, "pool": pool,
		"tasks": []any{map[string]any{"id": "each", "map": map[string]any{"over": "{{json .Params.items}}", "max_parallel": 100}}}}); err != nil {
		return "", 0, nil, 0, err
	}
	before := cs.meter.snapshot()
	t0 := time.Now()
	id, err = api.trigger(ctx, job, map[string]any{"items": items})
	if err != nil {
		return "", 0, nil, 0, err
	}
	runs, err := b.waitMap(ctx, cs, id, 30*time.Minute)
	if err != nil {
		return "", 0, nil, 0, err
	}
	wall = time.Since(t0)
	if r := runs[id]; r.ExecutionState != statemodel.RunSucceeded {
		return "", 0, nil, 0, fmt.Errorf("map run %s ended %s", id, r.ExecutionState)
	}
	d := cs.meter.snapshot().sub(before)
	perChild = map[string]float64{}
	var total time.Duration
	for op, t := range d.Latency {
		perChild[op] = float64(t.N) / float64(n)
		total += t.Total
	}
	return id, wall, perChild, ms(total) / float64(n), nil
}

// waitMap waits for a map run to end, within. The metered stack's ticker
// runs hourly (its calls stay out of the figures), but a deployment's
// runs every minute, and it is what picks up the work a request that
// outlived its function's timeout left to its timers (children written
// and not dispatched): under a heavy load a map stalls on such work. So a
// minute in which the map did not move gets one ticker pass, as a
// deployment's ticker would give it, and the pass is logged.
func (b *bench) waitMap(ctx context.Context, cs *costStack, id string, within time.Duration) (map[string]ledger.Run, error) {
	deadline := time.Now().Add(within)
	var last ledger.MapState
	for {
		runs, err := waitRuns(ctx, cs.reader, []string{id}, time.Minute)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return runs, err
		}
		m, err := cs.reader.GetMap(ctx, id, "each")
		if err != nil {
			return nil, err
		}
		if m == last {
			st, err := cs.Service.Tick(ctx)
			b.log.WarnContext(ctx, "map: no progress for a minute; one ticker pass, as a deployment's every minute",
				"run_id", id, "next", m.Next, "succeeded", m.Succeeded, "pass", fmt.Sprintf("%+v", st), "err", err)
		}
		last = m
	}
}

// mapPace answers how long the last quarter of a map's children (by
// index, the order they are released in) took to end against the first
// quarter, in one run: above 1 a map slows down as it goes (a step whose
// cost grows with the children before it), whatever the machine's load
// did to the run as a whole.
func mapPace(ctx context.Context, st *store.Store, id string) (float64, error) {
	var ends []time.Time
	token := ""
	for {
		page, next, err := st.ListChildren(ctx, id, "each", 1000, token)
		if err != nil {
			return 0, err
		}
		for _, c := range page {
			if a, ok := c.Snapshot.Current(); ok {
				ends = append(ends, a.EndedAt)
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	q := len(ends) / 4
	if q < 2 {
		return 0, fmt.Errorf("map run %s: %d children read", id, len(ends))
	}
	span := func(from, to int) time.Duration {
		lo, hi := ends[from], ends[from]
		for _, t := range ends[from:to] {
			lo, hi = minTime(lo, t), maxTime(hi, t)
		}
		return hi.Sub(lo)
	}
	return span(len(ends)-q, len(ends)).Seconds() / span(0, q).Seconds(), nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// mapPage answers the median time of the API answers the dashboard's run
// page of a map run needs, one after another as the page asks for them:
// the run, the map task's history, the first page of its children.
func mapPage(ctx context.Context, api *apiClient, id string) (time.Duration, error) {
	paths := []string{"/v1/runs/" + id, "/v1/runs/" + id + "/tasks/each/history?limit=1000",
		"/v1/runs/" + id + "/tasks/each/children?limit=100"}
	times := make([]time.Duration, 5)
	for i := range times {
		t0 := time.Now()
		for _, p := range paths {
			if _, err := api.do(ctx, http.MethodGet, p, nil, http.StatusOK); err != nil {
				return 0, err
			}
		}
		times[i] = time.Since(t0)
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}

// mapScenario is the map scenario: a map of 100 and one of children
// no-op children, their calls per child by kind against a single-task
// run's, the parent reads per child, and how a child's DynamoDB time
// scales between them.
func (b *bench) mapScenario(ctx context.Context, children int) error {
	cs, err := b.startCostStack(ctx)
	if err != nil {
		return err
	}
	defer cs.Stop(context.Background())
	stop, err := cs.StartWorker(app.Worker{
		Pool: pool, Name: "map", Concurrency: 120, LeaseInterval: time.Hour,
		Handler: func(context.Context, worker.Task) error { return nil },
	})
	if err != nil {
		return err
	}
	defer stop()
	api := newAPIClient(cs.Info.APIURL, cs.Info.APIKey)
	if err := api.createJob(ctx, map[string]any{"name": "map-single", "pool": pool}); err != nil {
		return err
	}
	single, _, err := cs.measure(ctx, api, "map-single", nil)
	if err != nil {
		return err
	}
	_, _, _, smallStep, err := b.mapRun(ctx, cs, api, 100)
	if err != nil {
		return err
	}
	id, wall, big, bigStep, err := b.mapRun(ctx, cs, api, children)
	if err != nil {
		return err
	}
	page, err := mapPage(ctx, api, id)
	if err != nil {
		return err
	}
	pace, err := mapPace(ctx, cs.reader, id)
	if err != nil {
		return err
	}
	b.rep.figure(fmt.Sprintf("map_%dk_wall_s", children/1000), wall.Seconds(), "s")
	b.rep.figure(fmt.Sprintf("map_%dk_page_ms", children/1000), ms(page), "ms")
	sum := 0.0
	for _, op := range slices.Sorted(maps.Keys(big)) {
		b.rep.figure("map_calls_per_child_"+op, big[op], "calls")
		sum += big[op]
	}
	b.rep.figure("map_calls_per_child", sum, "calls")
	b.rep.figure("map_single_run_calls", single.DynamoDBCalls, "calls")
	// A child's step reads the map item with its count shards in one Query
	// (and the map's end pages the children, 1,000 a Query): the Queries
	// per child are the parent's reads.
	b.rep.figure("map_parent_reads_per_child", big["Query"], "reads")
	b.rep.figure("map_child_step_ratio_10k_vs_100", bigStep/smallStep, "ratio")
	b.rep.figure("map_last_vs_first_quarter", pace, "ratio")
	b.rep.note("map: %d no-op children (max_parallel 100) in %.1f s; %.2f DynamoDB calls per child (single-task run: %.0f; target <= %.0f) %v;\n"+
		"  DynamoDB time per child %.2f ms (map of 100: %.2f ms, ratio %.2f, target <= 1.2);\n"+
		"  its last quarter of children took %.2f times its first; its run page's API answers %.0f ms",
		children, wall.Seconds(), sum, single.DynamoDBCalls, single.DynamoDBCalls+2, big, bigStep, smallStep, bigStep/smallStep, pace, ms(page))
	return nil
}
