package api

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/scheduler/workers"
	"github.com/runledger/runledger/statemodel"
)

// The answers about runs are package protocol's views, which the client
// package reads; this file fills them from the store's records.

func ms(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	v := d.Milliseconds()
	return &v
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func renderRun(r ledger.Run) protocol.Run {
	params := json.RawMessage(r.Params)
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	exec := r.ExecutionState
	return protocol.Run{
		ID: r.ID, Job: r.Job, LogicalTime: r.LogicalTime, Params: params,
		ExecutionState: exec, PublicationState: r.PublicationState,
		Status: exec.Status(), CreatedAt: r.CreatedAt, EndedAt: r.EndedAt,
		Trigger: r.Trigger, BackfillID: r.BackfillID,
		Event: r.Event, Priority: scheduler.RunPriority(r), TraceID: r.TraceID,
	}
}

// attemptState names where an attempt stands: the instance's state while it
// is the current, unfinished attempt; its outcome once it ended.
func attemptState(snap statemodel.Snapshot, a statemodel.AttemptRecord) string {
	switch {
	case a.Outcome != statemodel.OutcomeNone:
		return strings.ToUpper(string(a.Outcome))
	case a.N == snap.Attempt && !snap.State.Terminal():
		return string(snap.State)
	case a.Claimed():
		return string(statemodel.StateRunning)
	}
	return string(statemodel.StateQueued)
}

func renderTask(t ledger.TaskView) protocol.Task {
	inst := t.Instance
	snap := inst.Snapshot
	m := snap.Metrics()
	latest := m.Latest()
	v := protocol.Task{
		Task: inst.Key.Task, State: snap.State, Status: snap.State.Status(),
		Attempt: snap.Attempt, Pool: inst.Pool, DependsOn: inst.DependsOn, TriggerRule: inst.TriggerRule,
		Publish: inst.Publish, RetryAt: snap.RetryAt, TimerAt: inst.TimerAt,
		CancelRequested: snap.CancelRequested,
		Metrics:         protocol.Metrics{DependencyWaitMS: ms(m.DependencyWait), QueueWaitMS: ms(latest.QueueWait), RunMS: ms(latest.RunTime)},
		Attempts:        []protocol.Attempt{},
		Output:          ledger.SucceededOutput(snap),
	}
	if v.DependsOn == nil {
		v.DependsOn = []string{}
	}
	if snap.State != statemodel.StateUpForRetry && snap.State != statemodel.StatePaused {
		v.RetryAt = time.Time{}
	}
	late := map[int]ledger.Attempt{}
	for _, a := range t.Attempts {
		late[a.N] = a
	}
	for _, a := range allAttempts(t) {
		am := a.Metrics()
		hb := a.LastHeartbeatAt
		if a.N == snap.Attempt && a.EndedAt.IsZero() {
			hb = snap.Lease.LastHeartbeatAt
		}
		av := protocol.Attempt{
			N: a.N, State: attemptState(snap, a), WorkerID: a.WorkerID,
			Executor: jobspec.Executor{Type: a.Executor}.EffectiveType(), ExecutorID: a.ExecutorID,
			QueuedAt: a.QueuedAt, StartedAt: a.StartedAt, EndedAt: a.EndedAt,
			LastHeartbeatAt: hb, ExitCode: a.ExitCode, ErrorCategory: a.ErrorCategory,
			OutputRef: a.OutputRef, SpendsBudget: a.SpendsBudget, LateEvents: []protocol.LateEvent{},
			LateEventsDropped: late[a.N].LateDropped,
			Metrics:           protocol.Metrics{QueueWaitMS: ms(am.QueueWait), RunMS: ms(am.RunTime)},
		}
		for _, l := range late[a.N].Late {
			av.LateEvents = append(av.LateEvents, protocol.LateEvent{
				EventID: workers.ClientEventID(l.EventID), Event: string(l.Type), Actor: string(l.Actor), Outcome: string(l.Outcome),
				EventTime: l.EventTime, ObservedAt: l.ObservedAt, Detail: l.Detail,
			})
		}
		v.Attempts = append(v.Attempts, av)
	}
	return v
}

// allAttempts lists every attempt of a task in order: those older than
// the instance holds (statemodel.MaxInlineAttempts) from their attempt
// items, then the instance's own records.
func allAttempts(t ledger.TaskView) []statemodel.AttemptRecord {
	held := t.Instance.Snapshot.Attempts
	out := make([]statemodel.AttemptRecord, 0, max(len(t.Attempts), len(held)))
	for _, a := range t.Attempts {
		if len(held) > 0 && a.N < held[0].N {
			out = append(out, a.AttemptRecord)
		}
	}
	return append(out, held...)
}

func renderTransition(tr statemodel.Transition) protocol.Transition {
	ev := tr.Evidence
	if ev == nil {
		ev = map[string]string{}
	}
	return protocol.Transition{
		Seq: tr.Seq, From: tr.From, To: tr.To, Event: tr.Event, EventID: workers.ClientEventID(tr.EventID),
		Actor: tr.Actor, Attempt: tr.Attempt, EventTime: tr.EventTime, ObservedAt: tr.ObservedAt,
		Evidence: ev, Reason: tr.Reason, Operator: tr.Operator, Scope: tr.Scope, Override: tr.Override(),
	}
}
