package client

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// The answers about runs (docs/api.md, "Runs") are package protocol's
// views, the types the server writes them from. Times the API sends as null
// are the zero time.Time here, strings it sends as null are "", and both
// are written as null again when encoded.
type (
	// Run is a run without its tasks.
	Run = protocol.Run
	// WaitingFor is one upstream job's run a run waits for; Run is "" while
	// the upstream job has no run of that logical time.
	WaitingFor = protocol.WaitingFor
	// RunDetail is a run with its tasks, the answer of GetRun and of every
	// action on a run or task.
	RunDetail = protocol.RunDetail
	// Task is one task instance of a run; its fields describe its latest
	// attempt where they concern an attempt.
	Task = protocol.Task
	// Metrics are a task's or an attempt's durations in milliseconds; nil
	// when not known yet.
	Metrics = protocol.Metrics
	// Attempt is one attempt of a task.
	Attempt = protocol.Attempt
	// LateEvent is an event from an attempt that was no longer current: it
	// is recorded on that attempt and never applied.
	LateEvent = protocol.LateEvent
	// Transition is one history record of a task: a state change.
	Transition = protocol.Transition
	// RunPage is one page of ListRuns, newest first. A page filtered by
	// status may hold fewer runs than the limit while NextToken is not
	// empty.
	RunPage = protocol.RunPage
	// HistoryPage is one page of a task's history, oldest first.
	HistoryPage = protocol.HistoryPage
)

// RunFilter selects runs for ListRuns: of one job (empty: every job), of
// one coarse status (empty: any), one page.
type RunFilter struct {
	Job    string
	Status statemodel.Status
	Page
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
	var out RunPage
	_, err := c.do(ctx, call{op: "list runs", method: http.MethodGet, path: "/v1/runs", query: q}, &out)
	return out, err
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

// History reads one page of a task's transition history.
func (c *Client) History(ctx context.Context, run, task string, page Page) (HistoryPage, error) {
	var out HistoryPage
	_, err := c.do(ctx, call{
		op: "history of " + run + "/" + task, method: http.MethodGet,
		path: "/v1/runs/" + seg(run) + "/tasks/" + seg(task) + "/history", query: page.query(),
	}, &out)
	return out, err
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
	return waitFor(ctx, interval, "run "+run, func() (RunDetail, error) { return c.GetRun(ctx, run) },
		func(d RunDetail) bool { return d.Run.Ended() })
}

// waitFor reads what (get) every interval (0: one second) until ended says
// it ended, a read fails, or ctx ends, and answers its last reading.
func waitFor[T any](ctx context.Context, interval time.Duration, what string, get func() (T, error), ended func(T) bool) (T, error) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		v, err := get()
		if err != nil || ended(v) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("wait for %s: %w", what, context.Cause(ctx))
		case <-t.C:
		}
	}
}
