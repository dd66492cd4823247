package store_test

import (
	"context"
	"testing"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/store/storetest"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// TestFinishedItemsLeaveTheTimersIndex: finished instances and finished
// runs carry no timer attribute at all, so the sparse timers index holds
// live work only. (Which timers are due is the port's: storetest.)
func TestFinishedItemsLeaveTheTimersIndex(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.MustCreate(t, storetest.NewRun("done", "a", "b", "c"))
	for _, task := range v.Tasks {
		ts.Step(t, task.Instance.Key, storetest.Ev(statemodel.EvDepsSkipped, 0), ts.Clock.Now())
	}
	fresh, err := ts.ReadRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.UpdateRunState(ctx, fresh.Run, store.RunUpdate{
		ExecutionState: statemodel.DeriveRunState(fresh.Nodes()).State, PublicationState: statemodel.DerivePublication(fresh.Nodes()),
	}); err != nil {
		t.Fatal(err)
	}
	timerAttrs := []string{tableschema.TimerShard, tableschema.TimerAt, "timer_kind"}
	for _, task := range v.Tasks {
		it := getItem(t, ts.table, "RUN#"+v.Run.ID, "TASK#"+task.Instance.Key.Task)
		for _, a := range timerAttrs {
			if _, ok := it[a]; ok {
				t.Errorf("finished instance %s still has %s", task.Instance.Key, a)
			}
		}
	}
	it := getItem(t, ts.table, "RUN#"+v.Run.ID, "RUN")
	for _, a := range timerAttrs {
		if _, ok := it[a]; ok {
			t.Errorf("finished run %s still has %s", v.Run.ID, a)
		}
	}
}
