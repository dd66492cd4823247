package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/flow"
	"github.com/runledger/runledger/statemodel"
)

// NoticeSink receives the notices a person may act on (protocol.Notice):
// the EventBridge publisher in AWS, the log and the kept list of the local
// stack. Publish is called in the path that applies a transition, so it
// must never block: a sink that does I/O buffers, and drops (counted)
// when its buffer is full.
type NoticeSink interface {
	Publish(protocol.Notice)
}

// notices raises the kernel's notices: each is logged and handed to the
// sink, and a run's end and a missed deadline are measured too.
type notices struct {
	sink NoticeSink // nil: only the log has them
	log  *slog.Logger
	now  func() time.Time
	// metrics writes a run's metric lines (metrics.go).
	metrics *metrics
	// recent keeps the durations a run's completion deviation is
	// measured against (deviation.go).
	recent *recentDurations
	// ended is Config.RunEnded.
	ended func(RunEnded)
}

// Moved is one applied change of a task instance, as the local metrics
// page counts it: From is "" for the instance's creation, At is when the
// scheduler observed the change (the record's observed_at), Event and
// EventTime the event that made it and when it happened by its reporter.
type Moved struct {
	Job, Run, Task string
	From, To       statemodel.InstanceState
	At             time.Time
	Event          statemodel.EventType
	EventTime      time.Time
}

// Lag is the change's state-update lag (statemodel.Transition.Lag).
func (m Moved) Lag() (time.Duration, bool) {
	return statemodel.Transition{EventTime: m.EventTime, ObservedAt: m.At}.Lag()
}

// RunEnded is a run that has just reached a terminal execution state, as
// the local metrics page measures it: Duration is its end less its
// creation (the RunDuration metric's), and Deviation, when HasDeviation,
// that less the median duration of its job's recent succeeded runs
// (deviation.go); only a succeeded run has one.
type RunEnded struct {
	Job, Run     string
	State        statemodel.RunState
	Duration     time.Duration
	Deviation    time.Duration
	HasDeviation bool
}

// applied is the one place that handles the transitions a write applied:
// their metrics, the observers of Config.Moved, the notices of failed
// and lost tasks, and the task slot of a task leaving flight (flow.Room.FreeSlot). Every path that writes a transition calls it (through
// recorded or follow), whatever the result's outcome: res.Transitions
// lists what was written.
func (s *Service) applied(ctx context.Context, res ledger.Result) {
	trs := res.Transitions
	if len(trs) == 0 && res.Outcome == statemodel.Applied && res.Transition != nil {
		trs = []statemodel.Transition{*res.Transition}
	}
	inst := res.Instance
	release := false
	for _, tr := range trs {
		release = release || flow.ReleasesSlot(tr)
		s.metrics.transitions(inst.Key, inst.Job, res.Snapshot, &tr)
		attemptEnded(s.cfg.Spans, inst, tr)
		if s.cfg.Moved != nil {
			s.cfg.Moved(Moved{Job: inst.Job, Run: inst.Key.Run, Task: inst.Key.Task, From: tr.From, To: tr.To, At: tr.ObservedAt,
				Event: tr.Event, EventTime: tr.EventTime})
		}
		switch tr.To {
		case statemodel.StateFailed:
			s.notices.notify(ctx, protocol.Notice{Type: protocol.NoticeTaskFailed, Time: tr.ObservedAt, Job: inst.Job, Run: inst.Key.Run,
				Task: inst.Key.Task, Attempt: tr.Attempt, State: string(tr.To), Reason: failureReason(tr)})
		case statemodel.StateLost:
			s.notices.notify(ctx, protocol.Notice{Type: protocol.NoticeTaskLost, Time: tr.ObservedAt, Job: inst.Job, Run: inst.Key.Run,
				Task: inst.Key.Task, Attempt: tr.Attempt, State: string(tr.To), Reason: failureReason(tr)})
		}
	}
	if release {
		// Out of flight: a task slot it held goes to the next task waiting.
		s.flow.FreeSlot(ctx, inst)
	}
}

// created tells the observers of the instances a new run created: each
// was created, and a task created SCHEDULED had its dependencies met in
// the same write.
func (s *Service) created(view ledger.RunView) {
	if s.cfg.Spans != nil {
		s.cfg.Spans.RunCreated(view.Run)
	}
	if s.cfg.Moved == nil {
		return
	}
	at := view.Run.CreatedAt
	for _, t := range view.Tasks {
		m := Moved{Job: view.Run.Job, Run: view.Run.ID, Task: t.Instance.Key.Task, To: statemodel.StateCreated, At: at,
			Event: statemodel.EvCreated, EventTime: at}
		s.cfg.Moved(m)
		if t.Instance.Snapshot.State == statemodel.StateScheduled {
			m.From, m.To, m.Event = statemodel.StateCreated, statemodel.StateScheduled, statemodel.EvDepsMet
			s.cfg.Moved(m)
		}
	}
}

// failureReason is a task notice's reason: the transition's own, else its
// attempt's error category.
func failureReason(tr statemodel.Transition) string {
	if tr.Reason != "" {
		return tr.Reason
	}
	if rec := tr.AttemptRecord; rec != nil && rec.ErrorCategory != "" {
		return rec.ErrorCategory
	}
	return ""
}

// runEnded notifies and measures a run that has just reached a terminal
// execution state; nodes are its tasks as derived.
func (n notices) runEnded(ctx context.Context, run ledger.Run, nodes []statemodel.TaskNode) {
	var typ protocol.NoticeType
	switch run.ExecutionState {
	case statemodel.RunSucceeded:
		typ = protocol.NoticeRunSucceeded
		n.metrics.run("RunSucceeded", "Count", 1, run, false)
	case statemodel.RunFailed:
		typ = protocol.NoticeRunFailed
		n.metrics.run("RunFailed", "Count", 1, run, true)
	case statemodel.RunCancelled:
		typ = protocol.NoticeRunCancelled
	default:
		return
	}
	n.measureEnd(run)
	n.notify(ctx, protocol.Notice{Type: typ, Time: run.EndedAt, Job: run.Job, Run: run.ID,
		State: string(run.ExecutionState), Reason: runReason(run.ExecutionState, nodes)})
}

// measureEnd writes a run's duration and, for a succeeded run, its
// completion deviation, and tells Config.RunEnded. The deviation's metric
// has no job dimension: each job would be a metric of its own, and the
// alarms and dashboard read it across jobs (the job is a property of the
// line, for a query of the logs).
func (n notices) measureEnd(run ledger.Run) {
	if run.EndedAt.IsZero() || run.CreatedAt.IsZero() {
		return
	}
	end := RunEnded{Job: run.Job, Run: run.ID, State: run.ExecutionState, Duration: run.EndedAt.Sub(run.CreatedAt)}
	n.metrics.run("RunDuration", "Milliseconds", float64(end.Duration.Milliseconds()), run, true)
	if run.ExecutionState == statemodel.RunSucceeded {
		end.Deviation, end.HasDeviation = n.recent.deviation(run.Job, end.Duration)
	}
	if end.HasDeviation {
		n.metrics.run(MetricCompletionDeviation, "Milliseconds", float64(end.Deviation.Milliseconds()), run, false)
	}
	if n.ended != nil {
		n.ended(end)
	}
}

// runReason names the tasks that decided a run's end: the failed ones of a
// failed run, the cancelled ones of a cancelled run.
func runReason(state statemodel.RunState, nodes []statemodel.TaskNode) string {
	var pick func(statemodel.InstanceState) bool
	switch state {
	case statemodel.RunFailed:
		pick = func(st statemodel.InstanceState) bool {
			return st == statemodel.StateFailed || st == statemodel.StateUpstreamFailed
		}
	case statemodel.RunCancelled:
		pick = func(st statemodel.InstanceState) bool { return st == statemodel.StateCancelled }
	default:
		return ""
	}
	var names []string
	for _, n := range nodes {
		if pick(n.State) {
			names = append(names, n.ID+" "+string(n.State))
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "tasks: " + strings.Join(names, ", ")
}

// deadlineMissed notifies and measures a run found unfinished at its
// deadline (once: the caller recorded it first).
func (n notices) deadlineMissed(ctx context.Context, run ledger.Run, deadline time.Duration) {
	n.metrics.run("DeadlineMissed", "Count", 1, run, false)
	n.notify(ctx, protocol.Notice{Type: protocol.NoticeRunDeadlineMissed, Time: n.now(), Job: run.Job, Run: run.ID,
		State:  string(run.ExecutionState),
		Reason: fmt.Sprintf("unfinished at its deadline %s (%s after it could start)", protocol.FormatTime(run.DeadlineAt), deadline)})
}

// notify logs a notice and hands it to the sink, which never blocks. What
// went wrong is logged as a warning, so that the local stack's default
// log (warnings and errors) shows it; a run that ended well or was
// cancelled is information.
func (n notices) notify(ctx context.Context, note protocol.Notice) {
	if note.Time.IsZero() {
		note.Time = n.now()
	}
	note.Time = note.Time.UTC().Truncate(time.Millisecond)
	level := slog.LevelWarn
	if note.Type == protocol.NoticeRunSucceeded || note.Type == protocol.NoticeRunCancelled {
		level = slog.LevelInfo
	}
	n.log.Log(ctx, level, "notice", "type", string(note.Type), "job", note.Job, "run_id", note.Run, "task", note.Task,
		"attempt", note.Attempt, "state", note.State, "reason", note.Reason)
	if n.sink != nil {
		n.sink.Publish(note)
	}
}
