package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/local"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/worker"
	"github.com/runledger/runledger/statemodel"
)

// costStack is the scenario's local stack (devstack) with the bench's
// meter on it: the store reports the capacity of its writes
// (store.WithCapacityReports), and the DynamoDB and SQS clients carry the
// meter (capacity on every call, empty receives). Its ticker and
// reconciler fire once at start and then hourly: their passes are a fixed
// cost per deployment (EventBridge calls them every minute whatever runs),
// not a cost of a run, and a run's timers reach the scheduler through the
// delay queue.
type costStack struct {
	*devstack.Stack
	reader *store.Store // uncounted: the bench's own polling costs nothing
	db     *dynamodb.Client
	meter  *meter
	heat   *heatTrace
	// logs counts the stack's log and metric lines; notices the entries
	// its EventBridge publisher would put on the bus.
	logs    *logMeter
	notices *noticeMeter
}

func (b *bench) startCostStack(ctx context.Context) (*costStack, error) {
	m, h, lm, nm := &meter{}, newHeatTrace(), &logMeter{}, &noticeMeter{}
	st, err := b.startStack(ctx, devstack.Options{
		TickInterval:    time.Hour,
		DynamoDBOptions: []func(*dynamodb.Options){m.dynamoOption, h.dynamoOption},
		SQSOptions:      []func(*sqs.Options){m.sqsOption},
		CapacityReports: m.storeReport,
		Logger:          slog.New(lm.handler(b.log.Handler())),
		Metrics:         &lm.metrics,
		Parts:           []app.Part{{Name: "bench-eventbridge", Notices: nm}},
	})
	if err != nil {
		return nil, err
	}
	db := b.env.DynamoDBClient()
	return &costStack{Stack: st, meter: m, heat: h, logs: lm, notices: nm, db: db,
		reader: store.New(db, st.Info.Table, store.WithLogger(b.log))}, nil
}

// usage is everything the cost scenario counts, at one moment.
type usage struct {
	c local.Snapshot
	m meterCounts
	// logBytes and noticeEvents are the log meter's and the notice
	// meter's counts.
	logBytes, noticeEvents int64
	// run is the measured run's id; heat its calls' loads on each
	// partition and tx the items its transactions named (heatTrace).
	run  string
	heat []partitionLoad
	tx   []txItem
}

func (cs *costStack) usage() usage {
	return usage{c: cs.Counters.Snapshot(), m: cs.meter.snapshot(), logBytes: cs.logs.bytes(), noticeEvents: cs.notices.events.Load()}
}

// activity is a fingerprint of the counts that work (not idle polling)
// moves: every request but ReceiveMessage, the receives that got messages,
// the invocations.
func (u usage) activity() string {
	sqsOps := maps.Clone(u.c.SQS)
	sqsOps["ReceiveMessage"] -= u.m.EmptyReceives
	return fmt.Sprint(u.c.DynamoDBRequests(), u.c.APIRequests, u.c.Invocations(), sqsOps)
}

// measure runs one run of job and returns what it consumed: counts from
// just before the trigger until the stack has been quiet for a second
// after the run ended (the last deletes follow the last write).
func (cs *costStack) measure(ctx context.Context, api *apiClient, job string, params map[string]any) (runCost, usage, error) {
	quiet := func() usage {
		last, lastChange := cs.usage(), time.Now()
		for time.Since(lastChange) < time.Second {
			time.Sleep(100 * time.Millisecond) // sampling the counters, not waiting for a state
			if u := cs.usage(); u.activity() != last.activity() {
				last, lastChange = u, time.Now()
			}
		}
		return last
	}
	cs.meter.clearWrites()
	before := quiet()
	storedBefore, err := storedBytes(ctx, cs.db, cs.Info.Table, time.Now())
	if err != nil {
		return runCost{}, usage{}, err
	}
	cs.heat.take()
	id, err := api.trigger(ctx, job, params)
	if err != nil {
		return runCost{}, usage{}, err
	}
	runs, err := waitRuns(ctx, cs.reader, []string{id}, time.Minute)
	if err != nil {
		return runCost{}, usage{}, err
	}
	if r := runs[id]; r.ExecutionState != statemodel.RunSucceeded {
		return runCost{}, usage{}, fmt.Errorf("cost run %s ended %s", id, r.ExecutionState)
	}
	after := quiet()
	storedAfter, err := storedBytes(ctx, cs.db, cs.Info.Table, time.Now())
	if err != nil {
		return runCost{}, usage{}, err
	}
	d := usage{c: after.c.Sub(before.c), m: after.m.sub(before.m), run: id,
		logBytes: after.logBytes - before.logBytes, noticeEvents: after.noticeEvents - before.noticeEvents}
	d.heat, d.tx = cs.heat.take()
	c := runCost{
		// Every request is one per started 64 KB of its payload.
		SQSRequests:       float64(d.c.SQSRequests() - d.m.EmptyReceives + d.m.SQSExtraChunks),
		EventBridgeEvents: float64(d.noticeEvents),
		// What the functions logged, Lambda's own lines of each
		// invocation, the API's access log line of each request.
		LogBytes:    float64(d.logBytes + d.c.Invocations()*int64(lambdaPlatformLogBytes()) + d.c.APIRequests*int64(len(apiAccessLogLine))),
		StoredBytes: storedAfter - storedBefore,
		Invocations: float64(d.c.Invocations()),
		APIRequests: float64(d.c.APIRequests),
		// A read the endpoint gives no figure for counts as one strongly
		// consistent read of at most 4 KB (every item here is smaller).
		RRU: d.m.ReportedRRU + float64(d.m.UnreportedReads),
		WRU: d.m.ComputedWCU,
	}
	for op, t := range d.m.Latency {
		c.DynamoDBCalls += float64(t.N)
		if op == "TransactWriteItems" {
			c.Transactions += float64(t.N)
		}
	}
	c.invocationsByFn = map[string]int64{}
	for fn, f := range d.c.Functions {
		c.invocationsByFn[fn] = f.Invocations
		c.GBSeconds += f.Duration.Seconds() * float64(lambdaMemoryMiB[fn]) / 1024
		c.LambdaSeconds += f.Duration.Seconds()
	}
	return c, d, nil
}

// cost measures one successful single-task run, one whose first attempt
// fails (retried after 1 s through the delay queue) and one of a job with
// a concurrency limit, three times each, and prices the median of each
// count per 1,000,000 runs; then a heartbeat, a chain's step, and the heat
// model's limits with a small map.
func (b *bench) cost(ctx context.Context) error {
	cs, err := b.startCostStack(ctx)
	if err != nil {
		return err
	}
	defer cs.Stop(context.Background())
	stop, err := cs.StartWorker(app.Worker{
		Pool: pool, Name: "cost", Concurrency: 4, Handler: costHandler,
		// One lease at start, none while measuring: leases are a cost per
		// worker process and minute, not per run.
		LeaseInterval: time.Hour,
	})
	if err != nil {
		return err
	}
	defer stop()
	api := newAPIClient(cs.Info.APIURL, cs.Info.APIKey)
	for _, def := range []map[string]any{
		{"name": "cost-ok", "pool": pool},
		{"name": "cost-retry", "pool": pool, "retry": map[string]any{"max_attempts": 2, "initial_interval": "1s", "jitter": "none"}},
		{"name": "cost-chain", "pool": pool, "tasks": chainTasks(costChainSteps)},
		{"name": "cost-limited", "pool": pool, "concurrency": map[string]any{"limit": costLimit}},
		{"name": "cost-limited-group", "pool": pool, "concurrency": map[string]any{"limit": costGroupLimit}},
		{"name": "cost-heartbeat", "pool": pool, "timeouts": map[string]any{"heartbeat": costHeartbeatTimeout.String()}},
	} {
		if err := api.createJob(ctx, def); err != nil {
			return err
		}
	}
	if _, _, err := cs.measure(ctx, api, "cost-ok", nil); err != nil { // warm-up
		return err
	}
	kinds := []struct {
		name, job string
		params    map[string]any
	}{
		{"single", "cost-ok", nil},
		{"retry", "cost-retry", map[string]any{"fail_first": true}},
		{"limited", "cost-limited", nil},
		{"limited_group", "cost-limited-group", nil},
	}
	medians := map[string]runCost{}
	lasts := map[string]usage{}
	for _, k := range kinds {
		c, last, err := cs.measureMedian(ctx, api, k.job, k.params)
		if err != nil {
			return err
		}
		medians[k.name], lasts[k.name] = c, last
		b.reportCost(k.name, c, last)
	}
	if err := b.heartbeatCost(ctx, cs, api, medians["single"]); err != nil {
		return err
	}
	if err := b.chainStepCost(ctx, cs, api, medians["single"]); err != nil {
		return err
	}
	if err := b.paramsCost(ctx, cs, api, medians["single"]); err != nil {
		return err
	}
	return b.reportLimits(ctx, cs, api, medians, lasts)
}

// costLimit is the cost-limited job's concurrency limit: one limiter
// item. costGroupLimit is the cost-limited-group job's: a group of
// limiter.Shards(costGroupLimit) shards, the size whose admissions a
// second the heat model answers.
const (
	costLimit      = 50
	costGroupLimit = 10000
)

// costHeartbeatTimeout is the cost-heartbeat job's heartbeat timeout: its
// worker beats every third of it (docs/api.md, heartbeat_interval).
const costHeartbeatTimeout = 3 * time.Second

// costHandler is failFirst, and holds an attempt for the duration its
// params name ({"hold": "2500ms"}): the work during which the worker
// heartbeats.
func costHandler(ctx context.Context, t worker.Task) error {
	var p struct {
		Hold string `json:"hold"`
	}
	if len(t.Params) > 0 && json.Unmarshal(t.Params, &p) == nil && p.Hold != "" {
		d, err := time.ParseDuration(p.Hold)
		if err != nil {
			return fmt.Errorf("hold %q: %w", p.Hold, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d): // the task's work, not a wait for a state
		}
	}
	return failFirst(ctx, t)
}

// measureMedian measures three runs of job and answers the median of each
// count and the last sample's usage.
func (cs *costStack) measureMedian(ctx context.Context, api *apiClient, job string, params map[string]any) (runCost, usage, error) {
	var samples []runCost
	var last usage
	for range 3 {
		c, u, err := cs.measure(ctx, api, job, params)
		if err != nil {
			return runCost{}, usage{}, err
		}
		samples = append(samples, c)
		last = u
	}
	return medianCost(samples), last, nil
}

// reportCost prints one kind of run's figures and its note.
func (b *bench) reportCost(kind string, c runCost, last usage) {
	total, parts := c.usd()
	p := "cost_" + kind + "_"
	b.rep.figure(p+"dynamodb_rru", c.RRU, "RRU")
	b.rep.figure(p+"dynamodb_wru", c.WRU, "WRU")
	b.rep.figure(p+"sqs_requests", c.SQSRequests, "requests")
	b.rep.figure(p+"lambda_invocations", c.Invocations, "invocations")
	b.rep.figure(p+"lambda_gb_s", c.GBSeconds, "GB-s")
	b.rep.figure(p+"api_requests", c.APIRequests, "requests")
	b.rep.figure(p+"eventbridge_events", c.EventBridgeEvents, "events")
	b.rep.figure(p+"log_bytes", c.LogBytes, "bytes")
	b.rep.figure(p+"stored_bytes", c.StoredBytes, "bytes")
	b.rep.figure(p+"usd_per_1m_runs", total*1e6, "USD")
	b.rep.figure(p+"dynamodb_calls", c.DynamoDBCalls, "calls")
	b.rep.figure(p+"dynamodb_transactions", c.Transactions, "calls")
	target := ""
	switch kind {
	case "single":
		target = " (target <= $10)"
	case "limited", "limited_group":
		target = " (target <= $14)"
	}
	b.rep.note("cost, %s run: $%.2f per 1M runs%s at us-east-1 list prices of %s: %s\n"+
		"  per run (median of 3): %.1f RRU, %.1f WRU, %.0f SQS requests, %.0f Lambda invocations %s = %.4f GB-s, %.0f API requests,\n"+
		"  %.0f EventBridge events, %.0f log bytes (last sample: %d from the functions' lines and metrics at Info, %d B of Lambda's lines x %d invocations,\n"+
		"  %d B of access log x %d API requests), %.0f stored bytes kept a month (items and index entries with 100 B each; point-in-time recovery %v)\n"+
		"  last sample: DynamoDB %s; SQS %s, %d empty receives left out\n"+
		"  capacity: DynamoDB Local reported %.1f RCU for %d reads (%d without a figure) and %.1f WCU for %d writes, the latter not by\n"+
		"  DynamoDB's pricing for transactions: WRU are the store's computed %.1f WCU (items and index entries)",
		kind, total*1e6, target, priceTableDate, fmtParts(parts),
		c.RRU, c.WRU, c.SQSRequests, c.Invocations, sortedCounts(c.invocationsByFn), c.GBSeconds, c.APIRequests,
		c.EventBridgeEvents, c.LogBytes, last.logBytes, lambdaPlatformLogBytes(), last.c.Invocations(),
		len(apiAccessLogLine), last.c.APIRequests, c.StoredBytes, stackPITR,
		sortedCounts(last.c.DynamoDB), sortedCounts(last.c.SQS), last.m.EmptyReceives,
		last.m.ReportedRRU, last.m.ReadRequests, last.m.UnreportedReads, last.m.ReportedWCU, last.m.WriteRequests,
		last.m.ComputedWCU)
	b.rep.detail("  DynamoDB time of the last sample (calls x mean): %s", fmtLatency(last.m.Latency))
	b.rep.detail("  writes of the last sample (computed: item KB, x2 in a transaction; index entry writes x1):\n%s", fmtWrites(last.m.Writes))
}

// costHeartbeatHold is how long the cost-heartbeat job's attempt works:
// two beats at costHeartbeatTimeout's interval, and some margin.
const costHeartbeatHold = 2500 * time.Millisecond

// heartbeatCost measures a run whose attempt works long enough to beat
// (median of 3) and prices one heartbeat: the run less a single-task run,
// over the API requests it added (a heartbeat is one API request). A
// minute of a running task at the default heartbeat timeout (60 s) beats
// every 20 s: three heartbeats.
func (b *bench) heartbeatCost(ctx context.Context, cs *costStack, api *apiClient, single runCost) error {
	hb, _, err := cs.measureMedian(ctx, api, "cost-heartbeat", map[string]any{"hold": costHeartbeatHold.String()})
	if err != nil {
		return err
	}
	beats := hb.APIRequests - single.APIRequests
	if beats < 1 {
		return fmt.Errorf("heartbeat cost: the held run made %.0f API requests, a single-task run %.0f: no heartbeat to price", hb.APIRequests, single.APIRequests)
	}
	// A count the held run shows below the single run's is the noise of
	// two measurements (Lambda time on a loaded machine): a heartbeat adds
	// nothing there, so it counts 0.
	one := hb.minus(single).scaled(1 / beats).atLeastZero()
	total, parts := one.usd()
	perMinute := 3 * total
	b.rep.figure("cost_heartbeat_usd_per_1m", total*1e6, "USD")
	b.rep.figure("cost_heartbeat_dynamodb_wru", one.WRU, "WRU")
	b.rep.note("cost, a heartbeat: $%.2f per 1M heartbeats ((a run holding %s with a %s heartbeat timeout - a single-task run) / its %.0f heartbeats, medians of 3; a count below 0 counts 0): %s\n"+
		"  per heartbeat %.1f WRU, %.1f RRU, %.1f API requests, %.1f Lambda invocations, %.0f log bytes; a minute of a running task at the\n"+
		"  default heartbeat timeout (60 s: a beat every 20 s) costs $%.2f per 1M runs",
		total*1e6, costHeartbeatHold, costHeartbeatTimeout, beats, fmtParts(parts),
		one.WRU, one.RRU, one.APIRequests, one.Invocations, one.LogBytes, perMinute*1e6)
	return nil
}

// costParamsBytes is the size of the encoded params of the cost
// scenario's run with large params.
const costParamsBytes = 4096

// paramsCost measures a single-task run whose params are costParamsBytes
// of JSON (median of 3) and what they add to a single-task run without:
// the writes that carry them (docs/store.md, "A run's params"), and the
// reads of the claim and the run's advances that answer them.
func (b *bench) paramsCost(ctx context.Context, cs *costStack, api *apiClient, single runCost) error {
	const frame = len(`{"blob":""}`)
	params := map[string]any{"blob": strings.Repeat("p", costParamsBytes-frame)}
	withParams, last, err := cs.measureMedian(ctx, api, "cost-ok", params)
	if err != nil {
		return err
	}
	extra := withParams.minus(single)
	total, _ := withParams.usd()
	b.rep.figure("cost_params4k_dynamodb_wru", withParams.WRU, "WRU")
	b.rep.figure("cost_params4k_extra_wru", extra.WRU, "WRU")
	b.rep.figure("cost_params4k_dynamodb_rru", withParams.RRU, "RRU")
	b.rep.figure("cost_params4k_dynamodb_calls", withParams.DynamoDBCalls, "calls")
	b.rep.note("cost, a single-task run with %d B of params: $%.2f per 1M runs, %.1f WRU (%.1f over the run without params), %.1f RRU (%+.1f),\n"+
		"  %.1f DynamoDB calls (%+.1f), medians of 3",
		costParamsBytes, total*1e6, withParams.WRU, extra.WRU, withParams.RRU, extra.RRU, withParams.DynamoDBCalls, extra.DynamoDBCalls)
	b.rep.detail("  writes of the last sample (computed: item KB, x2 in a transaction; index entry writes x1):\n%s", fmtWrites(last.m.Writes))
	return nil
}

// costChainSteps is the length of the chain whose marginal step the cost
// scenario prices.
const costChainSteps = 10

// chainStepCost measures a run of costChainSteps sequential tasks three
// times and prices one step of it: the median chain run less the median
// single-task run, over the steps it adds. That is what a step of a
// multi-task run costs beyond the run's own fixed part (trigger, creation,
// the run's start and end).
func (b *bench) chainStepCost(ctx context.Context, cs *costStack, api *apiClient, single runCost) error {
	chain, _, err := cs.measureMedian(ctx, api, "cost-chain", nil)
	if err != nil {
		return err
	}
	step := chain.minus(single).scaled(1 / float64(costChainSteps-1))
	total, parts := step.usd()
	b.rep.figure("cost_chain_step_usd_per_1m_steps", total*1e6, "USD")
	b.rep.figure("cost_chain_step_dynamodb_calls", step.DynamoDBCalls, "calls")
	b.rep.note("cost, a step of a chain: $%.2f per 1M steps ((a %d-task chain run - a single-task run) / %d, medians of 3): %s\n"+
		"  per step %.1f RRU, %.1f WRU, %.1f DynamoDB calls, %.1f SQS requests, %.1f Lambda invocations, %.1f API requests",
		total*1e6, costChainSteps, costChainSteps-1, fmtParts(parts),
		step.RRU, step.WRU, step.DynamoDBCalls, step.SQSRequests, step.Invocations, step.APIRequests)
	return nil
}

// chainTasks is the task list of a chain of n sequential tasks.
func chainTasks(n int) []map[string]any {
	tasks := make([]map[string]any, n)
	for i := range tasks {
		tasks[i] = map[string]any{"id": fmt.Sprintf("s%02d", i)}
		if i > 0 {
			tasks[i]["depends_on"] = []string{fmt.Sprintf("s%02d", i-1)}
		}
	}
	return tasks
}

func medianCost(cs []runCost) runCost {
	pick := func(f func(runCost) float64) float64 {
		xs := make([]float64, len(cs))
		for i, c := range cs {
			xs[i] = f(c)
		}
		return median(xs)
	}
	m := runCost{
		EventBridgeEvents: pick(func(c runCost) float64 { return c.EventBridgeEvents }),
		LogBytes:          pick(func(c runCost) float64 { return c.LogBytes }),
		StoredBytes:       pick(func(c runCost) float64 { return c.StoredBytes }),
		LambdaSeconds:     pick(func(c runCost) float64 { return c.LambdaSeconds }),

		RRU:         pick(func(c runCost) float64 { return c.RRU }),
		WRU:         pick(func(c runCost) float64 { return c.WRU }),
		SQSRequests: pick(func(c runCost) float64 { return c.SQSRequests }),
		Invocations: pick(func(c runCost) float64 { return c.Invocations }),
		GBSeconds:   pick(func(c runCost) float64 { return c.GBSeconds }),
		APIRequests: pick(func(c runCost) float64 { return c.APIRequests }),

		DynamoDBCalls: pick(func(c runCost) float64 { return c.DynamoDBCalls }),
		Transactions:  pick(func(c runCost) float64 { return c.Transactions }),
	}
	m.invocationsByFn = cs[len(cs)-1].invocationsByFn
	return m
}

func fmtParts(parts map[string]float64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(parts)) {
		out = append(out, fmt.Sprintf("%s $%.2f", k, parts[k]*1e6))
	}
	return strings.Join(out, " + ")
}

func sortedCounts(m map[string]int64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return "{" + strings.Join(out, " ") + "}"
}

// fmtWrites lists the store's writes: operation, item sizes, index entry
// sizes and computed units.
func fmtWrites(ws []store.CapacityReport) string {
	var out []string
	for _, w := range ws {
		out = append(out, fmt.Sprintf("    %-18s items %v B, index entries %v B: %.0f + %.0f WCU", w.Operation, w.ItemSizes, w.IndexWriteSizes, w.TableWCU(), w.IndexWCU()))
	}
	return strings.Join(out, "\n")
}

func fmtLatency(l map[string]opTime) string {
	var out []string
	var total time.Duration
	for _, op := range slices.Sorted(maps.Keys(l)) {
		t := l[op]
		total += t.Total
		out = append(out, fmt.Sprintf("%s %d x %.1f ms", op, t.N, ms(t.Total)/float64(t.N)))
	}
	return fmt.Sprintf("%.0f ms in all: %s", ms(total), strings.Join(out, ", "))
}
