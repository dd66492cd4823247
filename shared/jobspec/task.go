package jobspec

import (
	"encoding/json"
	"slices"

	"github.com/runledger/runledger/statemodel"
)

// Task is one task of a job as the scheduler runs it: the definition's
// overrides merged over the job's values.
type Task struct {
	ID        string
	DependsOn []string
	Rule      statemodel.TriggerRule
	Publish   bool
	// Pool is the task's pool override, else the job's.
	Pool string
	// Payload is the task's payload override, else the job's (nil if
	// neither has one). It is what the dispatch envelope carries.
	Payload json.RawMessage
	// Executor is the task's executor, else the job's.
	Executor Executor
	// Policy is statemodel.DefaultPolicy, then the job's retry, timeouts
	// and evidence window, then each retry and timeouts field the task sets.
	// Policy.Random is nil: the scheduler supplies its own source.
	Policy statemodel.Policy
	// Map is the task's fan-out; nil for a task that is not a map task.
	Map *Map
}

// Policy is the job-level policy: statemodel.DefaultPolicy with the job's
// retry, timeouts and evidence window over it.
func (j Job) Policy() statemodel.Policy {
	p := statemodel.DefaultPolicy()
	j.Retry.apply(&p.Retry)
	j.Timeouts.apply(&p.Timeouts)
	p.EvidenceWindow = j.EvidenceWindow
	return p
}

// Tasks returns the effective view of every task, in definition order.
func (j Job) Tasks() []Task {
	jobPolicy := j.Policy()
	out := make([]Task, 0, len(j.TaskDefs))
	for _, d := range j.TaskDefs {
		t := Task{
			ID: d.ID, DependsOn: slices.Clone(d.DependsOn), Rule: d.TriggerRule.Effective(),
			Publish: d.Publish, Pool: d.Pool, Payload: d.Payload, Policy: d.policy(jobPolicy),
			Map: d.Map,
		}
		if t.Pool == "" {
			t.Pool = j.Pool
		}
		if t.Payload == nil {
			t.Payload = j.Payload
		}
		t.Executor = j.Executor
		if d.Executor != nil {
			t.Executor = *d.Executor
		}
		out = append(out, t)
	}
	return out
}

// Task returns the effective view of the task with the given id.
func (j Job) Task(id string) (Task, bool) {
	for _, t := range j.Tasks() {
		if t.ID == id {
			return t, true
		}
	}
	return Task{}, false
}

// Nodes returns the tasks as statemodel's DAG rules see them, in definition
// order, with State empty: the caller fills in each instance's state before
// calling statemodel.Evaluate or DeriveRunState.
func (j Job) Nodes() []statemodel.TaskNode {
	out := make([]statemodel.TaskNode, 0, len(j.TaskDefs))
	for _, d := range j.TaskDefs {
		out = append(out, statemodel.TaskNode{
			ID: d.ID, DependsOn: slices.Clone(d.DependsOn), Rule: d.TriggerRule.Effective(), Publish: d.Publish,
		})
	}
	return out
}

func (d TaskDef) policy(job statemodel.Policy) statemodel.Policy {
	p := job
	d.Retry.apply(&p.Retry)
	d.Timeouts.apply(&p.Timeouts)
	return p
}

// apply sets each field r sets.
func (r Retry) apply(p *statemodel.RetryPolicy) {
	set(&p.MaxAttempts, r.MaxAttempts)
	set(&p.InitialInterval, r.InitialInterval)
	set(&p.BackoffCoefficient, r.BackoffCoefficient)
	set(&p.MaxInterval, r.MaxInterval)
	set(&p.Jitter, r.Jitter)
	switch {
	case r.Intervals != nil:
		p.Intervals = slices.Clone(*r.Intervals)
	case r.InitialInterval != nil:
		p.Intervals = nil // a task's own backoff replaces the job's intervals
	}
}

func (t Timeouts) apply(p *statemodel.Timeouts) {
	set(&p.Queue, t.Queue)
	set(&p.Run, t.Run)
	set(&p.Heartbeat, t.Heartbeat)
	set(&p.Cancel, t.Cancel)
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// over returns r with every unset field taken from base.
func (r Retry) over(base Retry) Retry {
	return Retry{
		MaxAttempts:        or(r.MaxAttempts, base.MaxAttempts),
		InitialInterval:    or(r.InitialInterval, base.InitialInterval),
		BackoffCoefficient: or(r.BackoffCoefficient, base.BackoffCoefficient),
		MaxInterval:        or(r.MaxInterval, base.MaxInterval),
		Jitter:             or(r.Jitter, base.Jitter),
		Intervals:          or(r.Intervals, base.Intervals),
	}
}

func (t Timeouts) over(base Timeouts) Timeouts {
	return Timeouts{
		Queue: or(t.Queue, base.Queue), Run: or(t.Run, base.Run),
		Heartbeat: or(t.Heartbeat, base.Heartbeat), Cancel: or(t.Cancel, base.Cancel),
		Dependency: or(t.Dependency, base.Dependency),
	}
}

func or[T any](v, base *T) *T {
	if v != nil {
		return v
	}
	return base
}

func ptr[T any](v T) *T { return &v }

// retryOf is a Retry with every field of p set (of the two ways to space
// retries, the one p uses).
func retryOf(p statemodel.RetryPolicy) Retry {
	r := Retry{
		MaxAttempts: ptr(p.MaxAttempts), InitialInterval: ptr(p.InitialInterval),
		BackoffCoefficient: ptr(p.BackoffCoefficient), MaxInterval: ptr(p.MaxInterval), Jitter: ptr(p.Jitter),
	}
	if len(p.Intervals) > 0 {
		r.Intervals, r.InitialInterval = ptr(slices.Clone(p.Intervals)), nil
	}
	return r
}

func timeoutsOf(t statemodel.Timeouts) Timeouts {
	return Timeouts{Queue: ptr(t.Queue), Run: ptr(t.Run), Heartbeat: ptr(t.Heartbeat), Cancel: ptr(t.Cancel)}
}
