package main

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/runledger/runledger/shared/tableschema"
)

// The partition heat model: what one run writes and reads on each
// partition key value (of the table and of every index), grouped by key
// shape, and the highest sustained rate of runs each shape allows from
// DynamoDB's per-partition limits. It is arithmetic only: the loads come
// from heatTrace (heat.go), which attributes a measured run's calls to
// their partitions.

// Per-partition limits of DynamoDB (a table's and an index's partitions
// alike), per second.
const (
	partitionWCU = 1000.0
	partitionRCU = 3000.0
)

// keyScope says which runs share a key shape's partitions.
type keyScope int

const (
	// scopeRun: the key holds the run's id; each run has its own partition,
	// so the shape caps no rate of runs.
	scopeRun keyScope = iota
	// scopeJob: the runs of one job share it.
	scopeJob
	// scopeTable: every run of every job shares it.
	scopeTable
)

func (s keyScope) String() string {
	return [...]string{"run", "job", "table"}[s]
}

// partitionLoad is what one run put on one partition key value.
type partitionLoad struct {
	Index    string // "table" or the index's name
	Key      string // the partition key's value
	WCU, RCU float64
}

// shapeLoad is one run's load on one key shape: the sum over the shape's
// key values, spread evenly over Shards values (a hash picks the shard).
type shapeLoad struct {
	Index, Shape string
	Scope        keyScope
	Shards       int
	WCU, RCU     float64
}

// Name is how the shape is printed: index:shape.
func (l shapeLoad) Name() string { return l.Index + ":" + l.Shape }

// maxRate is the highest sustained rate of runs (per second) the shape
// allows when each of its partitions may take limitFraction of DynamoDB's
// per-partition limits; +Inf when the shape takes nothing.
func (l shapeLoad) maxRate(limitFraction float64) float64 {
	rate := math.Inf(1)
	shards := float64(max(l.Shards, 1))
	if l.WCU > 0 {
		rate = min(rate, limitFraction*partitionWCU*shards/l.WCU)
	}
	if l.RCU > 0 {
		rate = min(rate, limitFraction*partitionRCU*shards/l.RCU)
	}
	return rate
}

// utilization is the fraction of its partition's limit (the larger of
// write and read) each of the shape's partitions takes at rate runs/s.
func (l shapeLoad) utilization(rate float64) float64 {
	shards := float64(max(l.Shards, 1))
	return max(rate*l.WCU/shards/partitionWCU, rate*l.RCU/shards/partitionRCU)
}

// knownShapes are the key shapes the model knows (docs/store.md), by
// what they hold; a trailing * matches any rest. A shape not here is
// printed as unknown and counted all the same: a new key of the store's
// shows up in the table, it is not dropped. Add a shape here (and its
// shard count to shardCounts) when the store gains one.
var knownShapes = []struct{ Shape, Holds string }{
	{"RUN#<run>", "a run's items: the run, its task instances, their history, a map's children and counts"},
	{"RUNS#nn", "the listing's shards (the run listing index)"},
	{"T#nn", "the timers index's shards"},
	{"JOB#<job>", "a job's items: its definition, slot claims, idempotency keys"},
	{"JOB#<job>#nn", "a job's gate shards (table), its live runs' shards (live index)"},
	{limiterKeyPrefix + "*", "a limiter's items: its state, waiting and admitted runs"},
}

// knownShape says whether shape is one of knownShapes.
func knownShape(shape string) bool {
	for _, k := range knownShapes {
		if k.Shape == shape || (strings.HasSuffix(k.Shape, "*") && strings.HasPrefix(shape, strings.TrimSuffix(k.Shape, "*"))) {
			return true
		}
	}
	return false
}

// shapeOf names a key's shape: the run's id becomes <run>, the job's name
// <job>, a shard number at the end #nn (a limiter group's shard #<s>). Its scope follows from what it
// names; its shard count is shards[the shape] (1 when absent).
func shapeOf(key, run, job string, shards map[string]int) (shape string, scope keyScope, n int) {
	shape = key
	if run != "" {
		shape = strings.ReplaceAll(shape, run, "<run>")
	}
	if job != "" {
		shape = replaceWord(shape, job, "<job>")
	}
	shape = mapPartition.ReplaceAllString(shape, "${1}<task>#")
	shape = shardSuffix.ReplaceAllString(shape, "#nn")
	shape = limiterShard.ReplaceAllString(shape, "${1}#<s>")
	switch {
	case strings.Contains(shape, "<run>"):
		scope = scopeRun
	case strings.Contains(shape, "<job>"):
		scope = scopeJob
	default:
		scope = scopeTable
	}
	n = max(shards[shape], 1)
	return shape, scope, n
}

var shardSuffix = regexp.MustCompile(`#[0-9]{2,3}$`)

// mapPartition finds the map task's name in a map child's partition,
// RUN#<run>#M#<task>#nn (docs/store.md).
var mapPartition = regexp.MustCompile(`^(RUN#<run>#M#)[^#]+#`)

// limiterShard is a limiter group's shard partition,
// LIMITER#<limiter>#<s> (statemodel/limiter.ShardName): one shape for all
// of a group's shards but its first, whose key is the limiter's own.
var limiterShard = regexp.MustCompile(`^(LIMITER#.*)#[0-9]+$`)

// replaceWord replaces job where it is the whole name: between '#' or
// '/' (a limiter's name is <job>/<key>) or the key's ends.
func replaceWord(s, job, with string) string {
	parts := strings.Split(s, "#")
	for i, p := range parts {
		words := strings.Split(p, "/")
		for j, w := range words {
			if w == job {
				words[j] = with
			}
		}
		parts[i] = strings.Join(words, "/")
	}
	return strings.Join(parts, "#")
}

// groupShapes sums one run's partition loads by (index, shape). A shape's
// shard count is shards["index:shape"], else shards["shape"].
func groupShapes(loads []partitionLoad, run, job string, shards map[string]int) []shapeLoad {
	var out []shapeLoad
	at := map[string]int{}
	for _, l := range loads {
		shape, scope, n := shapeOf(l.Key, run, job, shards)
		if m, ok := shards[l.Index+":"+shape]; ok {
			n = m
		}
		k := l.Index + ":" + shape
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, shapeLoad{Index: l.Index, Shape: shape, Scope: scope, Shards: n})
		}
		out[i].WCU += l.WCU
		out[i].RCU += l.RCU
	}
	slices.SortFunc(out, func(a, b shapeLoad) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// heatResult is the model's answer for one scenario.
type heatResult struct {
	MaxRate float64 // runs/s at the full partition limits
	Hottest string  // the shape that sets it ("" when none caps)
}

// heatModel is the highest rate of runs the shapes a scenario shares allow:
// table-wide (runs of many jobs: the shapes every run shares) or one job
// (the shapes its runs share too). A job's shapes are left out of the
// table-wide figure: many jobs spread them, and one job's own cap is the
// one-job figure.
func heatModel(shapes []shapeLoad, oneJob bool, limitFraction float64) heatResult {
	res := heatResult{MaxRate: math.Inf(1)}
	for _, l := range shapes {
		if l.Scope == scopeRun || (l.Scope == scopeJob && !oneJob) {
			continue
		}
		if r := l.maxRate(limitFraction); r < res.MaxRate {
			res = heatResult{MaxRate: r, Hottest: l.Name()}
		}
	}
	return res
}

// heatTable prints the shapes with their per-run units, the rates they
// allow and their share of the partition limit at the targets.
func heatTable(shapes []shapeLoad, tableTarget, jobTarget float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "    %-28s %-5s %6s %7s %7s %12s %9s %9s\n", "index:shape", "scope", "shards", "WCU/run", "RCU/run", "max runs/s", "@table", "@one job")
	for _, l := range shapes {
		at := func(rate float64, counts bool) string {
			if !counts {
				return "-"
			}
			return fmt.Sprintf("%.0f%%", 100*l.utilization(rate))
		}
		maxRate := "-"
		if l.Scope != scopeRun {
			maxRate = fmt.Sprintf("%.0f", l.maxRate(1))
		}
		name := l.Name()
		if !knownShape(l.Shape) {
			name += " (unknown)"
		}
		fmt.Fprintf(&b, "    %-28s %-5s %6d %7.1f %7.1f %12s %9s %9s\n", name, l.Scope, l.Shards, l.WCU, l.RCU, maxRate,
			at(tableTarget, l.Scope == scopeTable), at(jobTarget, l.Scope != scopeRun))
	}
	return strings.TrimRight(b.String(), "\n")
}

// Targets of the heat model: the layout's (tableschema), single-task runs
// a second table-wide and for one job, each with no key shape above
// heatHeadroom of its partition's limit.
const (
	heatTargetTable  = float64(tableschema.TargetRunsPerSecond)
	heatTargetOneJob = float64(tableschema.TargetRunsPerSecondOneJob)
	heatHeadroom     = 0.5
)

// shardCounts is how many values each sharded key shape spreads over.
// table:JOB#<job>#nn holds a job's run pointers and gates (by a hash of
// the run id) and its slot claims and idempotency keys (by a hash of their
// sort key); table:JOB#<job> what is left there: the job item and the
// reads of claims stored before the sharding.
func shardCounts() map[string]int {
	return map[string]int{
		"T#nn":                                  tableschema.TimerShards,
		"RUNS#nn":                               tableschema.RunListShards,
		tableschema.LiveIndex + ":JOB#<job>#nn": tableschema.LiveShards,
		"table:JOB#<job>#nn":                    tableschema.JobShards,
		"table:RUN#<run>#M#<task>#nn":           tableschema.MapChildShards,
	}
}

// reportHeat prints the heat model of one measured single-task run of job
// (triggered through the API).
func (b *bench) reportHeat(u usage, job string) {
	shapes := groupShapes(u.heat, u.run, job, shardCounts())
	table := heatModel(shapes, false, 1)
	one := heatModel(shapes, true, 1)
	b.rep.figureNamed("scale_max_runs_per_s_table", table.MaxRate, "runs/s", table.Hottest)
	var w, r float64
	for _, l := range shapes {
		w += l.WCU
		r += l.RCU
	}
	b.rep.note("heat, single-task run: at most %.0f runs/s table-wide (hottest %s; target %.0f at <= %.0f%% of a partition: %.0f), %.0f runs/s for one job (hottest %s; target %.0f: %.0f)\n"+
		"  per run %.1f WCU and %.1f RCU on these shapes (table and indexes), from 1,000 WCU/s and 3,000 RCU/s a partition; @: share of a partition's limit at the target:\n%s",
		table.MaxRate, table.Hottest, heatTargetTable, 100*heatHeadroom, heatModel(shapes, false, heatHeadroom).MaxRate,
		one.MaxRate, one.Hottest, heatTargetOneJob, heatModel(shapes, true, heatHeadroom).MaxRate,
		w, r, heatTable(shapes, heatTargetTable, heatTargetOneJob))
}

// Limits that bind before a partition's, per second. Each names the AWS
// page that gives it; Adjustable says whether a quota request (or a
// pre-warm) raises it.
const (
	// "Understanding DynamoDB warm throughput" and "Pre-warming a table for
	// on-demand capacity mode" (DynamoDB Developer Guide): a new on-demand
	// table, and each new global secondary index, serves up to 4,000 write
	// and 12,000 read units a second at first; DynamoDB raises it as the
	// traffic grows (up to twice the previous peak), a pre-warm raises it at
	// once.
	warmWRU = 4000.0
	warmRRU = 12000.0
	// "Quotas in Amazon DynamoDB", Throughput default quotas: an on-demand
	// table, and each of its global secondary indexes, consumes at most
	// 40,000 read and 40,000 write request units a second (the table-level
	// read and write throughput quotas, adjustable in Service Quotas).
	tableQuotaWRU = 40000.0
	tableQuotaRRU = 40000.0
	// "Amazon API Gateway quotas": the throttle quota per account and
	// Region across HTTP and REST APIs, 10,000 requests a second
	// (adjustable, L-8A5B8E43).
	apiAccountRPS = 10000.0
	// "Lambda quotas" (Lambda Developer Guide): concurrent executions,
	// 1,000 per account and Region (adjustable). A function busy d seconds
	// a run takes d of it per run and second.
	lambdaConcurrency = 1000.0
)

// runDemand is what one measured run asks of the deployment's limits.
type runDemand struct {
	Shapes      []shapeLoad
	APIRequests float64
	// LambdaSeconds is the summed duration of the run's invocations.
	LambdaSeconds float64
	// Conflicts are the items the run's transactions named that other runs
	// name too (conflictLoads); TxSeconds the measured time of a
	// transaction.
	Conflicts []conflictLoad
	TxSeconds float64
}

// conflictLoad is one shared item's transactions per run: DynamoDB puts
// an item in one transaction at a time (another meets a
// TransactionConflict), so an item named in n transactions a run, each
// taking TxSeconds, allows Shards/(n*TxSeconds) runs a second.
type conflictLoad struct {
	Item   string // itemShape
	PK     string // pk-shape
	Scope  keyScope
	Shards int
	PerRun float64
}

// conflictLoads groups the items a run's transactions named by shape and
// keeps those other runs share (the job's or the table's).
func conflictLoads(items []txItem, run, job string, shards map[string]int) []conflictLoad {
	var out []conflictLoad
	at := map[string]int{}
	for _, it := range items {
		pk, pkScope, n := shapeOf(it.PK, run, job, shards)
		sk, skScope, _ := shapeOf(it.SK, run, job, nil)
		if pkScope == scopeRun || skScope == scopeRun {
			continue // the run's own item: no other run names it
		}
		scope := scopeTable
		if pkScope == scopeJob || skScope == scopeJob {
			scope = scopeJob
		}
		if m, ok := shards["table:"+pk]; ok {
			n = m
		}
		name := itemShape(pk, sk)
		i, ok := at[name]
		if !ok {
			i = len(out)
			at[name] = i
			out = append(out, conflictLoad{Item: name, PK: pk, Scope: scope, Shards: n})
		}
		out[i].PerRun++
	}
	slices.SortFunc(out, func(a, b conflictLoad) int { return strings.Compare(a.Item, b.Item) })
	return out
}

// itemShape names an item's shape in a transaction: table:<pk>|<sk>.
func itemShape(pk, sk string) string { return "table:" + pk + "|" + sk }

// limit is one bound on the rate of runs: what sets it and the rate.
type limit struct {
	Name string
	// Shape is the key shape of a partition's or an item's bound ("" for
	// the others).
	Shape      string
	Rate       float64 // runs/s; +Inf when the run asks nothing of it
	Scope      keyScope
	Adjustable bool
}

// limits lists every bound d meets: the partitions of its shared key
// shapes, each table's and index's starting rate and quota, the API's
// account rate, Lambda's concurrency and the transaction conflicts on
// shared items.
func limits(d runDemand) []limit {
	var out []limit
	for _, l := range d.Shapes {
		if l.Scope != scopeRun {
			out = append(out, limit{Name: "partition:" + l.Name(), Shape: l.Shape, Rate: l.maxRate(1), Scope: l.Scope})
		}
	}
	// A table's and each index's units: the quotas and the starting rate
	// count each on its own.
	units := map[string][2]float64{}
	for _, l := range d.Shapes {
		u := units[l.Index]
		units[l.Index] = [2]float64{u[0] + l.WCU, u[1] + l.RCU}
	}
	for _, ix := range slices.Sorted(maps.Keys(units)) {
		u := units[ix]
		out = append(out,
			limit{Name: "warm_throughput:" + ix, Rate: unitRate(u, warmWRU, warmRRU), Scope: scopeTable, Adjustable: true},
			limit{Name: "table_quota:" + ix, Rate: unitRate(u, tableQuotaWRU, tableQuotaRRU), Scope: scopeTable, Adjustable: true})
	}
	out = append(out,
		limit{Name: "api_gateway_account_rate", Rate: perRun(apiAccountRPS, d.APIRequests), Scope: scopeTable, Adjustable: true},
		limit{Name: "lambda_concurrency", Rate: perRun(lambdaConcurrency, d.LambdaSeconds), Scope: scopeTable, Adjustable: true})
	for _, c := range d.Conflicts {
		out = append(out, limit{Name: "transaction_conflict:" + c.Item, Shape: c.PK, Rate: perRun(float64(max(c.Shards, 1)), c.PerRun*d.TxSeconds), Scope: c.Scope})
	}
	return out
}

// unitRate is the runs/s a budget of wru and rru units a second allows at
// u (write, read units a run).
func unitRate(u [2]float64, wru, rru float64) float64 {
	return min(perRun(wru, u[0]), perRun(rru, u[1]))
}

// perRun is budget/need, +Inf when a run needs nothing.
func perRun(budget, need float64) float64 {
	if need <= 0 {
		return math.Inf(1)
	}
	return budget / need
}

// ceiling is the smallest of ls that binds the runs of the deployment
// (oneJob: of one job, whose shared shapes count too); raised leaves out
// the adjustable quotas, as if raised out of the way.
func ceiling(ls []limit, oneJob, raised bool) limit {
	best := limit{Name: "none", Rate: math.Inf(1)}
	for _, l := range ls {
		if l.Scope == scopeRun || (l.Scope == scopeJob && !oneJob) || (raised && l.Adjustable) {
			continue
		}
		if l.Rate < best.Rate {
			best = l
		}
	}
	return best
}

// hottestKey is the highest rate of units in one partition key value that
// work of count units (a map's children) allows: the loads are summed by
// exact key, so a shape spread over shards spreads here too. It answers
// +Inf and "" when nothing was written.
func hottestKey(loads []partitionLoad, count float64, run, job string) (rate float64, key string) {
	type sum struct{ wcu, rcu float64 }
	by := map[string]sum{}
	for _, l := range loads {
		s := by[l.Index+":"+l.Key]
		by[l.Index+":"+l.Key] = sum{s.wcu + l.WCU, s.rcu + l.RCU}
	}
	rate = math.Inf(1)
	for _, k := range slices.Sorted(maps.Keys(by)) {
		s := by[k]
		r := min(perRun(partitionWCU, s.wcu/count), perRun(partitionRCU, s.rcu/count))
		if r < rate {
			ix, pk, _ := strings.Cut(k, ":")
			shape, _, _ := shapeOf(pk, run, job, nil)
			rate, key = r, ix+":"+shape
		}
	}
	return rate, key
}

// limiterKeyPrefix starts the partition key of a limiter's items
// (docs/store.md, "Flow control").
const limiterKeyPrefix = "LIMITER#"

// limiterRate is the admissions a second one limiter allows: its
// partitions' load per run and the transactions on its items.
func limiterRate(d runDemand) limit {
	best := limit{Name: "none", Rate: math.Inf(1)}
	for _, l := range limits(d) {
		if strings.HasPrefix(l.Shape, limiterKeyPrefix) && l.Rate < best.Rate {
			best = l
		}
	}
	return best
}

// limiterGroupRate is the admissions a second one group of n shard
// limiters allows (a concurrency limit above one item's, docs/store.md "A
// group with a large limit"). A run enters and leaves one shard, its home
// by a hash of its id while that shard has room, so the group's runs
// spread evenly over the n shards' partitions and items: the measured
// run's load on whichever shard it used (shard 0's shape or the others')
// stands for every shard's, and the group allows n times what one shard
// does, bounded by the lower of its partition's units and the
// transactions on its limiter item. Reads of the other shards (an entry
// whose home is full, a borrow) are not in a run that found room at home:
// they come with a full group.
func limiterGroupRate(d runDemand, n int) limit {
	var g runDemand
	g.TxSeconds = d.TxSeconds
	at := map[string]int{}
	for _, l := range d.Shapes {
		if !strings.HasPrefix(l.Shape, limiterKeyPrefix) {
			continue
		}
		l.Shape = strings.TrimSuffix(l.Shape, groupShardSuffix)
		k := l.Name()
		i, ok := at[k]
		if !ok {
			i, at[k] = len(g.Shapes), len(g.Shapes)
			g.Shapes = append(g.Shapes, shapeLoad{Index: l.Index, Shape: l.Shape, Scope: l.Scope, Shards: n})
		}
		g.Shapes[i].WCU += l.WCU
		g.Shapes[i].RCU += l.RCU
	}
	byItem := map[string]int{}
	for _, c := range d.Conflicts {
		if !strings.HasPrefix(c.PK, limiterKeyPrefix) {
			continue
		}
		pk := strings.TrimSuffix(c.PK, groupShardSuffix)
		item := strings.Replace(c.Item, c.PK+"|", pk+"|", 1)
		i, ok := byItem[item]
		if !ok {
			i, byItem[item] = len(g.Conflicts), len(g.Conflicts)
			g.Conflicts = append(g.Conflicts, conflictLoad{Item: item, PK: pk, Scope: c.Scope, Shards: n})
		}
		g.Conflicts[i].PerRun += c.PerRun
	}
	return limiterRate(g)
}

// groupShardSuffix ends the key shape of a group's shards but its first
// (shapeOf's limiterShard).
const groupShardSuffix = "#<s>"
