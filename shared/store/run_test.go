package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// TestFinishedItemsLeaveTheTimersIndex: finished instances and finished
// runs carry no timer attribute at all, so the sparse timers index holds
// live work only. (Which timers are due is the port's: ledgertest.)
func TestFinishedItemsLeaveTheTimersIndex(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.MustCreate(t, ledgertest.NewRun("done", "a", "b", "c"))
	for _, task := range v.Tasks {
		ts.Step(t, task.Instance.Key, ledgertest.Ev(statemodel.EvDepsSkipped, 0), ts.Clock.Now())
	}
	fresh, err := ts.ReadRun(ctx, v.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.UpdateRunState(ctx, fresh.Run, ledger.RunUpdate{
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

// TestRunStoredWithoutTriggerIsReadFromItsSlot: a run item written before
// runs kept their trigger reads as schedule when its job's slot names it,
// else as manual, on every read path.
func TestRunStoredWithoutTriggerIsReadFromItsSlot(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	sched := ledgertest.NewRun("legacy", "main")
	sched.Trigger, sched.ClaimSlot = statemodel.TriggerSchedule, true
	ts.MustCreate(t, sched)
	manual := ledgertest.NewRun("legacy", "main")
	manual.LogicalTime = ledgertest.T0.Add(time.Hour)
	ts.MustCreate(t, manual)
	// Such runs claimed their slots at JOB#<job>, before the sharding.
	moveToLegacy(t, ts.table, "legacy", nil)
	for _, id := range []string{sched.ID, manual.ID} {
		_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(ts.table),
			Key: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "RUN#" + id}, "sk": &types.AttributeValueMemberS{Value: "RUN"},
			},
			UpdateExpression: aws.String("REMOVE #t"), ExpressionAttributeNames: map[string]string{"#t": "trigger"},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]statemodel.Trigger{sched.ID: statemodel.TriggerSchedule, manual.ID: statemodel.TriggerManual}
	for id, tr := range want {
		r, err := ts.GetRun(ctx, id)
		if err != nil || r.Trigger != tr {
			t.Fatalf("GetRun %s: %q, %v; want %q", id, r.Trigger, err, tr)
		}
		v, err := ts.ReadRun(ctx, id)
		if err != nil || v.Run.Trigger != tr {
			t.Fatalf("ReadRun %s: %q, %v; want %q", id, v.Run.Trigger, err, tr)
		}
	}
	for _, f := range []ledger.RunFilter{{Job: "legacy"}, {}} {
		runs, _, err := ts.ListRuns(ctx, f)
		if err != nil || len(runs) != 2 {
			t.Fatalf("ListRuns %+v: %d runs, %v", f, len(runs), err)
		}
		for _, r := range runs {
			if r.Trigger != want[r.ID] {
				t.Fatalf("ListRuns %+v: run %s is %q, want %q", f, r.ID, r.Trigger, want[r.ID])
			}
		}
	}
}
