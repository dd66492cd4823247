package scheduler

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// MetricsNamespace is the CloudWatch namespace of the embedded metrics; the
// CDK stack's alarms read InstanceLost, QueueWait and RunFailed from it.
const MetricsNamespace = "Runledger"

// JobDimension is the one dimension a metric may carry besides none:
// RunFailed and RunDuration are written with and without it. Each job name
// is then a metric of its own, billed as one (docs/deploy.md, "Metrics").
const JobDimension = "Job"

// MetricMessageRefused counts the queue messages the events function
// drops as permanently bad (malformed, forged, refused by the state
// machine, a trigger event off the trigger queue): each is logged once
// and never redelivered, so this count is what an alarm can watch.
const MetricMessageRefused = "MessageRefused"

// MetricCompletionDeviation is a succeeded run's duration less the
// median of its job's recent succeeded runs (deviation.go), in
// milliseconds: negative when it ran faster. CloudWatch gives no
// percentiles of a metric with negative values, so it is read by its
// average, minimum and maximum.
const MetricCompletionDeviation = "CompletionDeviation"

// MetricOverdueInState is, per pass of the ticker or the reconciler and
// per state it acts on (StateDimension), in seconds, how long ago the
// timer of the most overdue instance it listed in that state fell due; 0
// when none was due. A pass acts on every due timer it lists, so an
// instance listed again minutes after its time is one its owner could not
// move: stuck in that state (the stack's OverdueIn* alarms).
const MetricOverdueInState = "OverdueInState"

// MetricTransitionLag is a transition's state-update lag
// (statemodel.Transition.Lag), in milliseconds, written for the events
// whose time their reporter gave (a worker's completion): the scheduler's
// own events are written at the time they happen.
const MetricTransitionLag = "TransitionLag"

// StateDimension is the dimension of MetricOverdueInState: the instance
// state.
const StateDimension = "State"

// metrics writes the Service's CloudWatch embedded-metric-format lines to
// Config.Metrics, each line whole although passes running at once share
// the writer.
type metrics struct {
	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
}

// transitions writes CloudWatch embedded-metric-format lines for
// the transitions that alarms and dashboards watch: every move to LOST or
// FAILED, and every claim's queue wait (from transition times, never from
// created/updated columns).
func (m *metrics) transitions(key ledger.InstanceKey, job string, snap statemodel.Snapshot, tr *statemodel.Transition) {
	props := map[string]any{"run_id": key.Run, "task": key.Task, "attempt": tr.Attempt, "job": job}
	switch {
	case tr.To == statemodel.StateLost:
		m.emit(metric{name: "InstanceLost", unit: "Count", value: 1, props: props})
	case tr.To == statemodel.StateFailed:
		m.emit(metric{name: "TaskFailed", unit: "Count", value: 1, props: props})
	case tr.Event == statemodel.EvStarted:
		if a, ok := snap.AttemptN(tr.Attempt); ok {
			if am := a.Metrics(); am.QueueWait != nil {
				m.emit(metric{name: "QueueWait", unit: "Milliseconds", value: float64(am.QueueWait.Milliseconds()), props: props})
			}
		}
	}
	if lag, ok := tr.Lag(); ok && !tr.EventTime.Equal(tr.ObservedAt) {
		props := map[string]any{"run_id": key.Run, "task": key.Task, "attempt": tr.Attempt, "job": job, "event": string(tr.Event)}
		m.emit(metric{name: MetricTransitionLag, unit: "Milliseconds", value: float64(lag.Milliseconds()), props: props})
	}
}

// overdue writes one pass's MetricOverdueInState for each state it acts
// on, 0 for a state none of whose timers was due.
func (m *metrics) overdue(states []statemodel.InstanceState, worst map[statemodel.InstanceState]time.Duration) {
	for _, st := range states {
		m.emit(metric{name: MetricOverdueInState, unit: "Seconds", value: worst[st].Seconds(), state: string(st)})
	}
}

// run writes one metric of a run; byJob also counts it under the run's
// job (JobDimension).
func (m *metrics) run(name, unit string, value float64, run ledger.Run, byJob bool) {
	line := metric{name: name, unit: unit, value: value, props: map[string]any{"run_id": run.ID, "job": run.Job}}
	if byJob {
		line.job = run.Job
	}
	m.emit(line)
}

// metric is one embedded-metric line: a value with no dimension, and under
// JobDimension too when job is set.
type metric struct {
	name, unit string
	value      float64
	job        string
	state      string // StateDimension's value; a metric with it has no other dimension
	props      map[string]any
}

// emit writes one line.
func (m *metrics) emit(one metric) {
	dims := [][]string{{}}
	line := map[string]any{}
	for k, v := range one.props {
		line[k] = v
	}
	if one.state != "" {
		dims = [][]string{{StateDimension}}
		line[StateDimension] = one.state
	}
	if one.job != "" {
		dims = append(dims, []string{JobDimension})
		line[JobDimension] = one.job
	}
	line["_aws"] = map[string]any{
		"Timestamp": m.now().UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  MetricsNamespace,
			"Dimensions": dims,
			"Metrics":    []any{map[string]string{"Name": one.name, "Unit": one.unit}},
		}},
	}
	line[one.name] = one.value
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _ = m.w.Write(append(b, '\n'))
}
