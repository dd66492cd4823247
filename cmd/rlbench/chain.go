package main

import (
	"context"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// chainSteps is the chain's length; jobspec.MaxTasks allows 48.
const chainSteps = 40

// chain runs a workflow of chainSteps sequential no-op tasks, once to warm
// up and then chainRuns times one after another, and reports the median
// total latency (the run's created_at to ended_at) and that divided by the
// number of steps.
func (b *bench) chain(ctx context.Context, chainRuns int) error {
	st, err := b.startStack(ctx, devstack.Options{})
	if err != nil {
		return err
	}
	defer st.Stop(context.Background())
	stop, err := benchWorker(st, "chain", 4, failFirst)
	if err != nil {
		return err
	}
	defer stop()
	api := newAPIClient(st.Info.APIURL, st.Info.APIKey)

	tasks := make([]map[string]any, chainSteps)
	for i := range tasks {
		tasks[i] = map[string]any{"id": fmt.Sprintf("s%02d", i)}
		if i > 0 {
			tasks[i]["depends_on"] = []string{fmt.Sprintf("s%02d", i-1)}
		}
	}
	if err := api.createJob(ctx, map[string]any{"name": "chain", "pool": pool, "tasks": tasks}); err != nil {
		return err
	}
	var totals []float64
	var ids []string
	for i := -1; i < chainRuns; i++ { // run -1 warms up connections and caches
		id, err := api.trigger(ctx, "chain", nil)
		if err != nil {
			return err
		}
		runs, err := waitRuns(ctx, st.Store, []string{id}, 3*time.Minute)
		if err != nil {
			return fmt.Errorf("chain run %d: %w", i, err)
		}
		r := runs[id]
		if r.ExecutionState != statemodel.RunSucceeded {
			return fmt.Errorf("chain run %s ended %s", id, r.ExecutionState)
		}
		if i >= 0 {
			totals = append(totals, ms(r.EndedAt.Sub(r.CreatedAt)))
			ids = append(ids, id)
		}
	}
	total := median(totals)
	b.rep.figure("chain_total_ms", total, "ms")
	b.rep.figure("chain_step_ms", total/chainSteps, "ms")
	b.rep.note("chain: %d sequential no-op tasks, %d runs: median %.0f ms per run, %.1f ms per step (target <= 30 ms); runs: %s",
		chainSteps, chainRuns, total, total/chainSteps, fmtList(totals))
	// Where a step's time goes, over every step of every measured run.
	phases, err := chainPhases(ctx, st.Store, ids)
	if err != nil {
		return err
	}
	b.rep.note("  a step, median per phase (observed_at of the transitions): %s", phases)
	return nil
}

// chainPhases splits the steps of the runs into the phases between their
// transitions and returns the median of each phase.
func chainPhases(ctx context.Context, st *store.Store, ids []string) (string, error) {
	names := []string{"previous task SUCCEEDED -> SCHEDULED", "SCHEDULED -> QUEUED", "QUEUED -> RUNNING", "RUNNING -> SUCCEEDED"}
	phases := make([][]float64, len(names))
	for _, id := range ids {
		var prevDone time.Time
		for i := range chainSteps {
			h, err := st.FullHistory(ctx, store.InstanceKey{Run: id, Task: fmt.Sprintf("s%02d", i)})
			if err != nil {
				return "", err
			}
			at := map[statemodel.InstanceState]time.Time{}
			for _, tr := range h {
				at[tr.To] = tr.ObservedAt
			}
			if !prevDone.IsZero() {
				phases[0] = append(phases[0], ms(at[statemodel.StateScheduled].Sub(prevDone)))
			}
			phases[1] = append(phases[1], ms(at[statemodel.StateQueued].Sub(at[statemodel.StateScheduled])))
			phases[2] = append(phases[2], ms(at[statemodel.StateRunning].Sub(at[statemodel.StateQueued])))
			phases[3] = append(phases[3], ms(at[statemodel.StateSucceeded].Sub(at[statemodel.StateRunning])))
			prevDone = at[statemodel.StateSucceeded]
		}
	}
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %.1f ms", n, median(phases[i]))
	}
	return out, nil
}

func fmtList(xs []float64) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.0f", x)
	}
	return s
}
