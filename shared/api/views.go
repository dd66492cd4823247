package api

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// optTime renders a time, or null for the zero time.
func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := scheduler.FormatTime(t)
	return &s
}

func ms(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	v := d.Milliseconds()
	return &v
}

type metricsView struct {
	DependencyWaitMS *int64 `json:"dependency_wait_ms,omitempty"`
	QueueWaitMS      *int64 `json:"queue_wait_ms"`
	RunMS            *int64 `json:"run_ms"`
}

type lateView struct {
	EventID    string  `json:"event_id"`
	Event      string  `json:"event"`
	Actor      string  `json:"actor"`
	Outcome    string  `json:"outcome,omitempty"`
	EventTime  *string `json:"event_time"`
	ObservedAt *string `json:"observed_at"`
	Detail     string  `json:"detail,omitempty"`
}

type attemptView struct {
	N               int        `json:"n"`
	State           string     `json:"state"`
	WorkerID        *string    `json:"worker_id"`
	ExecutorID      *string    `json:"executor_id"`
	QueuedAt        *string    `json:"queued_at"`
	StartedAt       *string    `json:"started_at"`
	EndedAt         *string    `json:"ended_at"`
	LastHeartbeatAt *string    `json:"last_heartbeat_at"`
	ExitCode        *int       `json:"exit_code"`
	ErrorCategory   *string    `json:"error_category"`
	OutputRef       *string    `json:"output_ref,omitempty"`
	SpendsBudget    bool       `json:"spends_budget"`
	LateEvents      []lateView `json:"late_events"`
	// LateDropped counts late events past the first store.MaxLateEvents.
	LateDropped int         `json:"late_events_dropped"`
	Metrics     metricsView `json:"metrics"`
}

type taskView struct {
	Task            string        `json:"task"`
	State           string        `json:"state"`
	Status          string        `json:"status"`
	Attempt         int           `json:"attempt"`
	Pool            string        `json:"pool"`
	DependsOn       []string      `json:"depends_on"`
	TriggerRule     string        `json:"trigger_rule"`
	Publish         bool          `json:"publish"`
	RetryAt         *string       `json:"retry_at"`
	TimerAt         *string       `json:"timer_at"`
	CancelRequested bool          `json:"cancel_requested"`
	Metrics         metricsView   `json:"metrics"`
	Attempts        []attemptView `json:"attempts"`
}

type runView struct {
	ID               string          `json:"id"`
	Job              string          `json:"job"`
	LogicalTime      *string         `json:"logical_time"`
	Params           json.RawMessage `json:"params"`
	ExecutionState   string          `json:"execution_state"`
	PublicationState string          `json:"publication_state"`
	Status           string          `json:"status"`
	CreatedAt        *string         `json:"created_at"`
	EndedAt          *string         `json:"ended_at"`
	// WaitingFor is present while the run's root tasks wait on other
	// jobs' runs (depends_on_jobs), absent otherwise.
	WaitingFor []waitingView `json:"waiting_for,omitempty"`
}

// waitingView is one upstream job's run a run waits for; run is null while
// the upstream job has no run of that logical time.
type waitingView struct {
	Job         string  `json:"job"`
	LogicalTime string  `json:"logical_time"`
	Require     string  `json:"require"`
	Run         *string `json:"run"`
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func renderRun(r store.Run) runView {
	params := json.RawMessage(r.Params)
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	exec := r.ExecutionState
	return runView{
		ID: r.ID, Job: r.Job, LogicalTime: optTime(r.LogicalTime), Params: params,
		ExecutionState: string(exec), PublicationState: string(r.PublicationState),
		Status: string(exec.Status()), CreatedAt: optTime(r.CreatedAt), EndedAt: optTime(r.EndedAt),
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

func renderTask(t store.TaskView) taskView {
	inst := t.Instance
	snap := inst.Snapshot
	m := snap.Metrics()
	latest := m.Latest()
	v := taskView{
		Task: inst.Key.Task, State: string(snap.State), Status: string(snap.State.Status()),
		Attempt: snap.Attempt, Pool: inst.Pool, DependsOn: inst.DependsOn, TriggerRule: string(inst.TriggerRule),
		Publish: inst.Publish, RetryAt: optTime(snap.RetryAt), TimerAt: optTime(inst.TimerAt),
		CancelRequested: snap.CancelRequested,
		Metrics:         metricsView{DependencyWaitMS: ms(m.DependencyWait), QueueWaitMS: ms(latest.QueueWait), RunMS: ms(latest.RunTime)},
		Attempts:        []attemptView{},
	}
	if v.DependsOn == nil {
		v.DependsOn = []string{}
	}
	if snap.State != statemodel.StateUpForRetry && snap.State != statemodel.StatePaused {
		v.RetryAt = nil
	}
	late := map[int]store.Attempt{}
	for _, a := range t.Attempts {
		late[a.N] = a
	}
	for _, a := range allAttempts(t) {
		am := a.Metrics()
		hb := a.LastHeartbeatAt
		if a.N == snap.Attempt && a.EndedAt.IsZero() {
			hb = snap.Lease.LastHeartbeatAt
		}
		av := attemptView{
			N: a.N, State: attemptState(snap, a), WorkerID: strPtr(a.WorkerID), ExecutorID: strPtr(a.ExecutorID),
			QueuedAt: optTime(a.QueuedAt), StartedAt: optTime(a.StartedAt), EndedAt: optTime(a.EndedAt),
			LastHeartbeatAt: optTime(hb), ExitCode: a.ExitCode, ErrorCategory: strPtr(a.ErrorCategory),
			OutputRef: strPtr(a.OutputRef), SpendsBudget: a.SpendsBudget, LateEvents: []lateView{},
			Metrics: metricsView{QueueWaitMS: ms(am.QueueWait), RunMS: ms(am.RunTime)},
		}
		av.LateDropped = late[a.N].LateDropped
		for _, l := range late[a.N].Late {
			av.LateEvents = append(av.LateEvents, lateView{
				EventID: scheduler.ClientEventID(l.EventID), Event: string(l.Type), Actor: string(l.Actor), Outcome: string(l.Outcome),
				EventTime: optTime(l.EventTime), ObservedAt: optTime(l.ObservedAt), Detail: l.Detail,
			})
		}
		v.Attempts = append(v.Attempts, av)
	}
	return v
}

// allAttempts lists every attempt of a task in order: those older than
// the instance holds (statemodel.MaxInlineAttempts) from their attempt
// items, then the instance's own records.
func allAttempts(t store.TaskView) []statemodel.AttemptRecord {
	held := t.Instance.Snapshot.Attempts
	out := make([]statemodel.AttemptRecord, 0, max(len(t.Attempts), len(held)))
	for _, a := range t.Attempts {
		if len(held) > 0 && a.N < held[0].N {
			out = append(out, a.AttemptRecord)
		}
	}
	return append(out, held...)
}

type transitionView struct {
	Seq        int64             `json:"seq"`
	From       string            `json:"from"`
	To         string            `json:"to"`
	Event      string            `json:"event"`
	EventID    string            `json:"event_id"`
	Actor      string            `json:"actor"`
	Attempt    int               `json:"attempt"`
	EventTime  *string           `json:"event_time"`
	ObservedAt *string           `json:"observed_at"`
	Evidence   map[string]string `json:"evidence"`
	Reason     string            `json:"reason"`
	Operator   string            `json:"operator,omitempty"`
	Scope      string            `json:"scope,omitempty"`
	Override   bool              `json:"override,omitempty"`
}

func renderTransition(tr statemodel.Transition) transitionView {
	ev := tr.Evidence
	if ev == nil {
		ev = map[string]string{}
	}
	return transitionView{
		Seq: tr.Seq, From: string(tr.From), To: string(tr.To), Event: string(tr.Event), EventID: scheduler.ClientEventID(tr.EventID),
		Actor: string(tr.Actor), Attempt: tr.Attempt, EventTime: optTime(tr.EventTime), ObservedAt: optTime(tr.ObservedAt),
		Evidence: ev, Reason: tr.Reason, Operator: tr.Operator, Scope: tr.Scope, Override: tr.Override(),
	}
}
