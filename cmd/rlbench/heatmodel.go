package main

import (
	"fmt"
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

// limiterShard is a limiter group's shard partition,
// LIMITER#<limiter>#<s> (statemodel/limiter.ShardName): one shape for all
// of a group's shards but its first, whose key is the limiter's own.
var limiterShard = regexp.MustCompile(`^(LIMITER#.*)#[0-9]+$`)

// replaceWord replaces job where it is the whole name: after a '#' or at
// the start, and before a '#' or at the end.
func replaceWord(s, job, with string) string {
	parts := strings.Split(s, "#")
	for i, p := range parts {
		if p == job {
			parts[i] = with
		}
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
		fmt.Fprintf(&b, "    %-28s %-5s %6d %7.1f %7.1f %12s %9s %9s\n", l.Name(), l.Scope, l.Shards, l.WCU, l.RCU, maxRate,
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
func shardCounts() map[string]int {
	return map[string]int{
		"T#nn":               tableschema.TimerShards,
		"RUNS#nn":            tableschema.RunListShards,
		"live:JOB#<job>#nn":  tableschema.LiveShards,
		"table:JOB#<job>#nn": tableschema.JobShards,
	}
}

// reportHeat prints the heat model of one measured single-task run of job
// (triggered through the API).
func (b *bench) reportHeat(u usage, job string) {
	shapes := groupShapes(u.heat, u.run, job, shardCounts())
	table := heatModel(shapes, false, 1)
	one := heatModel(shapes, true, 1)
	b.rep.figureNamed("scale_max_runs_per_s_table", table.MaxRate, "runs/s", table.Hottest)
	b.rep.figureNamed("scale_max_runs_per_s_one_job", one.MaxRate, "runs/s", one.Hottest)
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
