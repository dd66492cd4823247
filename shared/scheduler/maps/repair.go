package maps

import (
	"context"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// The run's timer is a map's backstop. A map moves on through its
// children's steps; a step a process lost is taken again here, and what a
// process left half done is finished:
//   - a map task RUNNING with no map item (its over's inputs could not be
//     read) is expanded again;
//   - children released (the map item's release mark moved) but never
//     written, because the process stopped between the two writes, are
//     written now (each put conditioned on not existing) and dispatched,
//     as are children written and never dispatched. Finding them reads
//     the children, so it is done only for a map seen unchanged by two
//     backstops of this process (stalled): a map that moves costs its
//     backstop no more than its map item.

// Backstop is the run timer's look at its running map tasks.
func (r *Room[E]) Backstop(ctx context.Context, runID string) []E {
	view, err := r.store.ReadRun(ctx, runID)
	if err != nil {
		return nil
	}
	var effs []E
	for _, t := range view.Tasks {
		inst := t.Instance
		if len(inst.Map) == 0 || inst.Snapshot.State != statemodel.StateRunning {
			continue
		}
		more, err := r.mapRepair(ctx, inst, view)
		if err != nil {
			r.log.WarnContext(ctx, "map backstop", "run_id", runID, "task", inst.Key.Task, "error", err.Error())
		}
		effs = append(effs, more...)
	}
	return effs
}

// mapRepair is the backstop of one running map task.
func (r *Room[E]) mapRepair(ctx context.Context, inst ledger.Instance, view ledger.RunView) ([]E, error) {
	key := inst.Key
	m, ok := view.Maps[key.Task]
	if !ok {
		rec, err := mapRecordOf(inst)
		if err != nil {
			return nil, err
		}
		_, more, err := r.expandMap(ctx, inst, view.Run, rec)
		return more, err
	}
	effs := []E{r.k.MapStep(key)}
	if m.Running <= 0 || !r.stalls.stalled(key, m) {
		return effs, nil
	}
	more, err := r.recreateChildren(ctx, key, m)
	return append(effs, more...), err
}

// recreateChildren writes the released children of m that do not exist
// (a write that meets one another process wrote leaves it as it is) and
// dispatches them, and the ones found SCHEDULED.
func (r *Room[E]) recreateChildren(ctx context.Context, key ledger.InstanceKey, m ledger.MapState) ([]E, error) {
	missing, waiting, err := r.scanChildren(ctx, key, m)
	if err != nil {
		return nil, err
	}
	p, err := r.mapParentOf(ctx, key)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		written, err := r.writeMissing(ctx, key, missing)
		if err != nil {
			return nil, err
		}
		waiting = append(waiting, written...)
	}
	run := p.run
	effs := make([]E, len(waiting))
	for i, c := range waiting {
		effs[i] = r.k.Dispatch(c, &run)
	}
	return effs, nil
}

// scanChildren pages the children of m: the indexes released and not
// written (missing), and the children written and not dispatched
// (SCHEDULED).
func (r *Room[E]) scanChildren(ctx context.Context, key ledger.InstanceKey, m ledger.MapState) (missing []int, waiting []ledger.Instance, err error) {
	exists := make([]bool, m.Next)
	token := ""
	for {
		page, next, err := r.store.ListChildren(ctx, key.Run, key.Task, 1000, token)
		if err != nil {
			return nil, nil, err
		}
		for _, c := range page {
			if _, i, ok := ledger.ParseChild(c.Key.Task); ok && i < len(exists) {
				exists[i] = true
			}
			if c.Snapshot.State == statemodel.StateScheduled {
				waiting = append(waiting, c)
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	for i, ok := range exists {
		if !ok {
			missing = append(missing, i)
		}
	}
	return missing, waiting, nil
}

// writeMissing writes the children missing of the map task key and
// answers the ones SCHEDULED as stored.
func (r *Room[E]) writeMissing(ctx context.Context, key ledger.InstanceKey, missing []int) ([]ledger.Instance, error) {
	children, _, err := r.newChildren(ctx, key, missing)
	if err != nil {
		return nil, err
	}
	if err := r.store.CreateChildren(ctx, children); err != nil {
		return nil, err
	}
	var waiting []ledger.Instance
	for _, c := range children {
		// Dispatch the child as stored: another process may have
		// written it first, with its own secret.
		stored, err := r.store.GetInstance(ctx, c.Key)
		if err != nil {
			return nil, err
		}
		if stored.Snapshot.State == statemodel.StateScheduled {
			waiting = append(waiting, stored)
		}
	}
	r.log.InfoContext(ctx, "map backstop wrote released children", "run_id", key.Run, "task", key.Task, "children", len(missing))
	return waiting, nil
}
