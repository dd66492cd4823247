package statemodel

import (
	"slices"
	"testing"
)

func TestDownstream(t *testing.T) {
	// a -> b -> d, a -> c -> d, d -> e; x stands apart; f depends on x and e.
	nodes := []TaskNode{
		{ID: "a"}, {ID: "b", DependsOn: []string{"a"}}, {ID: "c", DependsOn: []string{"a"}},
		{ID: "d", DependsOn: []string{"b", "c"}}, {ID: "e", DependsOn: []string{"d"}},
		{ID: "x"}, {ID: "f", DependsOn: []string{"x", "e"}},
	}
	cases := map[string][]string{
		"a": {"b", "c", "d", "e", "f"},
		"c": {"d", "e", "f"},
		"e": {"f"},
		"x": {"f"},
		"f": nil,
		"?": nil,
	}
	for id, want := range cases {
		if got := Downstream(nodes, id); !slices.Equal(got, want) {
			t.Errorf("Downstream(%s) = %v, want %v", id, got, want)
		}
	}
}

func TestClearReturnsATaskThatDidNotRunToCreated(t *testing.T) {
	p := DefaultPolicy()
	for _, ended := range []EventType{EvDepsUpstreamFailed, EvDepsSkipped} {
		s := step(t, Snapshot{}, Event{ID: "c", Type: EvCreated, Actor: ActorScheduler}, t0, p, Applied).Snapshot
		s = step(t, s, Event{ID: "e", Type: ended, Actor: ActorScheduler}, t0, p, Applied).Snapshot
		d := step(t, s, Event{ID: "x", Type: EvOverrideCleared, Actor: ActorOperator, Operator: "ann"}, t0, p, Applied)
		tr := d.Transition
		if d.Snapshot.State != StateCreated || tr.Scope != "downstream" || tr.Actor != ActorOperator || !tr.Override() {
			t.Fatalf("after %s: cleared to %s, scope %q, actor %s, override %v", ended, d.Snapshot.State, tr.Scope, tr.Actor, tr.Override())
		}
		if at, kind := d.Snapshot.Timer(); kind != TimerDepsRecheck || !at.Equal(t0.Add(p.DepsRecheck)) {
			t.Fatalf("cleared instance's timer: %s at %s", kind, at)
		}
	}
	// Only a task that ended without running is cleared: a failed one is
	// retried instead.
	s := step(t, Snapshot{}, Event{ID: "c", Type: EvCreated, Actor: ActorScheduler}, t0, p, Applied).Snapshot
	step(t, s, Event{ID: "x", Type: EvOverrideCleared, Actor: ActorOperator}, t0, p, Rejected)
}
