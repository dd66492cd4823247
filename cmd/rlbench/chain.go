package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/ledger"
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
	// The meter counts the stack's DynamoDB calls; the bench polls through
	// a reader of its own, uncounted. The ticker fires at start and then
	// hourly: a chain needs no scan, and its passes would blur the count.
	m := &meter{}
	st, err := b.startStack(ctx, devstack.Options{TickInterval: time.Hour, DynamoDBOptions: []func(*dynamodb.Options){m.dynamoOption}})
	if err != nil {
		return err
	}
	defer st.Stop(context.Background())
	reader := store.New(b.env.DynamoDBClient(), st.Info.Table, store.WithLogger(b.log))
	stop, err := benchWorker(st, "chain", 4, failFirst)
	if err != nil {
		return err
	}
	defer stop()
	api := newAPIClient(st.Info.APIURL, st.Info.APIKey)

	if err := api.createJob(ctx, map[string]any{"name": "chain", "pool": pool, "tasks": chainTasks(chainSteps)}); err != nil {
		return err
	}
	var totals []float64
	var ids []string
	var before meterCounts
	for i := -1; i < chainRuns; i++ { // run -1 warms up connections and caches
		if i == 0 {
			before = m.snapshot()
		}
		id, err := api.trigger(ctx, "chain", nil)
		if err != nil {
			return err
		}
		runs, err := waitRuns(ctx, reader, []string{id}, 3*time.Minute)
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
	calls := m.snapshot().sub(before).Latency
	total := median(totals)
	b.rep.figure("chain_total_ms", total, "ms")
	b.rep.figure("chain_step_ms", total/chainSteps, "ms")
	// The calls of one step by kind: every call the stack made while the
	// measured runs ran (they ran one after another, so every call is on a
	// step's path), over their steps.
	steps := float64(chainRuns * chainSteps)
	var perStep []string
	for _, op := range slices.Sorted(maps.Keys(calls)) {
		n := float64(calls[op].N) / steps
		b.rep.figure("chain_step_calls_"+op, n, "calls")
		perStep = append(perStep, fmt.Sprintf("%s %.2f", op, n))
	}
	b.rep.note("  DynamoDB calls per step: %s", strings.Join(perStep, ", "))
	b.rep.note("chain: %d sequential no-op tasks, %d runs: median %.0f ms per run, %.1f ms per step (target <= 30 ms); runs: %s",
		chainSteps, chainRuns, total, total/chainSteps, fmtList(totals))
	// Where a step's time goes, over every step of every measured run.
	phases, err := chainPhases(ctx, reader, ids)
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
			h, err := st.FullHistory(ctx, ledger.InstanceKey{Run: id, Task: fmt.Sprintf("s%02d", i)})
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
