package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// Options are what a new or replaced definition is checked against besides
// itself.
type Options struct {
	// Pools are the deployment's worker pools. A job or task naming any
	// other pool is refused; with no pools every definition is refused.
	Pools []string
	// Allowed is what jobs may run outside the queues: an executor naming
	// anything else is refused.
	Allowed Allowed
	// Now is the current time, from the caller's clock: an at schedule
	// before it is refused, and so is a cron expression that never fires
	// after it. It must be set.
	Now time.Time
}

// Parse reads and validates the body of POST /v1/jobs. On success the Job has
// every default filled in (see Job). A refused definition is an *Error with
// the API's code; any other error is a misuse by the caller (Options.Now
// not set).
//
// The checks, in order: the body's size and JSON syntax (invalid_json,
// payload_too_large), then each field in the order of docs/api.md's example
// body: unknown fields and wrong JSON types (invalid_field), the name, the
// schedule (invalid_cron, invalid_timezone; an at in the past or two kinds
// at once is invalid_field), the pool, the payload (payload_too_large over
// 64 KiB), the retry policy and timeouts, the overlap, the tasks (ids, trigger
// rules, overrides, then the graph: dependency_cycle naming the cycle), the
// job dependencies, and last the size of the whole definition.
func Parse(body []byte, opts Options) (Job, error) {
	if opts.Now.IsZero() {
		return Job{}, errors.New("jobspec: parse: Options.Now is not set")
	}
	return result(parse(body, parseMode{world: &opts}))
}

// ParseUpdate reads and validates the body of PUT /v1/jobs/{name}: the whole
// definition, which replaces the old one (nothing is merged with it). The
// body's name may be left out; if present it must equal name, since a PUT
// cannot rename a job. Otherwise it is Parse.
func ParseUpdate(name string, body []byte, opts Options) (Job, error) {
	if opts.Now.IsZero() {
		return Job{}, errors.New("jobspec: parse update: Options.Now is not set")
	}
	return result(parse(body, parseMode{world: &opts, pathName: name, update: true}))
}

// Load reads a definition that Parse accepted earlier: the JSON the store
// keeps, which is Job's MarshalJSON. It checks everything Parse checks except
// what depends on when and where it runs, which may have changed since the
// definition was accepted: an at schedule now in the past, a cron expression
// that fires no more, and pools the deployment no longer has. A definition
// that fails Load was not written by this package; its *Error says why.
func Load(spec []byte) (Job, error) {
	return result(parse(spec, parseMode{}))
}

func result(j Job, e *Error) (Job, error) {
	if e != nil {
		return Job{}, e
	}
	return j, nil
}

type parseMode struct {
	// world is set for definitions being accepted now (Parse, ParseUpdate)
	// and nil for stored ones (Load).
	world *Options
	// update: the body may omit its name, which then is pathName.
	update   bool
	pathName string
}

var jobFields = []string{
	"name", "schedule", "pool", "payload", "retry", "timeouts",
	"evidence_window", "overlap", "executor", "tasks", "depends_on_jobs", "deadline", "retention",
	"on_event",
	"concurrency", "rate_limit", "priority",
}

func parse(body []byte, mode parseMode) (Job, *Error) {
	if len(body) > MaxBodyBytes {
		return Job{}, &Error{Code: protocol.CodePayloadTooLarge, Message: fmt.Sprintf(
			"The body is %d bytes, over the limit of %d (1 MiB).", len(body), MaxBodyBytes)}
	}
	if e := checkJSON(body); e != nil {
		return Job{}, e
	}
	d := &decoder{}
	top := d.object(body, "", jobFields...)
	if d.err != nil {
		return Job{}, d.err
	}
	var j Job
	steps := []func(*decoder, map[string]json.RawMessage, *Job, parseMode){
		readName, readSchedule, readPool, readPayload, readPolicy, readOverlap, readExecutor, readTasks, readJobDeps, readFlow,
		readSignalDefaults,
		readOnEvent,
	}
	for _, step := range steps {
		step(d, top, &j, mode)
		if d.err != nil {
			return Job{}, d.err
		}
	}
	spec, err := wire.Marshal(j)
	if err != nil {
		// Every value was produced by this package; a failure here is a bug.
		return Job{}, &Error{Code: protocol.CodeInvalidField, Message: "The definition could not be encoded."}
	}
	if len(spec) > MaxDefinitionBytes {
		return Job{}, &Error{Code: protocol.CodePayloadTooLarge, Message: fmt.Sprintf(
			"The definition is %d bytes of JSON, over the limit of %d (256 KiB).", len(spec), MaxDefinitionBytes)}
	}
	return j, nil
}

// checkJSON refuses a body that is not one JSON object.
func checkJSON(body []byte) *Error {
	if len(bytes.TrimSpace(body)) == 0 {
		return &Error{Code: protocol.CodeInvalidJSON, Message: "The body is empty; it must be a JSON object."}
	}
	if !utf8.Valid(body) {
		// encoding/json would quietly turn the bad bytes into U+FFFD.
		return &Error{Code: protocol.CodeInvalidJSON, Message: "The body is not valid UTF-8, which JSON requires."}
	}
	var raw json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return &Error{Code: protocol.CodeInvalidJSON, Message: fmt.Sprintf("The body is not valid JSON (at byte %d).", syn.Offset)}
		}
		return &Error{Code: protocol.CodeInvalidJSON, Message: "The body is not valid JSON."}
	}
	if raw[0] != '{' {
		return &Error{Code: protocol.CodeInvalidJSON, Message: "The body must be a JSON object."}
	}
	return nil
}

const nameRule = `must be 1 to 64 lowercase letters, digits, "_" or "-", starting with a letter or digit`

func readName(d *decoder, top map[string]json.RawMessage, j *Job, mode parseMode) {
	raw := get(top, "name")
	switch {
	case raw != nil:
		j.Name = d.str(raw, "name")
		if d.err == nil && mode.update && j.Name != mode.pathName {
			d.fail(fieldError("name", "%q must equal the job name in the path, %q: a job cannot be renamed", j.Name, mode.pathName))
		}
	case mode.update:
		j.Name = mode.pathName
	default:
		d.fail(fieldError("name", "is required"))
	}
	if d.err == nil && !ValidName(j.Name) {
		d.fail(fieldError("name", "%q %s", j.Name, nameRule))
	}
}

func readPool(d *decoder, top map[string]json.RawMessage, j *Job, mode parseMode) {
	j.Pool = DefaultPool
	if raw := get(top, "pool"); raw != nil {
		j.Pool = d.str(raw, "pool")
	}
	d.checkPool(j.Pool, "pool", mode)
}

func (d *decoder) checkPool(pool, field string, mode parseMode) {
	switch {
	case d.err != nil:
	case pool == "":
		d.fail(fieldError(field, "must not be empty"))
	case mode.world != nil && !slices.Contains(mode.world.Pools, pool):
		d.fail(fieldError(field, "%q is not a pool of this deployment (pools: %s)", pool, poolList(mode.world.Pools)))
	}
}

func poolList(pools []string) string {
	if len(pools) == 0 {
		return "none"
	}
	return strings.Join(pools, ", ")
}

func readPayload(d *decoder, top map[string]json.RawMessage, j *Job, _ parseMode) {
	j.Payload = d.payload(get(top, "payload"), "payload")
}

var (
	retryFields    = []string{"max_attempts", "initial_interval", "backoff_coefficient", "max_interval", "jitter", "intervals"}
	timeoutsFields = []string{"queue", "run", "heartbeat", "cancel", "dependency"}
)

// readPolicy reads the job's retry, timeouts and evidence_window, fills
// every field left out from statemodel.DefaultPolicy, and checks the result
// as a whole.
func readPolicy(d *decoder, top map[string]json.RawMessage, j *Job, _ parseMode) {
	def := statemodel.DefaultPolicy()
	own, base := d.retry(get(top, "retry"), "retry"), retryOf(def.Retry)
	if own.Intervals != nil {
		base.InitialInterval = nil // intervals replace it, and both are refused
	}
	j.Retry = own.over(base)
	j.Timeouts = d.timeouts(get(top, "timeouts"), "timeouts").over(timeoutsOf(def.Timeouts))
	if j.Timeouts.Dependency == nil {
		j.Timeouts.Dependency = ptr(DefaultDependencyTimeout)
	}
	j.EvidenceWindow = def.EvidenceWindow
	if raw := get(top, "evidence_window"); raw != nil {
		j.EvidenceWindow = d.duration(raw, "evidence_window")
		if d.err == nil && j.EvidenceWindow < 0 {
			d.fail(fieldError("evidence_window", "must not be negative"))
		}
	}
	if raw := get(top, "deadline"); raw != nil {
		j.Deadline = d.positive(raw, "deadline")
	}
	if raw := get(top, "retention"); raw != nil {
		j.Retention = d.duration(raw, "retention")
		if d.err == nil && (j.Retention < MinRetention || j.Retention > MaxRetention) {
			d.fail(fieldError("retention", "must be within %s..%s, not %s",
				FormatDuration(MinRetention), FormatDuration(MaxRetention), FormatDuration(j.Retention)))
		}
	}
	if d.err == nil {
		d.checkPolicy(j.Policy(), "", false)
	}
}

// retry reads a retry object, checking each field on its own; relations
// between fields are checked on the merged policy (checkPolicy).
func (d *decoder) retry(raw json.RawMessage, field string) Retry {
	var r Retry
	if raw == nil {
		return r
	}
	m := d.object(raw, field, retryFields...)
	if v := get(m, "max_attempts"); v != nil {
		f := join(field, "max_attempts")
		n := d.integer(v, f)
		if d.err == nil && (n < 1 || n > MaxAttempts) {
			d.fail(fieldError(f, "must be between 1 and %d, not %d", MaxAttempts, n))
		}
		r.MaxAttempts = &n
	}
	if v := get(m, "initial_interval"); v != nil {
		x := d.positive(v, join(field, "initial_interval"))
		r.InitialInterval = &x
	}
	if v := get(m, "backoff_coefficient"); v != nil {
		f := join(field, "backoff_coefficient")
		c := d.number(v, f)
		if d.err == nil && (c < 1 || math.IsInf(c, 0)) {
			d.fail(fieldError(f, "must be at least 1, not %v", c))
		}
		r.BackoffCoefficient = &c
	}
	if v := get(m, "max_interval"); v != nil {
		x := d.positive(v, join(field, "max_interval"))
		r.MaxInterval = &x
	}
	if v := get(m, "jitter"); v != nil {
		f := join(field, "jitter")
		s := statemodel.Jitter(d.str(v, f))
		if d.err == nil && s != statemodel.JitterFull && s != statemodel.JitterNone {
			d.fail(fieldError(f, `must be "full" or "none", not %q`, s))
		}
		r.Jitter = &s
	}
	if v := get(m, "intervals"); v != nil {
		r.Intervals = d.retryIntervals(v, join(field, "intervals"))
		switch {
		case d.err != nil:
		case r.InitialInterval != nil:
			d.fail(fieldError(join(field, "intervals"), "cannot be given with %s: intervals replace the exponential backoff", join(field, "initial_interval")))
		case r.Jitter == nil:
			none := statemodel.JitterNone // listed waits are meant as given
			r.Jitter = &none
		}
	}
	return r
}

// retryIntervals reads retry.intervals: 1..MaxRetryIntervals durations,
// each within MinRetryInterval..MaxRetryInterval.
func (d *decoder) retryIntervals(raw json.RawMessage, field string) *[]time.Duration {
	a := d.array(raw, field)
	if d.err == nil && (len(a) < 1 || len(a) > MaxRetryIntervals) {
		d.fail(fieldError(field, "must list 1 to %d durations, not %d", MaxRetryIntervals, len(a)))
	}
	out := make([]time.Duration, 0, len(a))
	for i, v := range a {
		f := fmt.Sprintf("%s[%d]", field, i)
		x := d.duration(v, f)
		if d.err == nil && (x < MinRetryInterval || x > MaxRetryInterval) {
			d.fail(fieldError(f, "must be within %s..%s, not %s", FormatDuration(MinRetryInterval), FormatDuration(MaxRetryInterval), FormatDuration(x)))
		}
		out = append(out, x)
	}
	return &out
}

func (d *decoder) timeouts(raw json.RawMessage, field string) Timeouts {
	var t Timeouts
	if raw == nil {
		return t
	}
	m := d.object(raw, field, timeoutsFields...)
	for _, p := range []struct {
		key string
		dst **time.Duration
	}{{"queue", &t.Queue}, {"run", &t.Run}, {"heartbeat", &t.Heartbeat}, {"cancel", &t.Cancel}, {"dependency", &t.Dependency}} {
		if v := get(m, p.key); v != nil {
			x := d.positive(v, join(field, p.key))
			*p.dst = &x
		}
	}
	return t
}

// checkPolicy checks a merged policy: the relation between the retry
// intervals, then statemodel's own Validate as the final word. prefix is ""
// for the job and "tasks[i]." for a task; inherited says the policy merges a
// task's overrides over the job's, so the message says where values came
// from.
func (d *decoder) checkPolicy(p statemodel.Policy, prefix string, inherited bool) {
	if d.err != nil {
		return
	}
	r := p.Retry
	if r.MaxInterval < r.InitialInterval {
		merged := ""
		if inherited {
			merged = " once merged with the job's retry"
		}
		d.fail(fieldError(prefix+"retry.max_interval", "(%s) must be at least %sretry.initial_interval (%s)%s",
			FormatDuration(r.MaxInterval), prefix, FormatDuration(r.InitialInterval), merged))
		return
	}
	if err := p.Validate(); err != nil {
		// The field checks above and in retry/timeouts cover every rule
		// Validate knows today; this keeps a rule added there from being
		// bypassed here.
		d.fail(fieldError(strings.TrimSuffix(prefix, "."), "has an invalid retry or timeout policy (%v)", err))
	}
}

func readOverlap(d *decoder, top map[string]json.RawMessage, j *Job, _ parseMode) {
	j.Overlap = OverlapAllow
	if raw := get(top, "overlap"); raw != nil {
		j.Overlap = Overlap(d.str(raw, "overlap"))
		if d.err == nil && !slices.Contains(AllOverlaps(), j.Overlap) {
			d.fail(fieldError("overlap", `must be "allow", "skip" or "cancel_previous", not %q`, j.Overlap))
		}
	}
}

var taskFields = []string{"id", "depends_on", "trigger_rule", "publish", "pool", "payload", "executor", "retry", "timeouts", "map", "concurrency"}

func readExecutor(d *decoder, top map[string]json.RawMessage, j *Job, mode parseMode) {
	j.Executor = d.executor(get(top, "executor"), "executor", mode)
}

func readTasks(d *decoder, top map[string]json.RawMessage, j *Job, mode parseMode) {
	var raws []json.RawMessage
	if raw := get(top, "tasks"); raw != nil {
		raws = d.array(raw, "tasks")
	}
	if d.err != nil {
		return
	}
	if len(raws) > MaxTasks {
		d.fail(fieldError("tasks", "has %d tasks, over the limit of %d", len(raws), MaxTasks))
		return
	}
	if len(raws) == 0 {
		j.TaskDefs = []TaskDef{{ID: MainTask, TriggerRule: statemodel.RuleAllSuccess}}
		return
	}
	jobPolicy := j.Policy()
	for i, raw := range raws {
		field := at("tasks", i)
		t := d.task(raw, field, mode)
		if d.err != nil {
			return
		}
		d.checkPolicy(t.policy(jobPolicy), field+".", true)
		j.TaskDefs = append(j.TaskDefs, t)
	}
	if d.err != nil {
		return
	}
	d.checkDAG(j.TaskDefs, j.Nodes())
}

func (d *decoder) task(raw json.RawMessage, field string, mode parseMode) TaskDef {
	var t TaskDef
	m := d.object(raw, field, taskFields...)
	if d.err != nil {
		return t
	}
	if v := get(m, "id"); v != nil {
		t.ID = d.str(v, field+".id")
		if d.err == nil && !ValidName(t.ID) {
			d.fail(fieldError(field+".id", "%q %s", t.ID, nameRule))
		}
	} else {
		d.fail(fieldError(field+".id", "is required"))
	}
	if v := get(m, "depends_on"); v != nil {
		f := field + ".depends_on"
		for k, dep := range d.array(v, f) {
			t.DependsOn = append(t.DependsOn, d.str(dep, at(f, k)))
		}
	}
	rule := ""
	if v := get(m, "trigger_rule"); v != nil {
		rule = d.str(v, field+".trigger_rule")
	}
	if d.err == nil {
		r, err := statemodel.ParseTriggerRule(rule)
		if err != nil {
			d.fail(fieldError(field+".trigger_rule", "%q is not a trigger rule (one of %s)", rule, ruleList()))
		}
		t.TriggerRule = r
	}
	if v := get(m, "publish"); v != nil {
		t.Publish = d.boolean(v, field+".publish")
	}
	if v := get(m, "pool"); v != nil {
		t.Pool = d.str(v, field+".pool")
		d.checkPool(t.Pool, field+".pool", mode)
	}
	t.Payload = d.payload(get(m, "payload"), field+".payload")
	if v := get(m, "executor"); v != nil {
		e := d.executor(v, field+".executor", mode)
		t.Executor = &e
	}
	t.Retry = d.retry(get(m, "retry"), field+".retry")
	t.Timeouts = d.timeouts(get(m, "timeouts"), field+".timeouts")
	if d.err == nil && t.Timeouts.Dependency != nil {
		d.fail(fieldError(field+".timeouts.dependency", "applies to the whole run: set it in the job's timeouts"))
	}
	if v := get(m, "map"); v != nil {
		t.Map = d.mapSpec(v, field+".map")
	}
	t.Concurrency = d.concurrency(get(m, "concurrency"), field+".concurrency")
	return t
}

func ruleList() string {
	var s []string
	for _, r := range statemodel.AllTriggerRules() {
		s = append(s, string(r))
	}
	return strings.Join(s, ", ")
}

// checkDAG runs statemodel.ValidateDAG and names the offending field.
func (d *decoder) checkDAG(defs []TaskDef, nodes []statemodel.TaskNode) {
	err := statemodel.ValidateDAG(nodes)
	if err == nil {
		return
	}
	index := func(id string) int { return slices.IndexFunc(defs, func(t TaskDef) bool { return t.ID == id }) }
	var (
		cycle *statemodel.CycleError
		dup   *statemodel.DuplicateTaskError
		unk   *statemodel.UnknownDependencyError
		self  *statemodel.SelfDependencyError
		twice *statemodel.DuplicateDependencyError
		rule  *statemodel.InvalidTriggerRuleError
	)
	switch {
	case errors.As(err, &cycle):
		d.fail(&Error{Code: protocol.CodeDependencyCycle, Field: "tasks",
			Message: sentence("tasks", "form a dependency cycle: %s", strings.Join(cycle.Path, " -> "))})
	case errors.As(err, &dup):
		second := slices.IndexFunc(defs[index(dup.Task)+1:], func(t TaskDef) bool { return t.ID == dup.Task }) + index(dup.Task) + 1
		d.fail(fieldError(at("tasks", second)+".id", "%q is the id of an earlier task too", dup.Task))
	case errors.As(err, &unk):
		d.fail(fieldError(at("tasks", index(unk.Task))+".depends_on", "names %q, which is not a task of this job", unk.Dependency))
	case errors.As(err, &self):
		d.fail(fieldError(at("tasks", index(self.Task))+".depends_on", "names the task itself, %q", self.Task))
	case errors.As(err, &twice):
		d.fail(fieldError(at("tasks", index(twice.Task))+".depends_on", "names %q twice", twice.Dependency))
	case errors.As(err, &rule):
		d.fail(fieldError(at("tasks", index(rule.Task))+".trigger_rule", "%q is not a trigger rule", rule.Err.Rule))
	default:
		d.fail(fieldError("tasks", "do not form a valid graph (%v)", err))
	}
}

var jobDepFields = []string{"job", "require"}

func readJobDeps(d *decoder, top map[string]json.RawMessage, j *Job, _ parseMode) {
	raw := get(top, "depends_on_jobs")
	if raw == nil {
		return
	}
	deps := d.array(raw, "depends_on_jobs")
	if len(deps) > MaxJobDependencies {
		d.fail(fieldError("depends_on_jobs", "names %d jobs, over the limit of %d", len(deps), MaxJobDependencies))
		return
	}
	for i, r := range deps {
		field := at("depends_on_jobs", i)
		m := d.object(r, field, jobDepFields...)
		var dep JobDependency
		if v := get(m, "job"); v != nil {
			dep.Job = d.str(v, field+".job")
		} else {
			d.fail(fieldError(field+".job", "is required"))
		}
		switch {
		case d.err != nil:
			return
		case !ValidName(dep.Job):
			d.fail(fieldError(field+".job", "%q %s", dep.Job, nameRule))
		case dep.Job == j.Name:
			// A run would wait for itself: the same job at the same logical
			// time.
			d.fail(fieldError(field+".job", "names this job itself"))
		case slices.ContainsFunc(j.DependsOnJobs, func(o JobDependency) bool { return o.Job == dep.Job }):
			d.fail(fieldError(field+".job", "names %q a second time", dep.Job))
		}
		dep.Require = statemodel.RequirePublished
		if v := get(m, "require"); v != nil {
			s := d.str(v, field+".require")
			if d.err != nil {
				return
			}
			req, err := statemodel.ParseRequirement(s)
			if err != nil {
				d.fail(fieldError(field+".require", `must be "published" or "succeeded", not %q`, s))
			}
			dep.Require = req
		}
		if d.err != nil {
			return
		}
		j.DependsOnJobs = append(j.DependsOnJobs, dep)
	}
}
