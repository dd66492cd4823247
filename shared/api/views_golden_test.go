package api

import (
	"flag"
	"os"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current rendering")

// sampleRunView is a run with one finished task (two attempts, a late
// event) and one task that never started: set and unset times, ids and
// categories, HTML characters.
func sampleRunView() ledger.RunView {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 678_900_000, time.UTC)
	exit := 3
	a1 := statemodel.AttemptRecord{N: 1, ExecutorID: "msg-1", WorkerID: "w@boot", SpendsBudget: true, QueuedAt: t0,
		StartedAt: t0.Add(time.Second), EndedAt: t0.Add(2 * time.Second), LastHeartbeatAt: t0.Add(time.Second),
		ExitCode: &exit, ErrorCategory: "quota_exceeded", Outcome: statemodel.OutcomeFailed, OutputRef: "s3://b/<k>&v"}
	a2 := statemodel.AttemptRecord{N: 2, Executor: "lambda", ExecutorID: "msg-2", WorkerID: "w@boot", SpendsBudget: true, QueuedAt: t0.Add(3 * time.Second),
		StartedAt: t0.Add(4 * time.Second), EndedAt: t0.Add(5 * time.Second), Outcome: statemodel.OutcomeSucceeded}
	done := ledger.Instance{Key: ledger.InstanceKey{Run: "run1", Task: "extract"}, Pool: "default", TriggerRule: statemodel.RuleAllSuccess,
		Snapshot: statemodel.Snapshot{State: statemodel.StateSucceeded, Attempt: 2, Attempts: []statemodel.AttemptRecord{a1, a2}}}
	waiting := ledger.Instance{Key: ledger.InstanceKey{Run: "run1", Task: "load"}, Pool: "default", DependsOn: []string{"extract"},
		TriggerRule: statemodel.RuleAllDone, Publish: true, TimerAt: t0.Add(time.Hour),
		Snapshot: statemodel.Snapshot{State: statemodel.StateCreated}}
	late := ledger.Attempt{AttemptRecord: a1, LateDropped: 2, Late: []statemodel.LateEvent{{Attempt: 1, EventID: "complete:1:late-1",
		Type: statemodel.EvSucceeded, Actor: statemodel.ActorWorker, EventTime: t0.Add(6 * time.Second), Outcome: statemodel.OutcomeSucceeded, Detail: "a <late> report"}}}
	return ledger.RunView{
		Run: ledger.Run{ID: "run1", Job: "nightly", LogicalTime: t0.Truncate(time.Hour), Trigger: statemodel.TriggerBackfill, BackfillID: "bf1", Params: []byte(`{"day":"<2030-01-02>"}`),
			ExecutionState: statemodel.RunRunning, PublicationState: statemodel.PublicationPending, CreatedAt: t0,
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"},
		Tasks: []ledger.TaskView{{Instance: done, Attempts: []ledger.Attempt{late}}, {Instance: waiting}},
	}
}

func sampleTransitions() []statemodel.Transition {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return []statemodel.Transition{
		{Seq: 1, From: "", To: statemodel.StateCreated, Event: statemodel.EvCreated, EventID: "created", Actor: statemodel.ActorScheduler, ObservedAt: t0},
		{Seq: 2, From: statemodel.StateRunning, To: statemodel.StateFailed, Event: statemodel.EvFailed, EventID: "complete:1:done-1",
			Actor: statemodel.ActorWorker, Attempt: 1, EventTime: t0.Add(time.Second), ObservedAt: t0.Add(2 * time.Second),
			Evidence: map[string]string{"exit_code": "3"}, Reason: "tail <of> & error"},
		{Seq: 3, From: statemodel.StateFailed, To: statemodel.StateSucceeded, Event: statemodel.EvOverrideSucceeded, EventID: "override:3",
			Actor: statemodel.ActorOperator, ObservedAt: t0.Add(time.Minute), Reason: "checked by hand", Operator: "ana", Scope: "task"},
	}
}

func sampleBodies(t *testing.T) map[string]any {
	v := sampleRunView()
	detail := protocol.RunDetail{Run: renderRun(v.Run)}
	for _, tv := range v.Tasks {
		detail.Tasks = append(detail.Tasks, renderTask(tv))
	}
	day := time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)
	detail.Run.WaitingFor = []protocol.WaitingFor{
		{Job: "upstream", LogicalTime: day, Require: statemodel.RequirePublished},
		{Job: "other", LogicalTime: day, Require: statemodel.RequireSucceeded, Run: "run0"},
	}
	history := protocol.HistoryPage{}
	for _, tr := range sampleTransitions() {
		rendered := renderTransition(tr)
		rendered.TraceID = v.Run.TraceID // the history route shows its run's
		history.Transitions = append(history.Transitions, rendered)
	}
	return map[string]any{
		"run_detail":   detail,
		"runs_last":    protocol.RunPage{Runs: []protocol.Run{renderRun(v.Run)}},
		"runs_more":    protocol.RunPage{Runs: []protocol.Run{}, NextToken: "tok"},
		"history_last": history,
	}
}

// The answers about runs are the contract's shape byte for byte: the
// golden files were written by the renderer before the views moved to
// package protocol.
func TestViewsGolden(t *testing.T) {
	t.Parallel()
	for name, body := range sampleBodies(t) {
		got, err := wire.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		file := "testdata/" + name + ".golden.json"
		if *updateGolden {
			if err := os.WriteFile(file, append(got, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(got)+"\n" != string(want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
}
