package statemodel_test

import (
	"fmt"

	"github.com/runledger/runledger/statemodel"
)

// The scheduler's loop after a task finishes: evaluate the waiting tasks,
// move the decided ones, derive the run and its publication.
func ExampleEvaluate() {
	nodes := []statemodel.TaskNode{
		{ID: "extract", State: statemodel.StateSucceeded},
		{ID: "load", DependsOn: []string{"extract"}, State: statemodel.StateFailed},
		{ID: "cleanup", DependsOn: []string{"load"}, Rule: statemodel.RuleAllDone, State: statemodel.StateCreated},
		{ID: "publish", DependsOn: []string{"load"}, Publish: true, State: statemodel.StateCreated},
	}
	if err := statemodel.ValidateDAG(nodes); err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range statemodel.Evaluate(nodes) {
		to, _ := r.Verdict.Target()
		fmt.Printf("%s (%s): %s -> %s\n", r.ID, r.Rule, r.Verdict, to)
	}
	// Output:
	// cleanup (all_done): met -> SCHEDULED
	// publish (all_success): upstream_failed -> UPSTREAM_FAILED
}

func ExampleDeriveRunState() {
	nodes := []statemodel.TaskNode{
		{ID: "work", State: statemodel.StateFailed},
		{ID: "cleanup", DependsOn: []string{"work"}, Rule: statemodel.RuleAllDone, State: statemodel.StateSucceeded},
	}
	d := statemodel.DeriveRunState(nodes)
	fmt.Println(d.State, d.State.Status(), d.Leaves, statemodel.DerivePublication(nodes))
	// Output: SUCCEEDED SUCCEEDED [cleanup] NOT_REQUIRED
}

func ExampleValidateDAG() {
	err := statemodel.ValidateDAG([]statemodel.TaskNode{
		{ID: "a", DependsOn: []string{"c"}},
		{ID: "b", DependsOn: []string{"a"}},
		{ID: "c", DependsOn: []string{"b"}},
	})
	fmt.Println(err)
	// Output: dependency cycle: a -> b -> c -> a
}
