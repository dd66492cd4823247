package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
)

// Job is a job as the API answers with it: the canonical definition (every
// default explicit) plus version, paused, created_at, updated_at and
// next_fire_time. It is the server's own type.
type Job = jobspec.JobView

type jobAnswer struct {
	Job Job `json:"job"`
}

// CreateJob creates a job. The definition is the JSON body of POST /v1/jobs
// (docs/api.md, "Jobs"): raw JSON ([]byte or json.RawMessage, sent as it
// is), a jobspec.Job (its canonical JSON), or any value that encodes to
// that JSON (a map, your own struct). A job of that name already existing is
// CodeConflict; a refused definition is CodeInvalidField (or a more precise
// code) with a message naming the field.
func (c *Client) CreateJob(ctx context.Context, definition any) (Job, error) {
	var out jobAnswer
	_, err := c.do(ctx, call{op: "create job", method: http.MethodPost, path: "/v1/jobs", body: definition}, &out)
	return out.Job, err
}

// ValidateJob checks a definition as CreateJob would (POST /v1/jobs with
// dry_run=true: the deployment's pools and clock included) and answers it
// as it would be stored, every default explicit; it writes nothing and
// does not care whether the name is taken. A refused definition is the
// same error CreateJob would answer.
func (c *Client) ValidateJob(ctx context.Context, definition any) (jobspec.Job, error) {
	var out struct {
		Job json.RawMessage `json:"job"`
	}
	_, err := c.do(ctx, call{op: "validate job", method: http.MethodPost, path: "/v1/jobs",
		query: url.Values{"dry_run": {"true"}}, body: definition}, &out)
	if err != nil {
		return jobspec.Job{}, err
	}
	j, err := jobspec.Load(out.Job)
	if err != nil {
		return jobspec.Job{}, fmt.Errorf("validate job: decode the answer: %w", err)
	}
	return j, nil
}

// JobPage is one page of ListJobs. NextToken is empty on the last page.
type JobPage struct {
	Jobs      []Job  `json:"jobs"`
	NextToken string `json:"next_token"`
}

// Page asks for one page of a list: at most Limit items (0: the server's
// default) after NextToken (empty: the first page).
type Page struct {
	Limit     int
	NextToken string
}

func (p Page) query() url.Values {
	q := url.Values{}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.NextToken != "" {
		q.Set("next_token", p.NextToken)
	}
	return q
}

// ListJobs lists one page of jobs.
func (c *Client) ListJobs(ctx context.Context, page Page) (JobPage, error) {
	var out struct {
		Jobs      []Job   `json:"jobs"`
		NextToken *string `json:"next_token"`
	}
	_, err := c.do(ctx, call{op: "list jobs", method: http.MethodGet, path: "/v1/jobs", query: page.query()}, &out)
	return JobPage{Jobs: out.Jobs, NextToken: deref(out.NextToken)}, err
}

// GetJob reads a job.
func (c *Client) GetJob(ctx context.Context, name string) (Job, error) {
	var out jobAnswer
	_, err := c.do(ctx, call{op: "get job " + name, method: http.MethodGet, path: "/v1/jobs/" + seg(name)}, &out)
	return out.Job, err
}

// UpdateJob replaces a job's definition (as CreateJob takes it; the name
// may be left out) if the job is still at version
// (If-Match); another version is CodeVersionConflict (read it again).
func (c *Client) UpdateJob(ctx context.Context, name string, version int64, definition any) (Job, error) {
	var out jobAnswer
	_, err := c.do(ctx, call{
		op: "update job " + name, method: http.MethodPut, path: "/v1/jobs/" + seg(name),
		header: http.Header{"If-Match": {strconv.FormatInt(version, 10)}}, body: definition,
	}, &out)
	return out.Job, err
}

// DeleteJob deletes a job; its past runs stay readable. A job with
// unfinished runs is CodeConflict.
func (c *Client) DeleteJob(ctx context.Context, name string) error {
	_, err := c.do(ctx, call{op: "delete job " + name, method: http.MethodDelete, path: "/v1/jobs/" + seg(name)}, nil)
	return err
}

// PauseJob pauses a job's schedule (no fire while paused).
func (c *Client) PauseJob(ctx context.Context, name string) (Job, error) {
	var out jobAnswer
	_, err := c.do(ctx, call{op: "pause job " + name, method: http.MethodPost, path: "/v1/jobs/" + seg(name) + "/pause"}, &out)
	return out.Job, err
}

// ResumeJob resumes a paused job's schedule.
func (c *Client) ResumeJob(ctx context.Context, name string) (Job, error) {
	var out jobAnswer
	_, err := c.do(ctx, call{op: "resume job " + name, method: http.MethodPost, path: "/v1/jobs/" + seg(name) + "/resume"}, &out)
	return out.Job, err
}

// Trigger is what TriggerRun sends; every field is optional.
type Trigger struct {
	// IdempotencyKey makes the trigger safe to repeat: the same key (per
	// job, kept 24 h) answers the run the first call created.
	IdempotencyKey string
	// Params is the run's params, a JSON object: raw JSON or any value
	// that encodes to an object.
	Params any
	// LogicalTime is the run's logical time; zero: the trigger time.
	LogicalTime time.Time
	// Priority orders the run in its limiters' queues, 1 first .. 5
	// last; 0: the job's.
	Priority int
	// TraceParent is a W3C traceparent: the run joins its trace (its
	// trace_id is the traceparent's). "": the run gets a new trace.
	TraceParent string
}

type triggerBody struct {
	Params      json.RawMessage `json:"params,omitempty"`
	LogicalTime *string         `json:"logical_time,omitempty"`
	Priority    int             `json:"priority,omitempty"`
}

// TriggerRun starts a run of a job. created is false when an earlier call
// with the same IdempotencyKey created the run (the API's 200 rather than
// 201).
func (c *Client) TriggerRun(ctx context.Context, job string, t Trigger) (run RunDetail, created bool, err error) {
	body := triggerBody{Priority: t.Priority}
	if t.Params != nil {
		if body.Params, err = encodeBody(t.Params); err != nil {
			return RunDetail{}, false, err
		}
	}
	if !t.LogicalTime.IsZero() {
		s := protocol.FormatTime(t.LogicalTime)
		body.LogicalTime = &s
	}
	cl := call{op: "trigger job " + job, method: http.MethodPost, path: "/v1/jobs/" + seg(job) + "/runs", body: body}
	cl.header = http.Header{}
	if t.IdempotencyKey != "" {
		cl.header.Set("Idempotency-Key", t.IdempotencyKey)
	}
	if t.TraceParent != "" {
		cl.header.Set(protocol.TraceParentHeader, t.TraceParent)
	}
	status, err := c.do(ctx, cl, &run)
	return run, status == http.StatusCreated, err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
