package main

import (
	"context"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/scheduler"
)

// growthJobs is how many jobs the full table defines for the finish
// measurement (the empty one defines only the scaling job).
const growthJobs = 1000

// growth measures, on the scaling scenario's two tables, the work the
// issue of history-bound costs was about:
//
//   - the fire of the cancel_previous job "scale": one ticker pass
//     (Service.Tick) right after the job's next fire was moved to a past
//     slot; it creates the slot's run and cancels the previous fire's run.
//     The full table holds n finished runs of that very job;
//   - a run's finish: Service.CancelRun of a fresh run of "scale" (its
//     task is QUEUED: the cancel ends it, derives CANCELLED and looks for
//     the runs that wait on it), with growthJobs jobs defined on the full
//     table and 1 on the empty one.
//
// The two tables take turns, as in the pass measurement.
func (b *bench) growth(ctx context.Context, full, empty *devstack.Stack, n int) error {
	loadStart := time.Now()
	for i := 1; i < growthJobs; i++ {
		j, err := jobspec.Parse(fmt.Appendf(nil, `{"name":"filler-%04d","pool":%q}`, i, pool), full.Service.Jobs().ParseOptions())
		if err != nil {
			return err
		}
		if _, err := full.Service.Jobs().CreateJob(ctx, j); err != nil {
			return fmt.Errorf("define job %d: %w", i, err)
		}
	}
	b.rep.note("growth: %d jobs defined in %.1f s", growthJobs-1, time.Since(loadStart).Seconds())

	var fireEmpty, fireFull, finEmpty, finFull []float64
	for i := range scaleWarmup + scalePasses {
		// A slot just past, which the pass fires as scheduled: a slot it
		// saw over a minute late would be missed and caught up instead.
		slot := time.Now().UTC().Add(-time.Second).Truncate(time.Millisecond)
		fe, err := fireOnce(ctx, empty, slot)
		if err != nil {
			return err
		}
		ff, err := fireOnce(ctx, full, slot)
		if err != nil {
			return err
		}
		ne, err := finishOnce(ctx, empty)
		if err != nil {
			return err
		}
		nf, err := finishOnce(ctx, full)
		if err != nil {
			return err
		}
		if i >= scaleWarmup {
			fireEmpty, fireFull = append(fireEmpty, fe), append(fireFull, ff)
			finEmpty, finFull = append(finEmpty, ne), append(finFull, nf)
		}
	}
	fireRatio, finRatio := median(fireFull)/median(fireEmpty), median(finFull)/median(finEmpty)
	b.rep.figure("scaling_fire_empty_ms", median(fireEmpty), "ms")
	b.rep.figure("scaling_fire_full_ms", median(fireFull), "ms")
	b.rep.figure("scaling_fire_ratio", fireRatio, "ratio")
	b.rep.figure("scaling_finish_jobs1_ms", median(finEmpty), "ms")
	b.rep.figure("scaling_finish_jobs1000_ms", median(finFull), "ms")
	b.rep.figure("scaling_finish_ratio", finRatio, "ratio")
	b.rep.note("growth: median of %d: cancel_previous fire with 0 -> %d finished runs of the job %.1f -> %.1f ms (x%.2f); "+
		"a run's finish with 1 -> %d jobs defined %.1f -> %.1f ms (x%.2f) (targets <= 1.2)",
		scalePasses, n, median(fireEmpty), median(fireFull), fireRatio, growthJobs, median(finEmpty), median(finFull), finRatio)
	return nil
}

// fireOnce makes the job "scale" due at slot and times the ticker pass
// that fires it.
func fireOnce(ctx context.Context, stack *devstack.Stack, slot time.Time) (float64, error) {
	svc, st := stack.Service, stack.Store
	j, err := st.GetJob(ctx, "scale")
	if err != nil {
		return 0, err
	}
	move := ledger.ScheduleMove{Version: j.Version, From: j.Position(), To: ledger.SchedulePosition{NextFireAt: slot}}
	if _, err := st.MoveSchedule(ctx, "scale", move); err != nil {
		return 0, fmt.Errorf("make scale due: %w", err)
	}
	pass, err := svc.Tick(ctx)
	if err != nil {
		return 0, fmt.Errorf("fire: %w", err)
	}
	if pass.Handled < 1 {
		return 0, fmt.Errorf("fire: the pass handled no timer (%+v)", pass)
	}
	return ms(pass.Duration), nil
}

// finishOnce triggers a run of "scale" and times the cancel that ends it.
func finishOnce(ctx context.Context, stack *devstack.Stack) (float64, error) {
	svc := stack.Service
	v, _, err := svc.Triggers().TriggerRun(ctx, scheduler.TriggerRequest{Job: "scale"})
	if err != nil {
		return 0, fmt.Errorf("finish: trigger: %w", err)
	}
	start := time.Now()
	if err := svc.CancelRun(ctx, v.Run.ID, "bench"); err != nil {
		return 0, fmt.Errorf("finish: cancel %s: %w", v.Run.ID, err)
	}
	took := time.Since(start)
	run, err := stack.Store.GetRun(ctx, v.Run.ID)
	if err != nil {
		return 0, err
	}
	if !run.ExecutionState.Terminal() {
		return 0, fmt.Errorf("finish: run %s is %s after its cancel", run.ID, run.ExecutionState)
	}
	return ms(took), nil
}
