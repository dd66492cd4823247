package protocol

import (
	"encoding/json"
	"time"

	"github.com/runledger/runledger/statemodel"
)

// The answers about runs (docs/api.md, "Runs"): the server builds and
// writes them, the client package reads them. Times the API sends as null
// are the zero time.Time here, and strings it sends as null are "";
// MarshalJSON writes them as null again (marshalView).

// Run is a run without its tasks.
type Run struct {
	ID          string          `json:"id"`
	Job         string          `json:"job"`
	LogicalTime time.Time       `json:"logical_time"`
	Params      json.RawMessage `json:"params,omitempty"`
	// ExecutionState is derived from the tasks: QUEUED, RUNNING, then
	// SUCCEEDED, FAILED or CANCELLED.
	ExecutionState   statemodel.RunState         `json:"execution_state"`
	PublicationState statemodel.PublicationState `json:"publication_state"`
	// Status is the coarse status: PENDING, RUNNING, SUCCEEDED, FAILED,
	// CANCELLED.
	Status    statemodel.Status `json:"status"`
	CreatedAt time.Time         `json:"created_at"`
	EndedAt   time.Time         `json:"ended_at"`
	// Trigger is what created the run: schedule, manual, backfill or
	// catchup.
	Trigger statemodel.Trigger `json:"trigger"`
	// BackfillID names the backfill that released the run (trigger
	// backfill only; left out otherwise).
	BackfillID string `json:"backfill_id,omitempty"`
	// WaitingFor lists the upstream jobs' runs this run waits for while its
	// root tasks wait on depends_on_jobs; empty otherwise (and left out).
	WaitingFor []WaitingFor `json:"waiting_for,omitempty"`
	// Event names the event that started the run (trigger event only;
	// left out otherwise).
	Event *RunEvent `json:"event,omitempty"`
	// Priority is the run's admission order in its limiters: 1 first .. 5
	// last.
	Priority int `json:"priority"`
	// Admission is where the run stands in its limiter (left out for a
	// job without limits).
	Admission *Admission `json:"admission,omitempty"`
	// TraceID is the run's W3C trace id: the trigger's traceparent's, else
	// a new one ("", null on the wire, for a run stored before runs kept
	// one).
	TraceID string `json:"trace_id" null:"zero"`
}

// MarshalJSON writes the contract's shape.
func (r Run) MarshalJSON() ([]byte, error) { return marshalView(r) }

// Ended reports whether the run finished (SUCCEEDED, FAILED or CANCELLED).
func (r Run) Ended() bool { return r.ExecutionState.Terminal() }

// WaitingFor is one upstream job's run a run waits for. Run is "" while
// the upstream job has no run of that logical time (null on the wire).
type WaitingFor struct {
	Job         string                 `json:"job"`
	LogicalTime time.Time              `json:"logical_time"`
	Require     statemodel.Requirement `json:"require"`
	Run         string                 `json:"run" null:"zero"`
}

// MarshalJSON writes the contract's shape.
func (w WaitingFor) MarshalJSON() ([]byte, error) { return marshalView(w) }

// RunDetail is a run with its tasks: the answer of GET /v1/runs/{run} and
// of every action on a run or task.
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
	RetryAt         time.Time                `json:"retry_at"`
	TimerAt         time.Time                `json:"timer_at"`
	CancelRequested bool                     `json:"cancel_requested"`
	Metrics         Metrics                  `json:"metrics"`
	Attempts        []Attempt                `json:"attempts"`
	// Output is the output of the task's successful attempt (a map task:
	// its children's outputs); absent when none.
	Output json.RawMessage `json:"output,omitempty"`
	// OutputTruncated: a map task's output would be over 256 KiB, so it
	// is null.
	OutputTruncated bool `json:"output_truncated,omitempty"`
	// Map is a map task's children's counts, once it expanded.
	Map *MapCounts `json:"map,omitempty"`
	// WaitingForSlot is the task limiter a SCHEDULED task waits in for a
	// slot (its concurrency); absent otherwise.
	WaitingForSlot string `json:"waiting_for_slot,omitempty"`
}

// MapCounts are a map task's children by where they stand.
type MapCounts struct {
	Total     int `json:"total"`
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
}

// ChildrenPage is a page of a map task's children, in index order.
type ChildrenPage struct {
	Children  []Task `json:"children"`
	NextToken string `json:"next_token" null:"zero"`
}

// MarshalJSON writes the contract's shape.
func (p ChildrenPage) MarshalJSON() ([]byte, error) { return marshalView(p) }

// MarshalJSON writes the contract's shape.
func (t Task) MarshalJSON() ([]byte, error) { return marshalView(t) }

// Metrics are a task's or an attempt's durations in milliseconds; nil when
// not known yet. An attempt's carry no dependency wait.
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
	State    string `json:"state"`
	WorkerID string `json:"worker_id" null:"zero"`
	// Executor is the type of executor that started the attempt ("queue",
	// "lambda", "ecs"); ExecutorID is its id for it.
	Executor        string    `json:"executor"`
	ExecutorID      string    `json:"executor_id" null:"zero"`
	QueuedAt        time.Time `json:"queued_at"`
	StartedAt       time.Time `json:"started_at"`
	EndedAt         time.Time `json:"ended_at"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
	ExitCode        *int      `json:"exit_code"`
	ErrorCategory   string    `json:"error_category" null:"zero"`
	OutputRef       string    `json:"output_ref,omitempty"`
	SpendsBudget    bool      `json:"spends_budget"`
	// LateEvents are the first 16 events from this attempt that came after
	// it was no longer current.
	LateEvents []LateEvent `json:"late_events"`
	// LateEventsDropped counts the late events past the first 16, which
	// are not kept.
	LateEventsDropped int     `json:"late_events_dropped"`
	Metrics           Metrics `json:"metrics"`
}

// MarshalJSON writes the contract's shape.
func (a Attempt) MarshalJSON() ([]byte, error) { return marshalView(a) }

// LateEvent is an event from an attempt that was no longer current: it is
// recorded on that attempt and never applied.
type LateEvent struct {
	EventID    string    `json:"event_id"`
	Event      string    `json:"event"`
	Actor      string    `json:"actor"`
	Outcome    string    `json:"outcome,omitempty"`
	EventTime  time.Time `json:"event_time"`
	ObservedAt time.Time `json:"observed_at"`
	Detail     string    `json:"detail,omitempty"`
}

// MarshalJSON writes the contract's shape.
func (l LateEvent) MarshalJSON() ([]byte, error) { return marshalView(l) }

// Transition is one history record of a task: a state change.
type Transition struct {
	Seq        int64                    `json:"seq"`
	From       statemodel.InstanceState `json:"from"`
	To         statemodel.InstanceState `json:"to"`
	Event      statemodel.EventType     `json:"event"`
	EventID    string                   `json:"event_id"`
	Actor      statemodel.Actor         `json:"actor"`
	Attempt    int                      `json:"attempt"`
	EventTime  time.Time                `json:"event_time"`
	ObservedAt time.Time                `json:"observed_at"`
	Evidence   map[string]string        `json:"evidence"`
	Reason     string                   `json:"reason"`
	Operator   string                   `json:"operator,omitempty"`
	Scope      string                   `json:"scope,omitempty"`
	Override   bool                     `json:"override,omitempty"`
	// TraceID is the trace id of the record's run ("", null on the wire,
	// for a run stored before runs kept one).
	TraceID string `json:"trace_id" null:"zero"`
}

// MarshalJSON writes the contract's shape.
func (t Transition) MarshalJSON() ([]byte, error) { return marshalView(t) }

// RunPage is one page of GET /v1/runs, newest first. A page filtered by
// status may hold fewer runs than the limit while NextToken is not empty.
type RunPage struct {
	// NextToken continues the listing; "" (null on the wire) on the last
	// page. It comes first, as the API has always written it.
	NextToken string `json:"next_token" null:"zero"`
	Runs      []Run  `json:"runs"`
}

// MarshalJSON writes the contract's shape.
func (p RunPage) MarshalJSON() ([]byte, error) { return marshalView(p) }

// HistoryPage is one page of a task's history, oldest first.
type HistoryPage struct {
	// NextToken continues the history; "" (null on the wire) on the last
	// page. It comes first, as the API has always written it.
	NextToken   string       `json:"next_token" null:"zero"`
	Transitions []Transition `json:"transitions"`
}

// MarshalJSON writes the contract's shape.
func (p HistoryPage) MarshalJSON() ([]byte, error) { return marshalView(p) }
