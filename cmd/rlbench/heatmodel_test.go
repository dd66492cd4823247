package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestShapeOfNamesRunJobAndShard(t *testing.T) {
	shards := map[string]int{"T#nn": 16, "RUNS#nn": 32, "RUN#<run>#M#<task>#nn": 64}
	cases := []struct {
		key, shape string
		scope      keyScope
		n          int
	}{
		{"RUN#01JRUN", "RUN#<run>", scopeRun, 1},
		{"JOB#cost-ok", "JOB#<job>", scopeJob, 1},
		{"JOB#cost-ok#03", "JOB#<job>#nn", scopeJob, 1},
		{"JOB#cost-okay", "JOB#cost-okay", scopeTable, 1}, // another job's name is not this job's
		{"RUNS", "RUNS", scopeTable, 1},
		{"RUNS#07", "RUNS#nn", scopeTable, 32},
		{"T#15", "T#nn", scopeTable, 16},
		{"LIMITER#cost-ok/", "LIMITER#<job>/", scopeJob, 1}, // a limiter's name is <job>/<key>
		{"LIMITER#cost-ok/tenant-1", "LIMITER#<job>/tenant-1", scopeJob, 1},
		{"RUN#01JRUN#M#fan#07", "RUN#<run>#M#<task>#nn", scopeRun, 64}, // a map child's partition
		{"RUN#01JRUN#M#cost-ok#63", "RUN#<run>#M#<task>#nn", scopeRun, 64},
		{"LIMITER#big/#3", "LIMITER#big/#<s>", scopeTable, 1},
		{"LIMITER#big/", "LIMITER#big/", scopeTable, 1},
	}
	for _, c := range cases {
		shape, scope, n := shapeOf(c.key, "01JRUN", "cost-ok", shards)
		if shape != c.shape || scope != c.scope || n != c.n {
			t.Errorf("shapeOf(%q) = %q %v %d, want %q %v %d", c.key, shape, scope, n, c.shape, c.scope, c.n)
		}
	}
}

func TestHeatModelArithmetic(t *testing.T) {
	loads := []partitionLoad{
		// The run's own partition: never a cap.
		{Index: "table", Key: "RUN#R1", WCU: 40, RCU: 9},
		// The listing: every run, one key. 3 + 2 = 5 WCU a run.
		{Index: "listing", Key: "RUNS", WCU: 3},
		{Index: "listing", Key: "RUNS", WCU: 2},
		// The timers index: 8 WCU a run over 16 shards.
		{Index: "timers_v2", Key: "T#01", WCU: 4},
		{Index: "timers_v2", Key: "T#09", WCU: 4},
		// The job's partition: 4 WCU and 1 RCU a run, one key.
		{Index: "table", Key: "JOB#j", WCU: 4, RCU: 1},
	}
	shapes := groupShapes(loads, "R1", "j", map[string]int{"T#nn": 16})
	if len(shapes) != 4 {
		t.Fatalf("shapes = %+v, want 4", shapes)
	}
	table := heatModel(shapes, false, 1)
	// listing:RUNS allows 1000/5 = 200 runs/s; the timers 1000*16/8 = 2000.
	if table.Hottest != "listing:RUNS" || math.Abs(table.MaxRate-200) > 1e-9 {
		t.Errorf("table-wide = %+v, want 200 runs/s by listing:RUNS", table)
	}
	one := heatModel(shapes, true, 1)
	// The job's partition: 1000/4 = 250 WCU-bound, 3000/1 by reads: 200
	// (the listing) is lower still.
	if one.Hottest != "listing:RUNS" || math.Abs(one.MaxRate-200) > 1e-9 {
		t.Errorf("one job = %+v, want 200 runs/s by listing:RUNS", one)
	}
	// At half the limits every rate halves.
	if half := heatModel(shapes, false, 0.5); math.Abs(half.MaxRate-100) > 1e-9 {
		t.Errorf("table-wide at half = %v, want 100", half.MaxRate)
	}
	// Reads cap when they are the larger share: 3000/(7.5) = 400.
	reads := shapeLoad{Index: "table", Shape: "X", Scope: scopeTable, Shards: 1, WCU: 1, RCU: 7.5}
	if r := reads.maxRate(1); math.Abs(r-400) > 1e-9 {
		t.Errorf("read-bound rate = %v, want 400", r)
	}
	if u := reads.utilization(200); math.Abs(u-0.5) > 1e-9 {
		t.Errorf("utilization at 200 runs/s = %v, want 0.5", u)
	}
	// A shard count named with the index wins over the shape's own.
	sharded := groupShapes([]partitionLoad{{Index: "live", Key: "JOB#j#03", WCU: 4}, {Index: "table", Key: "JOB#j#05", WCU: 4}},
		"R1", "j", map[string]int{"live:JOB#<job>#nn": 8, "table:JOB#<job>#nn": 16})
	if len(sharded) != 2 || sharded[0].Shards != 8 || sharded[1].Shards != 16 {
		t.Errorf("sharded shapes %+v, want live on 8 shards and table on 16", sharded)
	}
	// Only a job's shapes: table-wide is uncapped, one job is capped.
	jobOnly := groupShapes([]partitionLoad{{Index: "table", Key: "JOB#j", WCU: 4}}, "R1", "j", nil)
	if r := heatModel(jobOnly, false, 1); !math.IsInf(r.MaxRate, 1) || r.Hottest != "" {
		t.Errorf("table-wide of a job's shape = %+v, want no cap", r)
	}
	if r := heatModel(jobOnly, true, 1); r.MaxRate != 250 || r.Hottest != "table:JOB#<job>" {
		t.Errorf("one job = %+v, want 250 by table:JOB#<job>", r)
	}
}

func TestLimitsAndCeiling(t *testing.T) {
	d := runDemand{
		Shapes: []shapeLoad{
			// 20 WCU and 4 RCU a run on the table, 2 WCU on the listing.
			{Index: "table", Shape: "RUN#<run>", Scope: scopeRun, Shards: 1, WCU: 16, RCU: 4},
			{Index: "table", Shape: "JOB#<job>", Scope: scopeJob, Shards: 1, WCU: 4},
			{Index: "listing", Shape: "RUNS#nn", Scope: scopeTable, Shards: 32, WCU: 2},
		},
		APIRequests:   4,   // 10,000 / 4 = 2,500 runs/s
		LambdaSeconds: 0.2, // 1,000 / 0.2 = 5,000 runs/s
		Conflicts: []conflictLoad{
			// The job's gate: 16 shards, one check a run, 20 ms each:
			// 16 / 0.02 = 800 runs/s of one job.
			{Item: "table:JOB#<job>#nn|GATE", PK: "JOB#<job>#nn", Scope: scopeJob, Shards: 16, PerRun: 1},
		},
		TxSeconds: 0.02,
	}
	ls := limits(d)
	rate := func(name string) float64 {
		t.Helper()
		for _, l := range ls {
			if l.Name == name {
				return l.Rate
			}
		}
		t.Fatalf("no limit %q in %+v", name, ls)
		return 0
	}
	for _, c := range []struct {
		name string
		want float64
	}{
		{"warm_throughput:table", 4000.0 / 20},    // 200: writes bind, 12,000/4 = 3,000 for reads
		{"table_quota:table", 40000.0 / 20},       // 2,000
		{"warm_throughput:listing", 4000.0 / 2},   // 2,000
		{"table_quota:listing", 40000.0 / 2},      // 20,000
		{"api_gateway_account_rate", 10000.0 / 4}, // 2,500
		{"lambda_concurrency", 1000 / 0.2},        // 5,000
		{"partition:listing:RUNS#nn", 1000.0 * 32 / 2},
		{"partition:table:JOB#<job>", 1000.0 / 4},
		{"transaction_conflict:table:JOB#<job>#nn|GATE", 16 / 0.02},
	} {
		if got := rate(c.name); math.Abs(got-c.want) > 1e-6 {
			t.Errorf("%s = %v runs/s, want %v", c.name, got, c.want)
		}
	}
	// The run's own partition is never a limit.
	for _, l := range ls {
		if strings.Contains(l.Name, "RUN#<run>") {
			t.Errorf("the run's own partition is a limit: %+v", l)
		}
	}
	// The deployment: the starting rate binds first; raised, the table
	// quota's adjustable too, so the listing's partitions bind.
	if c := ceiling(ls, false, false); c.Name != "warm_throughput:table" || c.Rate != 200 {
		t.Errorf("ceiling = %+v, want 200 by warm_throughput:table", c)
	}
	if c := ceiling(ls, false, true); c.Name != "partition:listing:RUNS#nn" || c.Rate != 16000 {
		t.Errorf("ceiling raised = %+v, want 16000 by partition:listing:RUNS#nn", c)
	}
	// One job, raised: its own partition (250) binds before its gate (800).
	if c := ceiling(ls, true, true); c.Name != "partition:table:JOB#<job>" || c.Rate != 250 {
		t.Errorf("one job raised = %+v, want 250 by partition:table:JOB#<job>", c)
	}
}

func TestConflictLoadsKeepSharedItems(t *testing.T) {
	items := []txItem{
		{"RUN#R1", "RUN"},             // the run's own: left out
		{"JOB#j#03", "GATE"},          // the job's gate shard
		{"LIMITER#j", "STATE"},        // the limiter, twice a run
		{"LIMITER#j", "STATE"},        //
		{"LIMITER#j", "ADMIT#R1"},     // the run's own record in the limiter's partition: left out
		{"CONFIG#deploy", "SETTINGS"}, // every run's: table-wide
	}
	got := conflictLoads(items, "R1", "j", map[string]int{"table:JOB#<job>#nn": 16, "live:JOB#<job>#nn": 8})
	want := []conflictLoad{
		{Item: "table:CONFIG#deploy|SETTINGS", PK: "CONFIG#deploy", Scope: scopeTable, Shards: 1, PerRun: 1},
		{Item: "table:JOB#<job>#nn|GATE", PK: "JOB#<job>#nn", Scope: scopeJob, Shards: 16, PerRun: 1},
		{Item: "table:LIMITER#<job>|STATE", PK: "LIMITER#<job>", Scope: scopeJob, Shards: 1, PerRun: 2},
	}
	if !slices.Equal(got, want) {
		t.Errorf("conflictLoads =\n%+v\nwant\n%+v", got, want)
	}
	// A limiter's bound: its item in 2 transactions a run of 25 ms each.
	lim := limiterRate(runDemand{Conflicts: got, TxSeconds: 0.025,
		Shapes: []shapeLoad{{Index: "table", Shape: "LIMITER#<job>", Scope: scopeJob, Shards: 1, WCU: 12}}})
	if lim.Name != "transaction_conflict:table:LIMITER#<job>|STATE" || math.Abs(lim.Rate-20) > 1e-9 {
		t.Errorf("limiterRate = %+v, want 20 by the limiter's item", lim)
	}
}

func TestLimiterGroupRateIsItsShardsTogether(t *testing.T) {
	// The measured run used shard 3 of a group of ten: 12 WCU on its
	// partition, its item in 2 transactions of 10 ms; shard 0 untouched.
	d := runDemand{TxSeconds: 0.010,
		Shapes: []shapeLoad{
			{Index: "table", Shape: "LIMITER#<job>/#<s>", Scope: scopeJob, Shards: 1, WCU: 12, RCU: 1},
			{Index: "table", Shape: "RUN#<run>", Scope: scopeRun, Shards: 1, WCU: 30},
		},
		Conflicts: []conflictLoad{{Item: "table:LIMITER#<job>/#<s>|STATE", PK: "LIMITER#<job>/#<s>", Scope: scopeJob, Shards: 1, PerRun: 2}},
	}
	got := limiterGroupRate(d, 10)
	// Per shard: 1,000 WCU / 12 = 83.3 runs/s by its partition, 1 / (2 x
	// 10 ms) = 50 by its item's transactions: ten shards take 500.
	if got.Name != "transaction_conflict:table:LIMITER#<job>/|STATE" || math.Abs(got.Rate-500) > 1e-9 {
		t.Errorf("limiterGroupRate = %+v, want 500 by the shards' items", got)
	}
	d.TxSeconds = 0.002 // the items' 250 a shard: the partitions' units bind
	if got := limiterGroupRate(d, 10); got.Name != "partition:table:LIMITER#<job>/" || math.Abs(got.Rate-10*1000.0/12) > 1e-9 {
		t.Errorf("limiterGroupRate = %+v, want %.1f by the shards' partitions", got, 10*1000.0/12)
	}
}

func TestMapChildRate(t *testing.T) {
	// Ten children: the run's partition takes 19 WCU a child, a count
	// shard 1 WCU a child over 4 values, the map item in one transaction
	// a child.
	var loads []partitionLoad
	var tx []txItem
	for i := range 10 {
		loads = append(loads, partitionLoad{Index: "table", Key: "RUN#R7", WCU: 19})
		loads = append(loads, partitionLoad{Index: "table", Key: fmt.Sprintf("RUN#R7#%02d", i%4), WCU: 1})
		tx = append(tx, txItem{"RUN#R7", "MAP"})
	}
	got := mapChildRate(loads, tx, 10, 0.01, "R7", "m")
	if got.Name != "partition:table:RUN#<run>" || math.Abs(got.Rate-1000.0/19) > 1e-9 {
		t.Errorf("mapChildRate = %+v, want 1000/19 by the run's partition", got)
	}
	// With the children's writes spread, the map item's transactions bind:
	// one a child at 10 ms, 100 children a second.
	got = mapChildRate(loads[1:2], tx, 10, 0.01, "R7", "m")
	if got.Name != "transaction_conflict:table:RUN#<run>|MAP" || math.Abs(got.Rate-100) > 1e-9 {
		t.Errorf("mapChildRate spread = %+v, want 100 by the map item", got)
	}
}

func TestUnknownShapesAreMarked(t *testing.T) {
	shapes := []shapeLoad{
		{Index: "table", Shape: "JOB#<job>", Scope: scopeJob, Shards: 1, WCU: 1},
		{Index: "table", Shape: "IDEM#<job>#nn", Scope: scopeJob, Shards: 1, WCU: 1},
		{Index: "table", Shape: "LIMITER#<job>", Scope: scopeJob, Shards: 1, WCU: 1},
	}
	out := heatTable(shapes, 100, 100)
	if !strings.Contains(out, "table:IDEM#<job>#nn (unknown)") {
		t.Errorf("a shape the model does not know is not marked unknown:\n%s", out)
	}
	if strings.Contains(out, "JOB#<job> (unknown)") || strings.Contains(out, "LIMITER#<job> (unknown)") {
		t.Errorf("a known shape is marked unknown:\n%s", out)
	}
}
