package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// BenchmarkTransitions measures Transition (read, decide, one
// TransactWriteItems) against the endpoint with 16 workers, each walking its
// own instances through deps.met, dispatch, claim and success. It reports:
//
//	transitions/s             throughput of all 16 workers together
//	wcu/transition            computed by DynamoDB's size and pricing rules:
//	                          table-wcu + index-wcu
//	table-wcu/transition      the transaction's items, 2 WCU per started KB each
//	index-wcu/transition      the timers index entry writes, 1 WCU per started KB
//	reported-wcu/transition   the endpoint's own figure (ReturnConsumedCapacity=
//	                          TOTAL) when it sends one; DynamoDB Local's does not
//	                          follow DynamoDB's pricing for transactions
func BenchmarkTransitions(b *testing.B) {
	const workers = 16
	var (
		mu                     sync.Mutex
		reported, table, index float64
		reports, withFig       int
	)
	ts := newStore(b, store.WithCapacityReports(func(r store.CapacityReport) {
		if r.Operation != "transition" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		reports++
		table += r.TableWCU()
		index += r.IndexWCU()
		if r.Reported {
			withFig++
			reported += r.ReportedWCU
		}
	}))
	ctx := context.Background()

	// Four transitions per instance; create enough instances up front.
	perInstance := []statemodel.EventType{statemodel.EvDepsMet, statemodel.EvDispatched, statemodel.EvStarted, statemodel.EvSucceeded}
	need := b.N/len(perInstance) + workers
	var keys []ledger.InstanceKey
	var runs []ledger.NewRun
	for made := 0; made < need; made += ledger.MaxTasksPerRun {
		tasks := make([]string, ledger.MaxTasksPerRun)
		for i := range tasks {
			tasks[i] = fmt.Sprintf("t%02d", i)
		}
		runs = append(runs, ledgertest.NewRun("bench", tasks...))
	}
	ledgertest.Parallel(b, 4, len(runs), func(i int) error {
		_, err := ts.CreateRun(ctx, runs[i], ts.Clock.Now())
		return err
	})
	for _, nr := range runs {
		for _, task := range nr.Tasks {
			keys = append(keys, ledger.InstanceKey{Run: nr.ID, Task: task.ID})
		}
	}
	mu.Lock()
	reported, table, index, reports, withFig = 0, 0, 0, 0, 0
	mu.Unlock()

	var ops, nextKey atomic.Int64
	var failed atomic.Value
	now := ts.Clock.Now()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := nextKey.Add(1) - 1
				if int(k) >= len(keys) {
					return
				}
				for step, typ := range perInstance {
					if ops.Add(1) > int64(b.N) {
						return
					}
					e := ledgertest.Ev(typ, 0)
					if step > 0 {
						e.Attempt = 1
					}
					if typ == statemodel.EvStarted {
						e.WorkerID = "bench"
					}
					res, err := ts.Harness.Store.Transition(ctx, keys[k], e, now, ledgertest.Policy())
					if err != nil || res.Outcome != statemodel.Applied {
						failed.Store(fmt.Errorf("%s on %s: %s %v", e, keys[k], res.Outcome, err))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "transitions/s")
	if reports > 0 {
		n := float64(reports)
		b.ReportMetric((table+index)/n, "wcu/transition")
		b.ReportMetric(table/n, "table-wcu/transition")
		b.ReportMetric(index/n, "index-wcu/transition")
		if withFig == reports {
			b.ReportMetric(reported/n, "reported-wcu/transition")
		}
	}
}
