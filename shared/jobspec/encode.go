package jobspec

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
)

// FormatDuration writes d as a Go duration string without zero trailing
// units: "10m" rather than time.Duration's "10m0s", "1h" rather than
// "1h0m0s". time.ParseDuration reads it back.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// The JSON shapes of a definition (docs/api.md, POST /v1/jobs).
type (
	jobJSON struct {
		Name           string           `json:"name"`
		Schedule       *scheduleJSON    `json:"schedule,omitempty"`
		Pool           string           `json:"pool"`
		Payload        json.RawMessage  `json:"payload,omitempty"`
		Retry          *retryJSON       `json:"retry,omitempty"`
		Timeouts       *timeoutsJSON    `json:"timeouts,omitempty"`
		EvidenceWindow string           `json:"evidence_window"`
		Deadline       string           `json:"deadline,omitempty"`
		Retention      string           `json:"retention,omitempty"`
		Overlap        Overlap          `json:"overlap"`
		Executor       *Executor        `json:"executor,omitempty"`
		Tasks          []taskJSON       `json:"tasks"`
		DependsOnJobs  []jobDepJSON     `json:"depends_on_jobs"`
		Concurrency    *concurrencyJSON `json:"concurrency,omitempty"`
		RateLimit      *rateLimitJSON   `json:"rate_limit,omitempty"`
		Priority       *int             `json:"priority,omitempty"`
		OnEvent        []onEventJSON    `json:"on_event,omitempty"`
	}
	scheduleJSON struct {
		Cron     string `json:"cron,omitempty"`
		Timezone string `json:"timezone,omitempty"`
		Rate     string `json:"rate,omitempty"`
		At       string `json:"at,omitempty"`
		// Catchup and CatchupWindow are written for every kind.
		Catchup       Catchup `json:"catchup,omitempty"`
		CatchupWindow string  `json:"catchup_window,omitempty"`
	}
	retryJSON struct {
		MaxAttempts        *int     `json:"max_attempts,omitempty"`
		InitialInterval    string   `json:"initial_interval,omitempty"`
		BackoffCoefficient *float64 `json:"backoff_coefficient,omitempty"`
		MaxInterval        string   `json:"max_interval,omitempty"`
		Jitter             string   `json:"jitter,omitempty"`
		Intervals          []string `json:"intervals,omitempty"`
	}
	timeoutsJSON struct {
		Queue      string `json:"queue,omitempty"`
		Run        string `json:"run,omitempty"`
		Heartbeat  string `json:"heartbeat,omitempty"`
		Cancel     string `json:"cancel,omitempty"`
		Dependency string `json:"dependency,omitempty"`
	}
	taskJSON struct {
		ID          string           `json:"id"`
		DependsOn   []string         `json:"depends_on"`
		TriggerRule string           `json:"trigger_rule"`
		Publish     bool             `json:"publish"`
		Pool        string           `json:"pool,omitempty"`
		Payload     json.RawMessage  `json:"payload,omitempty"`
		Executor    *Executor        `json:"executor,omitempty"`
		Retry       *retryJSON       `json:"retry,omitempty"`
		Timeouts    *timeoutsJSON    `json:"timeouts,omitempty"`
		Concurrency *concurrencyJSON `json:"concurrency,omitempty"`
		Map         *Map             `json:"map,omitempty"`
	}
	jobDepJSON struct {
		Job     string `json:"job"`
		Require string `json:"require"`
	}
)

// MarshalJSON writes the canonical definition: every default explicit
// (pool, overlap, time zone, the job's whole retry and timeouts, evidence
// window, trigger rules, require), durations as Go duration strings, times
// in FormatTime's form. Task overrides stay partial: only the fields a task
// sets are written, so it keeps inheriting the rest from the job. Load and
// Parse read it back to an equal Job.
func (j Job) MarshalJSON() ([]byte, error) {
	return wire.Marshal(j.wire())
}

func (j Job) wire() jobJSON {
	out := jobJSON{
		Name: j.Name, Schedule: j.Schedule.wire(), Pool: j.Pool, Payload: j.Payload,
		Retry: j.Retry.wire(), Timeouts: j.Timeouts.wire(),
		EvidenceWindow: FormatDuration(j.EvidenceWindow), Overlap: j.Overlap,
		Tasks: []taskJSON{}, DependsOnJobs: []jobDepJSON{},
		Concurrency: j.Concurrency.wire(), RateLimit: j.RateLimit.wire(), Priority: wirePriority(j.Priority),
	}
	if !j.Executor.IsQueue() {
		e := j.Executor
		out.Executor = &e
	}
	if j.Deadline > 0 {
		out.Deadline = FormatDuration(j.Deadline)
	}
	if j.Retention > 0 {
		out.Retention = FormatDuration(j.Retention)
	}
	for _, t := range j.TaskDefs {
		deps := t.DependsOn
		if deps == nil {
			deps = []string{}
		}
		out.Tasks = append(out.Tasks, taskJSON{
			ID: t.ID, DependsOn: deps, TriggerRule: string(t.TriggerRule.Effective()), Publish: t.Publish,
			Pool: t.Pool, Payload: t.Payload, Executor: t.Executor, Retry: t.Retry.wire(), Timeouts: t.Timeouts.wire(),
			Map:         t.Map,
			Concurrency: t.Concurrency.wire(),
		})
	}
	for _, d := range j.DependsOnJobs {
		out.DependsOnJobs = append(out.DependsOnJobs, jobDepJSON{Job: d.Job, Require: string(d.Require)})
	}
	for _, t := range j.OnEvent {
		out.OnEvent = append(out.OnEvent, t.wire())
	}
	return out
}

func (s Schedule) wire() *scheduleJSON {
	var out scheduleJSON
	switch s.Kind {
	case ScheduleCron:
		out = scheduleJSON{Cron: s.Cron, Timezone: s.location().String()}
	case ScheduleRate:
		out = scheduleJSON{Rate: FormatDuration(s.Rate)}
	case ScheduleAt:
		out = scheduleJSON{At: protocol.FormatTime(s.At)}
	default:
		return nil
	}
	out.Catchup, out.CatchupWindow = s.CatchupPolicy(), FormatDuration(s.Window())
	return &out
}

func durationText(d *time.Duration) string {
	if d == nil {
		return ""
	}
	return FormatDuration(*d)
}

func (r Retry) wire() *retryJSON {
	if r == (Retry{}) {
		return nil
	}
	out := &retryJSON{
		MaxAttempts: r.MaxAttempts, InitialInterval: durationText(r.InitialInterval),
		BackoffCoefficient: r.BackoffCoefficient, MaxInterval: durationText(r.MaxInterval),
	}
	if r.Jitter != nil {
		out.Jitter = string(*r.Jitter)
	}
	if r.Intervals != nil {
		for _, d := range *r.Intervals {
			out.Intervals = append(out.Intervals, FormatDuration(d))
		}
	}
	return out
}

func (t Timeouts) wire() *timeoutsJSON {
	if t == (Timeouts{}) {
		return nil
	}
	return &timeoutsJSON{
		Queue: durationText(t.Queue), Run: durationText(t.Run),
		Heartbeat: durationText(t.Heartbeat), Cancel: durationText(t.Cancel),
		Dependency: durationText(t.Dependency),
	}
}

// JobView is a job as the API answers with it (`{"job": {...}}`): the
// canonical definition plus what the server keeps beside it. id equals name;
// next_fire_time is null for a job with no fire ahead (manual, or an at that
// has fired); missed_slots counts the slots its schedule skipped, in all
// (catch-up).
type JobView struct {
	Job          Job
	Version      int64
	Paused       bool
	CreatedAt    time.Time
	UpdatedAt    time.Time
	NextFireTime time.Time
	MissedSlots  int64
}

type jobViewJSON struct {
	ID string `json:"id"`
	jobJSON
	Version      int64   `json:"version"`
	Paused       bool    `json:"paused"`
	CreatedAt    string  `json:"created_at"`
	UpdatedAt    string  `json:"updated_at"`
	NextFireTime *string `json:"next_fire_time"`
	MissedSlots  int64   `json:"missed_slots"`
}

// MarshalJSON writes the view: the definition's fields and id, version,
// paused, created_at, updated_at, next_fire_time and missed_slots.
func (v JobView) MarshalJSON() ([]byte, error) {
	return wire.Marshal(jobViewJSON{
		ID: v.Job.Name, jobJSON: v.Job.wire(), Version: v.Version, Paused: v.Paused,
		CreatedAt: protocol.FormatTime(v.CreatedAt), UpdatedAt: protocol.FormatTime(v.UpdatedAt),
		NextFireTime: protocol.NullTime(v.NextFireTime), MissedSlots: v.MissedSlots,
	})
}

// UnmarshalJSON reads a view back (the CLI and the worker SDK read API
// answers). The definition part is read with Load.
func (v *JobView) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("decode job view: %w", err)
	}
	var meta struct {
		ID           string  `json:"id"`
		Version      int64   `json:"version"`
		Paused       bool    `json:"paused"`
		CreatedAt    string  `json:"created_at"`
		UpdatedAt    string  `json:"updated_at"`
		NextFireTime *string `json:"next_fire_time"`
		MissedSlots  int64   `json:"missed_slots"`
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("decode job view: %w", err)
	}
	for _, k := range readOnlyFields {
		delete(m, k)
	}
	def, err := wire.Marshal(m)
	if err != nil {
		return fmt.Errorf("decode job view %s: %w", meta.ID, err)
	}
	j, err := Load(def)
	if err != nil {
		return fmt.Errorf("decode job view %s: %w", meta.ID, err)
	}
	out := JobView{Job: j, Version: meta.Version, Paused: meta.Paused, MissedSlots: meta.MissedSlots}
	for _, t := range []struct {
		text *string
		dst  *time.Time
	}{{&meta.CreatedAt, &out.CreatedAt}, {&meta.UpdatedAt, &out.UpdatedAt}, {meta.NextFireTime, &out.NextFireTime}} {
		if t.text == nil || *t.text == "" {
			continue
		}
		if *t.dst, err = protocol.ParseTime(*t.text); err != nil {
			return fmt.Errorf("decode job view %s: %w", meta.ID, err)
		}
	}
	*v = out
	return nil
}
