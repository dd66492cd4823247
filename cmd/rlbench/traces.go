package main

import (
	"context"
	"fmt"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/tracing/tracingtest"
)

// traces measures what exporting spans costs: the throughput burst of n
// runs with OTLP export on (to a receiver in this process) against off,
// three of each, alternated so that a drift of the shared machine falls
// on both; trace_overhead_ratio is the median rate on over the median
// rate off (target >= 0.9).
func (b *bench) traces(ctx context.Context, n int) error {
	rcv := tracingtest.Start()
	defer rcv.Close()
	var on, off []float64
	for range 3 {
		res, err := b.burst(ctx, n, devstack.Options{})
		if err != nil {
			return fmt.Errorf("traces, export off: %w", err)
		}
		off = append(off, res.rate)
		b.dropTables(context.Background())
		res, err = b.burst(ctx, n, devstack.Options{OTLPEndpoint: rcv.URL()})
		if err != nil {
			return fmt.Errorf("traces, export on: %w", err)
		}
		on = append(on, res.rate)
		b.dropTables(context.Background())
	}
	// Each run: its span and its attempts' (a tenth fail once).
	spans := len(rcv.Spans())
	if want := 3 * (n + n + n/10); spans < want {
		return fmt.Errorf("traces: the receiver got %d spans, want at least %d", spans, want)
	}
	medOn, medOff := median(on), median(off)
	ratio := medOn / medOff
	b.rep.figure("trace_overhead_ratio", ratio, "")
	b.rep.note("traces: throughput burst of %d runs, 3 with OTLP export on, 3 off (alternated): median %.1f vs %.1f runs/s = %.2f (target >= 0.9); on %v, off %v; %d spans in %d export requests",
		n, medOn, medOff, ratio, rounded(on), rounded(off), spans, rcv.Requests())
	return nil
}

func rounded(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.1f", x)
	}
	return out
}
