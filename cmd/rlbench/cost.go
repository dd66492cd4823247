package main

import (
	"context"
	"fmt"
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
	meter  *meter
	heat   *heatTrace
}

func (b *bench) startCostStack(ctx context.Context) (*costStack, error) {
	m, h := &meter{}, newHeatTrace()
	st, err := b.startStack(ctx, devstack.Options{
		TickInterval:    time.Hour,
		DynamoDBOptions: []func(*dynamodb.Options){m.dynamoOption, h.dynamoOption},
		SQSOptions:      []func(*sqs.Options){m.sqsOption},
		CapacityReports: m.storeReport,
	})
	if err != nil {
		return nil, err
	}
	return &costStack{Stack: st, meter: m, heat: h, reader: store.New(b.env.DynamoDBClient(), st.Info.Table, store.WithLogger(b.log))}, nil
}

// usage is everything the cost scenario counts, at one moment.
type usage struct {
	c local.Snapshot
	m meterCounts
	// run is the measured run's id; heat its calls' loads on each
	// partition (heatTrace).
	run  string
	heat []partitionLoad
}

func (cs *costStack) usage() usage { return usage{c: cs.Counters.Snapshot(), m: cs.meter.snapshot()} }

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
	d := usage{c: after.c.Sub(before.c), m: after.m.sub(before.m), run: id, heat: cs.heat.take()}
	c := runCost{
		SQSRequests: float64(d.c.SQSRequests() - d.m.EmptyReceives),
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
	}
	return c, d, nil
}

// cost measures one successful single-task run and one whose first attempt
// fails (retried after 1 s through the delay queue), three times each, and
// prices the median of each count per 1,000,000 runs.
func (b *bench) cost(ctx context.Context) error {
	cs, err := b.startCostStack(ctx)
	if err != nil {
		return err
	}
	defer cs.Stop(context.Background())
	stop, err := cs.StartWorker(app.Worker{
		Pool: pool, Name: "cost", Concurrency: 4, Handler: failFirst,
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
		{"name": "cost-limited", "pool": pool, "concurrency": map[string]any{"limit": 50}},
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
	}
	medians := map[string]runCost{}
	for _, k := range kinds {
		var samples []runCost
		var last usage
		for range 3 {
			c, u, err := cs.measure(ctx, api, k.job, k.params)
			if err != nil {
				return err
			}
			samples = append(samples, c)
			last = u
		}
		c := medianCost(samples)
		medians[k.name] = c
		total, parts := c.usd()
		p := "cost_" + k.name + "_"
		b.rep.figure(p+"dynamodb_rru", c.RRU, "RRU")
		b.rep.figure(p+"dynamodb_wru", c.WRU, "WRU")
		b.rep.figure(p+"sqs_requests", c.SQSRequests, "requests")
		b.rep.figure(p+"lambda_invocations", c.Invocations, "invocations")
		b.rep.figure(p+"lambda_gb_s", c.GBSeconds, "GB-s")
		b.rep.figure(p+"api_requests", c.APIRequests, "requests")
		b.rep.figure(p+"usd_per_1m_runs", total*1e6, "USD")
		b.rep.figure(p+"dynamodb_calls", c.DynamoDBCalls, "calls")
		b.rep.figure(p+"dynamodb_transactions", c.Transactions, "calls")
		target := ""
		if k.name == "single" {
			target = " (target <= $10)"
		}
		b.rep.note("cost, %s run: $%.2f per 1M runs%s at us-east-1 list prices of %s: %s\n"+
			"  per run (median of 3): %.1f RRU, %.1f WRU, %.0f SQS requests, %.0f Lambda invocations %s = %.4f GB-s, %.0f API requests\n"+
			"  last sample: DynamoDB %s; SQS %s, %d empty receives left out\n"+
			"  capacity: DynamoDB Local reported %.1f RCU for %d reads (%d without a figure) and %.1f WCU for %d writes, the latter not by\n"+
			"  DynamoDB's pricing for transactions: WRU are the store's computed %.1f WCU (items and index entries)",
			k.name, total*1e6, target, priceTableDate, fmtParts(parts),
			c.RRU, c.WRU, c.SQSRequests, c.Invocations, sortedCounts(c.invocationsByFn), c.GBSeconds, c.APIRequests,
			sortedCounts(last.c.DynamoDB), sortedCounts(last.c.SQS), last.m.EmptyReceives,
			last.m.ReportedRRU, last.m.ReadRequests, last.m.UnreportedReads, last.m.ReportedWCU, last.m.WriteRequests,
			last.m.ComputedWCU)
		b.rep.detail("  DynamoDB time of the last sample (calls x mean): %s", fmtLatency(last.m.Latency))
		if k.name == "single" {
			b.reportHeat(last, k.job)
		}
		b.rep.detail("  writes of the last sample (computed: item KB, x2 in a transaction; index entry writes x1):\n%s", fmtWrites(last.m.Writes))
	}
	return b.chainStepCost(ctx, cs, api, medians["single"])
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
	var samples []runCost
	for range 3 {
		c, _, err := cs.measure(ctx, api, "cost-chain", nil)
		if err != nil {
			return err
		}
		samples = append(samples, c)
	}
	chain := medianCost(samples)
	n := float64(costChainSteps - 1)
	step := runCost{
		RRU: (chain.RRU - single.RRU) / n, WRU: (chain.WRU - single.WRU) / n,
		SQSRequests: (chain.SQSRequests - single.SQSRequests) / n, Invocations: (chain.Invocations - single.Invocations) / n,
		GBSeconds: (chain.GBSeconds - single.GBSeconds) / n, APIRequests: (chain.APIRequests - single.APIRequests) / n,
		DynamoDBCalls: (chain.DynamoDBCalls - single.DynamoDBCalls) / n,
	}
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
