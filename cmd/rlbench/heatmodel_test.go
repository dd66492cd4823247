package main

import (
	"math"
	"testing"
)

func TestShapeOfNamesRunJobAndShard(t *testing.T) {
	shards := map[string]int{"T#nn": 16, "RUNS#nn": 32}
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
