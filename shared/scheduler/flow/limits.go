package flow

import (
	"context"
	"errors"
	"fmt"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
	"github.com/runledger/runledger/statemodel/limiter"
)

// CheckGroupLimits refuses j when a job of a group it names gives that
// group another limit (jobspec.CheckGroupLimit), before anything is
// written.
func (r *Room) CheckGroupLimits(ctx context.Context, j jobspec.Job) error {
	if !namesGroup(j) {
		return nil
	}
	token := ""
	for {
		jobs, next, err := r.store.ListJobs(ctx, 100, token)
		if err != nil {
			return err
		}
		for _, lj := range jobs {
			other, err := r.k.Compiled(lj.Spec)
			if err != nil {
				continue // not the room's to judge; the kernel's LoadJob reports it
			}
			if err := jobspec.CheckGroupLimit(j, other.Job); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		token = next
	}
}

func namesGroup(j jobspec.Job) bool {
	if j.Concurrency != nil && j.Concurrency.Group != "" {
		return true
	}
	for _, t := range j.TaskDefs {
		if t.Concurrency != nil && t.Concurrency.Group != "" {
			return true
		}
	}
	return false
}

// CheckAdmissible refuses a new run of a limited job before anything is
// written: a manual run whose key fails to render (422 naming
// concurrency.key), and any run whose limiter already has
// limiter.MaxWaiting runs waiting (ledger.ErrLimitQueueFull: a trigger's
// 429, a schedule slot's missed slot). Triggers racing past this look are
// held by the entry's own conditional write (EnterLimiter refuses beyond
// the bound); such a run waits for its timer's next pass.
func (r *Room) CheckAdmissible(ctx context.Context, j jobspec.Job, nr ledger.NewRun) error {
	if !j.Limited() {
		return nil
	}
	probe := ledger.Run{ID: nr.ID, Job: nr.Job, LogicalTime: nr.LogicalTime, Params: nr.Params, Trigger: nr.Trigger, Spec: nr.Spec}
	c := jobspec.Compile(j)
	if nr.Trigger == statemodel.TriggerManual {
		if err := checkKeys(c, probe); err != nil {
			return err
		}
	}
	for _, lim := range stagesOf(c, probe) {
		full, err := r.turns.QueueFull(ctx, r.store, lim.queueOf(nr.ID))
		if err != nil {
			return err
		}
		if full {
			return fmt.Errorf("start run of %s: limiter %s: %w", j.Name, lim.name, ledger.ErrLimitQueueFull)
		}
	}
	return nil
}

// checkKeys refuses a manual run whose concurrency or rate_limit key fails
// to render: a 422 naming the key's field.
func checkKeys(c *jobspec.Compiled, probe ledger.Run) error {
	keys := map[string]func(data any) (string, error){}
	if c.Job.Concurrency != nil {
		keys["concurrency.key"] = c.ConcurrencyKey
	}
	if c.Job.RateLimit != nil {
		keys["rate_limit.key"] = c.RateKey
	}
	for _, field := range []string{"concurrency.key", "rate_limit.key"} {
		render, ok := keys[field]
		if !ok {
			continue
		}
		if _, err := render(keyData(probe)); err != nil {
			return &jobspec.Error{Code: protocol.CodeInvalidField, Field: field,
				Message: fmt.Sprintf("%s does not render for this run: %v.", field, err)}
		}
	}
	return nil
}

// ApplyLimit stores an updated job's concurrency limit in the limiters its
// unfinished runs stand in (its key-less limiter: no read) and hands on the
// room a raised limit makes, in the update's request: waiting runs are
// admitted at once. Lowering a limit stops nothing already active. A
// limiter it fails to reach is set by the next run that enters it.
func (r *Room) ApplyLimit(ctx context.Context, j jobspec.Job) {
	if j.Concurrency == nil {
		return
	}
	// Each limiter by name, with the rate it holds too (one limiter
	// holding both limits).
	names := map[string]limiter.Rate{}
	c := jobspec.Compile(j)
	if j.Concurrency.Key == "" {
		st := stagesOf(c, ledger.Run{Job: j.Name})[0]
		names[st.name] = st.rate
	} else {
		runs, err := r.store.ListUnfinishedRuns(ctx, j.Name)
		if err != nil {
			r.log.WarnContext(ctx, "limit change: runs not read", "job", j.Name, "error", err.Error())
			return
		}
		for _, u := range runs {
			found, err := r.store.GetRun(ctx, u.ID) // its params render its key
			if err != nil {
				continue // ended and gone since
			}
			st := stagesOf(c, found)[0]
			names[st.name] = st.rate
		}
	}
	for name, rate := range names {
		if err := r.setLimit(ctx, name, j.Concurrency.Limit, rate); err != nil {
			r.log.WarnContext(ctx, "limit change not stored", "job", j.Name, "limiter", name, "error", err.Error())
		}
	}
}

// setLimit stores limiter name's new limit and hands on the room it
// makes: one limiter item as always, or a group (a limit above
// limiter.ShardLimit, or one that was: ledger.ErrGrouped), whose shards
// are re-shared in one write and then each hand on, before the group
// rebalances. A limiter a rate window holds too is never a group.
func (r *Room) setLimit(ctx context.Context, name string, limit int, rate limiter.Rate) error {
	if limit <= limiter.ShardLimit || rate.On() {
		_, err := r.turns.SetLimiterLimit(ctx, r.store, name, limit)
		switch {
		case err == nil:
			return r.handOn(ctx, name, rate, nil)
		case !errors.Is(err, ledger.ErrGrouped):
			return err
		}
	}
	n, err := r.turns.SetGroupLimit(ctx, r.store, name, limit)
	if err != nil {
		return err
	}
	for sh := range n {
		if err := r.handOn(ctx, limiter.ShardName(name, sh), limiter.Rate{}, nil); err != nil {
			return err
		}
	}
	return r.rebalance(ctx, name, nil)
}
