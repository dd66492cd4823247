package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/statemodel/limiter"
)

// BenchmarkLimiterChurn measures one limiter under the load of a burst of
// runs against a concurrency limit: 32 writers, each entering a run
// (admitted or queued), and, for every run admitted, leaving it and
// handing its room on, as the scheduler does when a run ends. It reports
// runs/s through the limiter and the limiter writes each run costs.
func BenchmarkLimiterChurn(b *testing.B) {
	limit := 10
	writers := 32
	if w, err := strconv.Atoi(os.Getenv("CHURN_WRITERS")); err == nil {
		writers = w
	}
	ts := newStore(b)
	ctx := context.Background()
	name := "churn/"
	var seq, writes atomic.Int64
	now := ts.Clock.Now()
	b.ResetTimer()
	start := time.Now()
	ledgertest.Parallel(b, writers, b.N, func(i int) error {
		id := fmt.Sprintf("run-%08d", seq.Add(1))
		p := limiter.Place{Priority: 3, CreatedAt: now.Add(time.Duration(i) * time.Microsecond), RunID: id}
		e, err := ts.Turns.EnterLimiter(ctx, ts.Store, ledger.Entry{Limiter: name, Limit: limit, Place: p}, now)
		if err != nil {
			return err
		}
		writes.Add(1)
		if !e.Admitted {
			return nil // the run that ends before it hands it on
		}
		for next := []string{id}; len(next) > 0; {
			id, next = next[0], next[1:]
			left, err := ts.Turns.LeaveLimiter(ctx, ts.Store, name, id)
			if err != nil {
				return err
			}
			if left {
				writes.Add(1)
			}
			got, err := ts.Turns.AdmitNext(ctx, ts.Store, name, limiter.Rate{}, now)
			if err != nil {
				return err
			}
			for _, a := range got {
				writes.Add(1)
				next = append(next, a.RunID)
			}
		}
		return nil
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
	b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/run")
}
