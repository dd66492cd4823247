package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"time"

	"github.com/runledger/runledger/statemodel"
)

// The answers about runs (docs/api.md, "Runs"). Times the API sends as null
// are the zero time.Time here (and are left out when encoded again);
// strings it sends as null are "".

// Run is a run without its tasks.
type Run struct {
	ID          string          `json:"id"`
	Job         string          `json:"job"`
	LogicalTime time.Time       `json:"logical_time,omitzero"`
	Params      json.RawMessage `json:"params,omitempty"`
	// ExecutionState is derived from the tasks: QUEUED, RUNNING, then
	// SUCCEEDED, FAILED or CANCELLED.
	ExecutionState   statemodel.RunState         `json:"execution_state"`
	PublicationState statemodel.PublicationState `json:"publication_state"`
	// Status is the coarse status: PENDING, RUNNING, SUCCEEDED, FAILED,
	// CANCELLED.
	Status    statemodel.Status `json:"status"`
	CreatedAt time.Time         `json:"created_at,omitzero"`
	EndedAt   time.Time         `json:"ended_at,omitzero"`
	// WaitingFor lists the upstream jobs' runs this run waits for while its
	// root tasks wait on depends_on_jobs; empty otherwise.
	WaitingFor []WaitingFor `json:"waiting_for,omitempty"`
}

// WaitingFor is one upstream job's run a run waits for. Run is "" while
// the upstream job has no run of that logical time (null on the wire).
type WaitingFor struct {
	Job         string                 `json:"job"`
	LogicalTime time.Time              `json:"logical_time"`
	Require     statemodel.Requirement `json:"require"`
	Run         string                 `json:"run"`
}

// Ended reports whether the run finished (SUCCEEDED, FAILED or CANCELLED).
func (r Run) Ended() bool { return r.ExecutionState.Terminal() }

// RunDetail is a run with its tasks, the answer of GetRun and of every
// action on a run or task.
type RunDetail struct {
	Run   Run    `json:"run"`
	Tasks []Task `json:"tasks"`
}

// Task is one task instance of a run; its fields describe its latest
// attempt where they concern an attempt.
type Task struct {
	Task            string                   `json:"task"`
	State           statemodel.InstanceState `json:"state"`
	Status          statemodel.Status        `json:"status"`
	Attempt         int                      `json:"attempt"`
	Pool            string                   `json:"pool"`
	DependsOn       []string                 `json:"depends_on"`
	TriggerRule     statemodel.TriggerRule   `json:"trigger_rule"`
	Publish         bool                     `json:"publish"`
	RetryAt         time.Time                `json:"retry_at,omitzero"`
	TimerAt         time.Time                `json:"timer_at,omitzero"`
	CancelRequested bool                     `json:"cancel_requested"`
	Metrics         Metrics                  `json:"metrics"`
	Attempts        []Attempt                `json:"attempts"`
}

// Metrics are a task's or an attempt's durations in milliseconds; nil when
// not known yet.
type Metrics struct {
	DependencyWaitMS *int64 `json:"dependency_wait_ms,omitempty"`
	QueueWaitMS      *int64 `json:"queue_wait_ms"`
	RunMS            *int64 `json:"run_ms"`
}

// Attempt is one attempt of a task.
type Attempt struct {
	N int `json:"n"`
	// State is the instance's state while this is the current unfinished
	// attempt, else the attempt's outcome (SUCCEEDED, FAILED, ...).
	State           string      `json:"state"`
	WorkerID        string      `json:"worker_id,omitempty"`
	ExecutorID      string      `json:"executor_id,omitempty"`
	QueuedAt        time.Time   `json:"queued_at,omitzero"`
	StartedAt       time.Time   `json:"started_at,omitzero"`
	EndedAt         time.Time   `json:"ended_at,omitzero"`
	LastHeartbeatAt time.Time   `json:"last_heartbeat_at,omitzero"`
	ExitCode        *int        `json:"exit_code,omitempty"`
	ErrorCategory   string      `json:"error_category,omitempty"`
	OutputRef       string      `json:"output_ref,omitempty"`
	SpendsBudget    bool        `json:"spends_budget"`
	LateEvents      []LateEvent `json:"late_events"`
	// LateEventsDropped counts the late events past the first 16, which
	// are not kept.
	LateEventsDropped int     `json:"late_events_dropped"`
	Metrics           Metrics `json:"metrics"`
}

// LateEvent is an event from an attempt that was no longer current: it is
// recorded on that attempt and never applied.
type LateEvent struct {
	EventID    string    `json:"event_id"`
	Event      string    `json:"event"`
	Actor      string    `json:"actor"`
	Outcome    string    `json:"outcome,omitempty"`
	EventTime  time.Time `json:"event_time,omitzero"`
	ObservedAt time.Time `json:"observed_at,omitzero"`
	Detail     string    `json:"detail,omitempty"`
}

// Transition is one history record of a task: a state change.
type Transition struct {
	Seq        int64                    `json:"seq"`
	From       statemodel.InstanceState `json:"from"`
	To         statemodel.InstanceState `json:"to"`
	Event      statemodel.EventType     `json:"event"`
	EventID    string                   `json:"event_id"`
	Actor      statemodel.Actor         `json:"actor"`
	Attempt    int                      `json:"attempt"`
	EventTime  time.Time                `json:"event_time,omitzero"`
	ObservedAt time.Time                `json:"observed_at,omitzero"`
	Evidence   map[string]string        `json:"evidence"`
	Reason     string                   `json:"reason"`
	Operator   string                   `json:"operator,omitempty"`
	Scope      string                   `json:"scope,omitempty"`
	Override   bool                     `json:"override,omitempty"`
}

// RunFilter selects runs for ListRuns: of one job (empty: every job), of
// one coarse status (empty: any), one page.
type RunFilter struct {
	Job    string
	Status statemodel.Status
	Page
}

// RunPage is one page of ListRuns, newest first. A page filtered by status
// may hold fewer runs than the limit while NextToken is not empty.
type RunPage struct {
	Runs      []Run  `json:"runs"`
	NextToken string `json:"next_token,omitempty"`
}

// ListRuns lists one page of runs, newest first.
func (c *Client) ListRuns(ctx context.Context, f RunFilter) (RunPage, error) {
	q := f.query()
	if f.Job != "" {
		q.Set("job", f.Job)
	}
	if f.Status != "" {
		q.Set("status", string(f.Status))
	}
	var out struct {
		Runs      []Run   `json:"runs"`
		NextToken *string `json:"next_token"`
	}
	_, err := c.do(ctx, call{op: "list runs", method: http.MethodGet, path: "/v1/runs", query: q}, &out)
	return RunPage{Runs: out.Runs, NextToken: deref(out.NextToken)}, err
}

// AllRuns yields every run the filter selects, newest first, following
// the pages; f.Limit is the page size. It stops at the first error, which
// it yields.
func (c *Client) AllRuns(ctx context.Context, f RunFilter) iter.Seq2[Run, error] {
	return func(yield func(Run, error) bool) {
		for {
			page, err := c.ListRuns(ctx, f)
			if err != nil {
				yield(Run{}, err)
				return
			}
			for _, r := range page.Runs {
				if !yield(r, nil) {
					return
				}
			}
			if page.NextToken == "" {
				return
			}
			f.NextToken = page.NextToken
		}
	}
}

// GetRun reads a run with its tasks and their attempts.
func (c *Client) GetRun(ctx context.Context, run string) (RunDetail, error) {
	var out RunDetail
	_, err := c.do(ctx, call{op: "get run " + run, method: http.MethodGet, path: "/v1/runs/" + seg(run)}, &out)
	return out, err
}

// HistoryPage is one page of a task's history, oldest first.
type HistoryPage struct {
	Transitions []Transition `json:"transitions"`
	NextToken   string       `json:"next_token,omitempty"`
}

// History reads one page of a task's transition history.
func (c *Client) History(ctx context.Context, run, task string, page Page) (HistoryPage, error) {
	var out struct {
		Transitions []Transition `json:"transitions"`
		NextToken   *string      `json:"next_token"`
	}
	_, err := c.do(ctx, call{
		op: "history of " + run + "/" + task, method: http.MethodGet,
		path: "/v1/runs/" + seg(run) + "/tasks/" + seg(task) + "/history", query: page.query(),
	}, &out)
	return HistoryPage{Transitions: out.Transitions, NextToken: deref(out.NextToken)}, err
}

// action is the body of the run and task actions.
type action struct {
	Reason     string `json:"reason,omitempty"`
	Operator   string `json:"operator,omitempty"`
	Downstream bool   `json:"downstream,omitempty"`
}

func (c *Client) runAction(ctx context.Context, op, path string, body action) (RunDetail, error) {
	var out RunDetail
	_, err := c.do(ctx, call{op: op, method: http.MethodPost, path: path, body: body}, &out)
	return out, err
}

// CancelRun cancels a run: tasks not yet running are cancelled at once,
// running ones become CANCELLING until their worker stops. A run whose
// state refuses it is CodeIllegalTransition.
func (c *Client) CancelRun(ctx context.Context, run, reason string) (RunDetail, error) {
	return c.runAction(ctx, "cancel run "+run, "/v1/runs/"+seg(run)+"/cancel", action{Reason: reason})
}

// PauseRun makes the run's waiting tasks PAUSED.
func (c *Client) PauseRun(ctx context.Context, run, reason string) (RunDetail, error) {
	return c.runAction(ctx, "pause run "+run, "/v1/runs/"+seg(run)+"/pause", action{Reason: reason})
}

// ResumeRun returns the run's PAUSED tasks to where they were.
func (c *Client) ResumeRun(ctx context.Context, run, reason string) (RunDetail, error) {
	return c.runAction(ctx, "resume run "+run, "/v1/runs/"+seg(run)+"/resume", action{Reason: reason})
}

func taskPath(run, task, verb string) string {
	return "/v1/runs/" + seg(run) + "/tasks/" + seg(task) + "/" + verb
}

// CancelTask cancels one task of a run.
func (c *Client) CancelTask(ctx context.Context, run, task, reason string) (RunDetail, error) {
	return c.runAction(ctx, "cancel task "+run+"/"+task, taskPath(run, task, "cancel"), action{Reason: reason})
}

// Retry is what RetryTask sends; every field is optional.
type Retry struct {
	Operator string
	Reason   string
	// Downstream also returns the tasks below this one that ended
	// UPSTREAM_FAILED or SKIPPED to CREATED, so the branch runs again.
	Downstream bool
}

// RetryTask gives a FAILED or CANCELLED task a new attempt with a fresh
// retry budget; another state is CodeIllegalTransition.
func (c *Client) RetryTask(ctx context.Context, run, task string, r Retry) (RunDetail, error) {
	return c.runAction(ctx, "retry task "+run+"/"+task, taskPath(run, task, "retry"),
		action{Operator: r.Operator, Reason: r.Reason, Downstream: r.Downstream})
}

// MarkSucceeded overrides a task's outcome to SUCCEEDED (from a terminal
// state or LOST); operator and reason are required and kept in history.
func (c *Client) MarkSucceeded(ctx context.Context, run, task, operator, reason string) (RunDetail, error) {
	return c.runAction(ctx, "mark succeeded "+run+"/"+task, taskPath(run, task, "mark-succeeded"),
		action{Operator: operator, Reason: reason})
}

// MarkFailed overrides a task's outcome to FAILED, as MarkSucceeded does.
func (c *Client) MarkFailed(ctx context.Context, run, task, operator, reason string) (RunDetail, error) {
	return c.runAction(ctx, "mark failed "+run+"/"+task, taskPath(run, task, "mark-failed"),
		action{Operator: operator, Reason: reason})
}

// WaitRun polls the run every interval (0: one second) until it ended or
// ctx ends, and answers its last reading.
func (c *Client) WaitRun(ctx context.Context, run string, interval time.Duration) (RunDetail, error) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		d, err := c.GetRun(ctx, run)
		if err != nil || d.Run.Ended() {
			return d, err
		}
		select {
		case <-ctx.Done():
			return d, fmt.Errorf("wait for run %s: %w", run, context.Cause(ctx))
		case <-t.C:
		}
	}
}
