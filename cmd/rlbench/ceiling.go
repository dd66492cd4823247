package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/runledger/runledger/statemodel/limiter"
)

// costMapChildren is the size of the map the cost scenario runs to
// measure what one map's children put on each partition.
const costMapChildren = 20

// demandOf is what the measured run (u, of job; c its median counts) asks
// of the deployment's limits.
func demandOf(u usage, job string, c runCost) runDemand {
	shards := shardCounts()
	return runDemand{
		Shapes:      groupShapes(u.heat, u.run, job, shards),
		APIRequests: c.APIRequests, LambdaSeconds: c.LambdaSeconds,
		Conflicts: conflictLoads(u.tx, u.run, job, shards), TxSeconds: c.TxSeconds,
	}
}

// reportLimits prints the heat model of the single-task run (its key
// shapes), the deployment's ceiling and one job's from every limit that
// binds, one map's children a second (a map of costMapChildren measured
// here) and the admissions a second of one limiter group (from the
// limited_group run) and of one limiter item (the limited run).
func (b *bench) reportLimits(ctx context.Context, cs *costStack, api *apiClient, medians map[string]runCost, lasts map[string]usage) error {
	// How long a transaction holds its items: the fastest the scenario
	// measured, as the least disturbed by whatever else loads the machine
	// (DynamoDB Local's times under load say nothing of AWS's).
	tx := cs.fastestTransaction()
	for k, c := range medians {
		c.TxSeconds = tx
		medians[k] = c
	}
	single := demandOf(lasts["single"], "cost-ok", medians["single"])
	b.reportHeat(lasts["single"], "cost-ok")
	ls := limits(single)
	ceil, raised, one := ceiling(ls, false, false), ceiling(ls, false, true), ceiling(ls, true, true)
	b.rep.figureNamed("scale_ceiling_runs_per_s", ceil.Rate, "runs/s", ceil.Name)
	b.rep.figureNamed("scale_ceiling_runs_per_s_quotas_raised", raised.Rate, "runs/s", raised.Name)
	b.rep.figureNamed("scale_max_runs_per_s_one_job", one.Rate, "runs/s", one.Name)

	oneItem := limiterRate(demandOf(lasts["limited"], "cost-limited", medians["limited"]))
	b.rep.figureNamed("scale_limiter_item_admissions_per_s", oneItem.Rate, "runs/s", oneItem.Name)
	lim := limiterGroupRate(demandOf(lasts["limited_group"], "cost-limited-group", medians["limited_group"]), limiter.Shards(costGroupLimit))
	b.rep.figureNamed("scale_limiter_admissions_per_s", lim.Rate, "runs/s", lim.Name)

	cs.heat.take()
	id, _, _, _, err := b.mapRun(ctx, cs, api, costMapChildren)
	if err != nil {
		return err
	}
	loads, items := cs.heat.take()
	mapJob := fmt.Sprintf("map-%d", costMapChildren)
	children := mapChildRate(loads, items, costMapChildren, tx, id, mapJob)
	b.rep.figureNamed("scale_map_children_per_s", children.Rate, "children/s", children.Name)

	b.rep.note("limits, single-task run: the deployment's ceiling %.0f runs/s (by %s); with the adjustable quotas raised (%s) %.0f runs/s\n"+
		"  (by %s; target >= 10000); one job %.0f runs/s with them raised (by %s; target >= 1000); one group of %d (%d shard limiters,\n"+
		"  each run in one) admits %.0f runs/s (by %s, every shard's; target >= 1000), one limiter item (a limit of %d) %.0f runs/s\n"+
		"  (by %s); one map's children %.0f a second (by %s, a map of %d; target >= 1000). A transaction is\n"+
		"  taken to hold its items for the fastest one the scenario measured on DynamoDB Local (%.1f ms); a run's Lambda time is its invocations' %.3f s.\n%s",
		ceil.Rate, ceil.Name, adjustableNames(), raised.Rate, raised.Name, one.Rate, one.Name, costGroupLimit, limiter.Shards(costGroupLimit), lim.Rate, lim.Name,
		costLimit, oneItem.Rate, oneItem.Name,
		children.Rate, children.Name, costMapChildren, 1000*single.TxSeconds, single.LambdaSeconds, limitTable(ls))
	return nil
}

// adjustableNames names the limits a quota request or a pre-warm raises.
func adjustableNames() string {
	return "a pre-warmed table and indexes (warm throughput), the table-level throughput quotas, API Gateway's account throttle, Lambda's concurrent executions"
}

// mapChildRate is the children a second one map allows: the hottest
// partition key value its children wrote and read (per child), and the
// item shape its transactions named most often (per child), held
// txSeconds each. Items that differ only in a trailing number (a count
// shard) are one shape spread over the values the map touched: a small
// map touches fewer of them than a large one, so the bound errs low.
func mapChildRate(loads []partitionLoad, tx []txItem, children int, txSeconds float64, run, job string) limit {
	n := float64(children)
	rate, key := hottestKey(loads, n, run, job)
	best := limit{Name: "partition:" + key, Rate: rate}
	type family struct {
		named  float64
		values map[txItem]bool
	}
	shapes := map[string]*family{}
	for _, it := range tx {
		pk, _, _ := shapeOf(it.PK, run, job, nil)
		sk, _, _ := shapeOf(it.SK, run, job, nil)
		name := itemShape(pk, trailingNumber.ReplaceAllString(sk, "#nn"))
		f := shapes[name]
		if f == nil {
			f = &family{values: map[txItem]bool{}}
			shapes[name] = f
		}
		f.named++
		f.values[it] = true
	}
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		f := shapes[name]
		if r := perRun(float64(len(f.values)), f.named/n*txSeconds); r < best.Rate {
			best = limit{Name: "transaction_conflict:" + name, Rate: r}
		}
	}
	return best
}

var trailingNumber = regexp.MustCompile(`#[0-9]+$`)

// limitTable lists every limit with its rate, who shares it and whether a
// quota raises it.
func limitTable(ls []limit) string {
	var b strings.Builder
	fmt.Fprintf(&b, "    %-56s %-5s %-10s %12s\n", "limit", "scope", "adjustable", "max runs/s")
	for _, l := range ls {
		if math.IsInf(l.Rate, 1) {
			continue
		}
		fmt.Fprintf(&b, "    %-56s %-5s %-10v %12.0f\n", l.Name, l.Scope, l.Adjustable, l.Rate)
	}
	return strings.TrimRight(b.String(), "\n")
}

// fastestTransaction is the shortest TransactWriteItems call the cost
// stack made so far, in seconds (0 when it made none).
func (cs *costStack) fastestTransaction() float64 {
	times := cs.meter.snapshot().TxTimes
	if len(times) == 0 {
		return 0
	}
	return slices.Min(times).Seconds()
}
