// Package jobspec holds runledger's job definitions: the JSON of
// POST /v1/jobs and PUT /v1/jobs/{job} (docs/api.md, "Jobs"), its parsing and
// validation into typed errors with the API's codes, the schedules (cron in a
// time zone, rate, one-off at, manual) and their next fire time, and the
// effective view of each task (pool, payload and retry/timeout policy after
// the task's overrides).
//
// It is pure logic: no AWS, no I/O, no clock reads. The current time and the
// deployment's pools come in through Options, so the API handler and the
// scheduler decide the same way and tests need no waiting.
package jobspec

import (
	"encoding/json"
	"regexp"
	"time"

	// The Lambda runtime (provided.al2023) has no zoneinfo files; the
	// embedded database makes every IANA zone loadable there too.
	_ "time/tzdata"

	"github.com/runledger/runledger/statemodel"
)

// Limits of a definition.
const (
	// MaxPayloadBytes bounds a payload (the job's, and each task's
	// override), measured in compact JSON: whitespace a client adds does
	// not count, and the payload is stored compact.
	MaxPayloadBytes = 64 * 1024
	// MaxBodyBytes bounds a whole request body (docs/api.md: 413 over 1 MiB).
	MaxBodyBytes = 1024 * 1024
	// MaxDefinitionBytes bounds the canonical JSON of a whole definition,
	// which the store keeps in the job's item: DynamoDB refuses items over
	// 400 KB, and the job item also holds its keys and bookkeeping.
	MaxDefinitionBytes = 256 * 1024
	// MaxTasks bounds a job's tasks. A run's task instances are created in
	// one DynamoDB transaction (ledger.MaxTasksPerRun): a job with more tasks
	// could be defined but never run.
	MaxTasks = 48
	// MaxJobDependencies bounds depends_on_jobs. The store keeps one edge
	// item per upstream job and moves them in the job's own transaction
	// (ledger.MaxUpstreamJobs).
	MaxJobDependencies = 32
	// MaxAttempts bounds retry.max_attempts.
	MaxAttempts = 100
	// MaxRetryIntervals bounds retry.intervals' length, and
	// MinRetryInterval and MaxRetryInterval each of its entries.
	MaxRetryIntervals = 20
	MinRetryInterval  = time.Second
	MaxRetryInterval  = 24 * time.Hour
	// MinRate is the shortest rate: the ticker's pass and cron's resolution
	// are one minute.
	MinRate = time.Minute
	// MinRetention and MaxRetention bound a run's retention, the job's
	// `retention` and the deployment's alike: at least a day, so a run
	// stays to be looked at after it ends; at most ten years.
	MinRetention = 24 * time.Hour
	MaxRetention = 87600 * time.Hour
	// DefaultPool is the pool of a job whose definition names none.
	DefaultPool = "default"
	// MainTask is the id of the one task of a job defined without tasks.
	MainTask = "main"
)

// namePattern is the shape of job names and task ids (docs/api.md).
var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidName reports whether s can be a job name or a task id.
func ValidName(s string) bool { return namePattern.MatchString(s) }

// Overlap says what a fire does while an earlier run of the job is
// unfinished.
type Overlap string

const (
	// OverlapAllow starts the new run beside the unfinished one. The
	// default.
	OverlapAllow Overlap = "allow"
	// OverlapSkip does not start the new run.
	OverlapSkip Overlap = "skip"
	// OverlapCancelPrevious cancels the unfinished run and starts the new
	// one.
	OverlapCancelPrevious Overlap = "cancel_previous"
)

// AllOverlaps lists every overlap policy, the default first.
func AllOverlaps() []Overlap {
	return []Overlap{OverlapAllow, OverlapSkip, OverlapCancelPrevious}
}

// Job is a validated job definition, as Parse or Load returns it. Defaults
// are filled in: Pool, Overlap, the time zone and catch-up of the schedule, every field of Retry and
// Timeouts, EvidenceWindow, each task's trigger rule and each dependency's
// require, and a job defined without tasks has the one task "main". Its JSON
// (MarshalJSON) is that canonical definition, which Parse and Load accept
// back unchanged.
//
// Build a Job with Parse, ParseUpdate or Load: the schedule keeps parsed
// state that a hand-built value lacks (NextFire then parses the cron
// expression on every call).
type Job struct {
	Name     string
	Schedule Schedule
	Pool     string
	// Payload is compact JSON, or nil when the definition has none.
	Payload json.RawMessage
	// Retry and Timeouts are the job's policy, every field set.
	Retry          Retry
	Timeouts       Timeouts
	EvidenceWindow time.Duration
	// Deadline, if not zero, is how long after it may start (its creation,
	// or its release for a backfill run) a run should have finished: one
	// still unfinished then gets the notice run.deadline_missed, once,
	// and goes on.
	Deadline time.Duration
	// Retention is how long a finished run of the job is kept before all
	// of it expires (MinRetention..MaxRetention); zero is the
	// deployment's (RUNLEDGER_HISTORY_RETENTION, 90 days by default).
	Retention time.Duration
	Overlap   Overlap
	// Executor runs the tasks that set none; the zero value is the pool's
	// queue.
	Executor Executor
	// TaskDefs are the tasks as defined, overrides unmerged; see Tasks for
	// the effective view.
	TaskDefs      []TaskDef
	DependsOnJobs []JobDependency
	// OnEvent are the events that start a run (at most MaxOnEvent; an
	// event starts a run for the first entry it matches).
	OnEvent []EventTrigger
	// Concurrency and RateLimit, when set, put the job's runs through
	// limiters; Priority (1 first .. 5 last, default 3) orders their wait.
	Concurrency *Concurrency
	RateLimit   *RateLimit
	Priority    int
}

// TaskDef is one task as defined. Empty Pool, nil Payload and nil fields
// of Retry and Timeouts inherit the job's.
type TaskDef struct {
	ID        string
	DependsOn []string
	// TriggerRule is never empty: the default is filled in.
	TriggerRule statemodel.TriggerRule
	Publish     bool
	Pool        string
	Payload     json.RawMessage
	// Executor, when set, replaces the job's executor as a whole.
	Executor *Executor
	Retry    Retry
	Timeouts Timeouts
	// Map, when set, makes the task a map task: one child per element
	// of the array its Over renders.
	Map *Map
	// Concurrency, when set, bounds the task's attempts in flight across
	// every job naming its group.
	Concurrency *Concurrency
}

// Retry is the retry part of a definition. A nil field is not set: at the
// job level Parse fills it from statemodel.DefaultPolicy, at the task level
// it inherits the job's.
type Retry struct {
	MaxAttempts        *int
	InitialInterval    *time.Duration
	BackoffCoefficient *float64
	MaxInterval        *time.Duration
	Jitter             *statemodel.Jitter
	// Intervals, when set, list the waits before each retry in place of
	// the exponential backoff (statemodel.RetryPolicy.Intervals).
	Intervals *[]time.Duration
}

// Timeouts is the timeouts part of a definition; nil fields as in Retry.
type Timeouts struct {
	Queue     *time.Duration
	Run       *time.Duration
	Heartbeat *time.Duration
	Cancel    *time.Duration
	// Dependency is the run's, not a task's (job level only): how long
	// after its creation a run may wait for its depends_on_jobs before its
	// waiting tasks end UPSTREAM_FAILED (reason dependency_timeout).
	Dependency *time.Duration
}

// DefaultDependencyTimeout is timeouts.dependency when a job sets none.
const DefaultDependencyTimeout = 24 * time.Hour

// DependencyTimeout is how long a run of j may wait for its
// depends_on_jobs, counted from its creation.
func (j Job) DependencyTimeout() time.Duration {
	if j.Timeouts.Dependency != nil {
		return *j.Timeouts.Dependency
	}
	return DefaultDependencyTimeout
}

// JobDependency is one entry of depends_on_jobs: a run of this job waits
// for the run of Job with the same logical time to meet Require.
type JobDependency struct {
	Job     string
	Require statemodel.Requirement
}
