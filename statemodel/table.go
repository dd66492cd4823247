package statemodel

import (
	"fmt"
	"slices"
)

// StateNone is the state before an instance exists; only instance.created
// leaves it.
const StateNone InstanceState = ""

// Row is one allowed (state, event) pair: the one actor allowed to report the
// event there, and every state the decision may lead to (the first is the
// usual one; the others depend on policy, evidence or a cancel request).
type Row struct {
	From  InstanceState
	Event EventType
	Actor Actor
	To    []InstanceState
	// Silent rows refresh liveness without a history record or a version
	// bump (heartbeats while running).
	Silent bool
	// Guard says what else must hold, in words; Apply enforces it.
	Guard string
}

// table is the closed list of transitions. Anything not listed is rejected
// with a *TransitionError that names the state, the event and the actor.
// docs/state-machine.md is generated from it.
var table = []Row{
	{StateNone, EvCreated, ActorScheduler, to(StateCreated), false, ""},

	{StateCreated, EvDepsMet, ActorScheduler, to(StateScheduled), false, ""},
	{StateCreated, EvDepsSkipped, ActorScheduler, to(StateSkipped), false, ""},
	{StateCreated, EvDepsUpstreamFailed, ActorScheduler, to(StateUpstreamFailed), false, ""},
	{StateCreated, EvDepsTimeout, ActorScheduler, to(StateUpstreamFailed), false, "depends_on_jobs unmet at the dependency timeout"},

	{StateScheduled, EvDispatched, ActorExecutor, to(StateQueued), false, "attempt = current + 1"},
	{StateScheduled, EvDispatchFailed, ActorScheduler, to(StateFailed), false, "queue timeout since scheduled passed; no retry"},

	{StateQueued, EvStarted, ActorWorker, to(StateRunning), false, "current attempt only"},

	{StateRunning, EvHeartbeat, ActorWorker, to(StateRunning), true, "current attempt"},
	{StateCancelling, EvHeartbeat, ActorWorker, to(StateCancelling), true, "current attempt"},
	{StateLost, EvHeartbeat, ActorWorker, to(StateRunning, StateCancelling), false, "current attempt proves alive"},

	{StateRunning, EvSucceeded, ActorWorker, to(StateSucceeded), false, "current attempt"},
	{StateLost, EvSucceeded, ActorWorker, to(StateSucceeded), false, "late success of the current attempt"},
	{StateCancelling, EvSucceeded, ActorWorker, to(StateSucceeded), false, "finished before it could stop"},
	{StateUpForRetry, EvSucceeded, ActorWorker, to(StateSucceeded), false, "current attempt claimed, outcome undecided"},
	{StateScheduled, EvSucceeded, ActorWorker, to(StateSucceeded), false, "current attempt claimed, outcome undecided"},
	{StatePaused, EvSucceeded, ActorWorker, to(StateSucceeded), false, "current attempt claimed, outcome undecided"},

	{StateRunning, EvFailed, ActorWorker, to(StateUpForRetry, StateFailed), false, "retry by policy"},
	{StateLost, EvFailed, ActorWorker, to(StateUpForRetry, StateFailed), false, "retry by policy; failed if cancel requested"},
	{StateCancelling, EvFailed, ActorWorker, to(StateFailed), false, "finished before it could stop"},

	{StateCancelling, EvCancelled, ActorWorker, to(StateCancelled), false, "the acknowledgement"},
	{StateLost, EvCancelled, ActorWorker, to(StateCancelled), false, "cancel requested"},

	{StateRunning, EvLeaseExpired, ActorReconciler, to(StateLost), false, "lease expired"},
	{StateQueued, EvQueueTimeout, ActorReconciler, to(StateUpForRetry, StateFailed), false, "queue deadline passed"},
	{StateCancelling, EvCancelTimeout, ActorReconciler, to(StateLost), false, "cancel deadline passed"},

	{StateLost, EvEvidenceOK, ActorReconciler, to(StateSucceeded), false, "confirmed success"},
	{StateLost, EvEvidenceFailed, ActorReconciler, to(StateUpForRetry, StateFailed, StateCancelled), false, "confirmed failure, or process gone (ends lost)"},
	{StateLost, EvNeverStarted, ActorReconciler, to(StateScheduled, StateFailed, StateCancelled), false, "resubmits bounded"},
	{StateLost, EvWindowExpired, ActorReconciler, to(StateUpForRetry, StateFailed, StateCancelled), false, "evidence deadline passed"},

	{StateUpForRetry, EvRetryDue, ActorScheduler, to(StateScheduled), false, "retry_at reached"},

	{StateCreated, EvCancelRequested, ActorOperator, to(StateCancelled), false, ""},
	{StateScheduled, EvCancelRequested, ActorOperator, to(StateCancelled), false, ""},
	{StateQueued, EvCancelRequested, ActorOperator, to(StateCancelled), false, "the fenced claim refuses it after"},
	{StateUpForRetry, EvCancelRequested, ActorOperator, to(StateCancelled), false, ""},
	{StatePaused, EvCancelRequested, ActorOperator, to(StateCancelled), false, ""},
	{StateRunning, EvCancelRequested, ActorOperator, to(StateCancelling, StateCancelled), false, "a signal attempt, which nothing runs, ends at once"},
	{StateLost, EvCancelRequested, ActorOperator, to(StateCancelling), false, ""},

	{StateCreated, EvPause, ActorOperator, to(StatePaused), false, ""},
	{StateScheduled, EvPause, ActorOperator, to(StatePaused), false, ""},
	{StateUpForRetry, EvPause, ActorOperator, to(StatePaused), false, ""},
	{StatePaused, EvResume, ActorOperator, to(StateCreated, StateScheduled, StateUpForRetry), false, "back to where it was"},

	{StateFailed, EvOverrideSucceeded, ActorOperator, to(StateSucceeded), false, "operator and reason"},
	{StateCancelled, EvOverrideSucceeded, ActorOperator, to(StateSucceeded), false, "operator and reason"},
	{StateSkipped, EvOverrideSucceeded, ActorOperator, to(StateSucceeded), false, "operator and reason"},
	{StateUpstreamFailed, EvOverrideSucceeded, ActorOperator, to(StateSucceeded), false, "operator and reason"},
	{StateLost, EvOverrideSucceeded, ActorOperator, to(StateSucceeded), false, "operator and reason"},
	{StateSucceeded, EvOverrideFailed, ActorOperator, to(StateFailed), false, "operator and reason"},
	{StateCancelled, EvOverrideFailed, ActorOperator, to(StateFailed), false, "operator and reason"},
	{StateSkipped, EvOverrideFailed, ActorOperator, to(StateFailed), false, "operator and reason"},
	{StateUpstreamFailed, EvOverrideFailed, ActorOperator, to(StateFailed), false, "operator and reason"},
	{StateLost, EvOverrideFailed, ActorOperator, to(StateFailed), false, "operator and reason"},

	{StateFailed, EvManualRetry, ActorOperator, to(StateScheduled), false, "new attempt, fresh budget"},
	{StateCancelled, EvManualRetry, ActorOperator, to(StateScheduled), false, "new attempt, fresh budget"},

	{StateUpstreamFailed, EvOverrideCleared, ActorOperator, to(StateCreated), false, "an upstream task is retried with its downstream"},
	{StateSkipped, EvOverrideCleared, ActorOperator, to(StateCreated), false, "an upstream task is retried with its downstream"},

	{StateQueued, EvSignalRequested, ActorScheduler, to(StateRunning), false, "current attempt, a signal attempt; no lease, run timeout armed"},
	{StateRunning, EvSignalSucceeded, ActorOperator, to(StateSucceeded), false, "current attempt, a signal attempt"},
	{StateRunning, EvSignalFailed, ActorOperator, to(StateUpForRetry, StateFailed), false, "current attempt, a signal attempt; retry by policy"},
	{StateRunning, EvSignalTimeout, ActorReconciler, to(StateUpForRetry, StateFailed), false, "current signal attempt; run timeout passed; retry by policy"},
}

func to(s ...InstanceState) []InstanceState { return s }

type rowKey struct {
	from InstanceState
	ev   EventType
}

var (
	rowIndex   = map[rowKey]int{}
	eventActor = map[EventType]Actor{}
)

func init() {
	for i, r := range table {
		k := rowKey{r.From, r.Event}
		if _, dup := rowIndex[k]; dup {
			panic(fmt.Sprintf("statemodel: two rows for (%s, %s)", r.From, r.Event))
		}
		rowIndex[k] = i
		if a, ok := eventActor[r.Event]; ok && a != r.Actor {
			panic(fmt.Sprintf("statemodel: event %s has two actors", r.Event))
		}
		eventActor[r.Event] = r.Actor
	}
}

// Table returns a copy of the transition table.
func Table() []Row {
	out := make([]Row, len(table))
	for i, r := range table {
		r.To = slices.Clone(r.To)
		out[i] = r
	}
	return out
}

// Lookup returns the row for (from, ev), if the table has one.
func Lookup(from InstanceState, ev EventType) (Row, bool) {
	i, ok := rowIndex[rowKey{from, ev}]
	if !ok {
		return Row{}, false
	}
	return table[i], true
}

// ActorOf returns the one actor allowed to report events of type ev.
func ActorOf(ev EventType) (Actor, bool) {
	a, ok := eventActor[ev]
	return a, ok
}
