package jobspec

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// Executor types (docs/api.md, "Executors").
const (
	// ExecutorQueue is the pool's SQS queue, read by workers built with
	// the SDK or `runledger worker exec`. An absent executor is this one.
	ExecutorQueue = "queue"
	// ExecutorLambda invokes a Lambda function asynchronously with the
	// envelope as its event.
	ExecutorLambda = "lambda"
	// ExecutorECS starts an ECS task (RunTask) whose container claims the
	// attempt.
	ExecutorECS = "ecs"
	// ExecutorSignal runs nothing: the attempt starts at once and waits
	// for a signal (an approval, an outside system's callback) through
	// the signal route, bounded by its run timeout (default
	// DefaultSignalRunTimeout).
	ExecutorSignal = statemodel.ExecutorSignal
)

// ECS launch types.
const (
	LaunchFargate = "FARGATE"
	LaunchEC2     = "EC2"
)

// Limits of an ecs executor, ECS's own (awsvpcConfiguration).
const (
	MaxSubnets        = 16
	MaxSecurityGroups = 5
)

// Executor is what runs a task's attempts: the `executor` field of a job
// or a task. The zero value is the queue.
type Executor struct {
	Type string
	// Function (lambda) is a function name or ARN, as Lambda's Invoke
	// takes it.
	Function string
	// Cluster, TaskDefinition and Container (ecs) name where RunTask
	// starts the task and the container whose environment carries the
	// attempt; Subnets and SecurityGroups are its awsvpc network; LaunchType
	// is FARGATE (the default) or EC2.
	Cluster        string
	TaskDefinition string
	Container      string
	Subnets        []string
	SecurityGroups []string
	LaunchType     string
}

// IsQueue reports whether e is the pool's queue (absent, or type queue).
func (e Executor) IsQueue() bool { return e.Type == "" || e.Type == ExecutorQueue }

// EffectiveType is e's type, "queue" for the zero value.
func (e Executor) EffectiveType() string {
	if e.Type == "" {
		return ExecutorQueue
	}
	return e.Type
}

// Allowed is what a deployment lets jobs run outside its queues (CDK props
// in AWS, the local stack's registry locally). Empty lists allow nothing of
// that kind.
type Allowed struct {
	// LambdaFunctions are function names or ARNs; a definition may name a
	// function by either (an ARN's function name is compared, and an
	// allowed name without a qualifier allows every qualifier).
	LambdaFunctions []string `json:"lambda_functions,omitempty"`
	// ECSClusters are cluster names or ARNs.
	ECSClusters []string `json:"ecs_clusters,omitempty"`
	// ECSTaskDefinitions are task definition families ("etl", which allows
	// every revision), family:revision pairs, or their ARNs.
	ECSTaskDefinitions []string `json:"ecs_task_definitions,omitempty"`
}

// Merge adds b's names to a's.
func (a Allowed) Merge(b Allowed) Allowed {
	return Allowed{
		LambdaFunctions:    append(slices.Clone(a.LambdaFunctions), b.LambdaFunctions...),
		ECSClusters:        append(slices.Clone(a.ECSClusters), b.ECSClusters...),
		ECSTaskDefinitions: append(slices.Clone(a.ECSTaskDefinitions), b.ECSTaskDefinitions...),
	}
}

type executorJSON struct {
	Type           string   `json:"type"`
	Function       string   `json:"function,omitempty"`
	Cluster        string   `json:"cluster,omitempty"`
	TaskDefinition string   `json:"task_definition,omitempty"`
	Container      string   `json:"container,omitempty"`
	Subnets        []string `json:"subnets,omitempty"`
	SecurityGroups []string `json:"security_groups,omitempty"`
	LaunchType     string   `json:"launch_type,omitempty"`
}

// MarshalJSON writes the canonical form: the type always, launch_type for
// ecs always, other fields only when set.
func (e Executor) MarshalJSON() ([]byte, error) {
	return wire.Marshal(executorJSON{
		Type: e.EffectiveType(), Function: e.Function, Cluster: e.Cluster, TaskDefinition: e.TaskDefinition,
		Container: e.Container, Subnets: e.Subnets, SecurityGroups: e.SecurityGroups, LaunchType: e.LaunchType,
	})
}

// ParseExecutor reads an executor as MarshalJSON wrote it (the store keeps
// it on each task instance), checking it as Load does.
func ParseExecutor(b []byte) (Executor, error) {
	if len(b) == 0 {
		return Executor{}, nil
	}
	d := &decoder{}
	e := d.executor(b, "executor", parseMode{})
	if d.err != nil {
		return Executor{}, d.err
	}
	return e, nil
}

var executorFields = map[string][]string{
	ExecutorQueue:  {"type"},
	ExecutorLambda: {"type", "function"},
	ExecutorECS:    {"type", "cluster", "task_definition", "container", "subnets", "security_groups", "launch_type"},
	ExecutorSignal: {"type"},
}

// awsChars are the characters ECS and Lambda accept in these fields
// (letters, digits and the punctuation of ARNs); validName bounds the length.
var awsChars = regexp.MustCompile(`^[A-Za-z0-9_.:/@+=,-]+$`)

// maxAWSName bounds a name or ARN.
const maxAWSName = 2048

func validAWSName(s string) bool { return len(s) <= maxAWSName && awsChars.MatchString(s) }

// executor reads and checks an executor object at field.
func (d *decoder) executor(raw json.RawMessage, field string, mode parseMode) Executor {
	var e Executor
	if d.err != nil || raw == nil {
		return e
	}
	var head map[string]json.RawMessage
	if err := json.Unmarshal(raw, &head); err != nil || head == nil {
		d.fail(fieldError(field, "must be an object"))
		return e
	}
	tf := join(field, "type")
	if v := get(head, "type"); v != nil {
		e.Type = d.str(v, tf)
	} else {
		d.fail(fieldError(tf, `is required ("queue", "lambda", "ecs" or "signal")`))
	}
	if d.err != nil {
		return e
	}
	keys, ok := executorFields[e.Type]
	if !ok {
		d.fail(fieldError(tf, `must be "queue", "lambda", "ecs" or "signal", not %q`, e.Type))
		return e
	}
	m := d.object(raw, field, keys...)
	switch e.Type {
	case ExecutorQueue:
		return Executor{}
	case ExecutorLambda:
		e.Function = d.required(m, field, "function")
		d.allowed(join(field, "function"), e.Function, mode, func(a Allowed) []string { return a.LambdaFunctions }, sameFunction,
			"is not a Lambda function this deployment may invoke")
	case ExecutorECS:
		d.ecs(m, field, &e, mode)
	case ExecutorSignal:
		return Executor{Type: ExecutorSignal}
	}
	return e
}

func (d *decoder) ecs(m map[string]json.RawMessage, field string, e *Executor, mode parseMode) {
	e.Cluster = d.required(m, field, "cluster")
	e.TaskDefinition = d.required(m, field, "task_definition")
	e.Container = d.required(m, field, "container")
	e.LaunchType = LaunchFargate
	if v := get(m, "launch_type"); v != nil {
		f := join(field, "launch_type")
		e.LaunchType = d.str(v, f)
		if d.err == nil && e.LaunchType != LaunchFargate && e.LaunchType != LaunchEC2 {
			d.fail(fieldError(f, `must be "FARGATE" or "EC2", not %q`, e.LaunchType))
		}
	}
	e.Subnets = d.names(get(m, "subnets"), join(field, "subnets"), MaxSubnets)
	e.SecurityGroups = d.names(get(m, "security_groups"), join(field, "security_groups"), MaxSecurityGroups)
	if d.err == nil && e.LaunchType == LaunchFargate && len(e.Subnets) == 0 {
		d.fail(fieldError(join(field, "subnets"), "must name at least one subnet for launch type FARGATE"))
	}
	d.allowed(join(field, "cluster"), e.Cluster, mode, func(a Allowed) []string { return a.ECSClusters }, sameCluster,
		"is not an ECS cluster this deployment may run tasks in")
	d.allowed(join(field, "task_definition"), e.TaskDefinition, mode, func(a Allowed) []string { return a.ECSTaskDefinitions }, sameTaskDefinition,
		"is not an ECS task definition this deployment may run")
}

// required reads a non-empty name at field.key.
func (d *decoder) required(m map[string]json.RawMessage, field, key string) string {
	f := join(field, key)
	v := get(m, key)
	if v == nil {
		d.fail(fieldError(f, "is required"))
		return ""
	}
	s := d.str(v, f)
	if d.err == nil && !validAWSName(s) {
		d.fail(fieldError(f, "%q is not a name or ARN (1 to 2048 letters, digits or _.:/@+=,-)", s))
	}
	return s
}

// names reads an array of at most limit distinct names.
func (d *decoder) names(raw json.RawMessage, field string, limit int) []string {
	if raw == nil || d.err != nil {
		return nil
	}
	var out []string
	for i, v := range d.array(raw, field) {
		s := d.str(v, at(field, i))
		switch {
		case d.err != nil:
			return nil
		case !validAWSName(s):
			d.fail(fieldError(at(field, i), "%q is not an id", s))
		case slices.Contains(out, s):
			d.fail(fieldError(at(field, i), "names %q a second time", s))
		}
		out = append(out, s)
	}
	if d.err == nil && len(out) > limit {
		d.fail(fieldError(field, "names %d, over the limit of %d", len(out), limit))
	}
	return out
}

// allowed refuses a name the deployment does not allow; stored
// definitions (Load) are not checked, as the deployment may have changed.
func (d *decoder) allowed(field, name string, mode parseMode, list func(Allowed) []string, same func(allowed, name string) bool, what string) {
	if d.err != nil || mode.world == nil {
		return
	}
	allowed := list(mode.world.Allowed)
	if slices.ContainsFunc(allowed, func(a string) bool { return same(a, name) }) {
		return
	}
	names := "none"
	if len(allowed) > 0 {
		names = strings.Join(allowed, ", ")
	}
	d.fail(fieldError(field, "%q %s (allowed: %s)", name, what, names))
}

// sameFunction: a function ARN
// (arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>]) and a
// name ("<name>" or "<name>:<qualifier>") name the same function when
// their names agree and the allowed one has no qualifier or the same.
func sameFunction(allowed, name string) bool {
	if allowed == name {
		return true
	}
	an, aq := functionParts(allowed)
	nn, nq := functionParts(name)
	return an == nn && (aq == "" || aq == nq)
}

func functionParts(s string) (name, qualifier string) {
	if rest, ok := strings.CutPrefix(s, "arn:"); ok {
		parts := strings.Split(rest, ":")
		// aws:lambda:<region>:<account>:function:<name>[:<qualifier>]
		if len(parts) >= 6 && parts[4] == "function" {
			name = parts[5]
			if len(parts) > 6 {
				qualifier = parts[6]
			}
			return name, qualifier
		}
		return s, ""
	}
	name, qualifier, _ = strings.Cut(s, ":")
	return name, qualifier
}

// FunctionName is the function name a Lambda function name or ARN names.
func FunctionName(s string) string {
	name, _ := functionParts(s)
	return name
}

// sameCluster compares cluster names, an ARN's
// (arn:aws:ecs:<region>:<account>:cluster/<name>) by its name.
func sameCluster(allowed, name string) bool {
	return allowed == name || lastSegment(allowed) == lastSegment(name)
}

// sameTaskDefinition compares families, an ARN's
// (arn:aws:ecs:<region>:<account>:task-definition/<family>:<revision>) by
// its family; an allowed family without a revision allows every revision.
func sameTaskDefinition(allowed, name string) bool {
	if allowed == name {
		return true
	}
	af, ar, _ := strings.Cut(lastSegment(allowed), ":")
	nf, nr, _ := strings.Cut(lastSegment(name), ":")
	return af == nf && (ar == "" || ar == nr)
}

func lastSegment(s string) string {
	if i := strings.LastIndexByte(s, '/'); i >= 0 && strings.HasPrefix(s, "arn:") {
		return s[i+1:]
	}
	return s
}

// String names the executor in messages: "lambda etl-fn", "ecs etl:3 on
// main", "queue".
func (e Executor) String() string {
	switch e.Type {
	case ExecutorLambda:
		return fmt.Sprintf("lambda %s", e.Function)
	case ExecutorECS:
		return fmt.Sprintf("ecs %s on %s", e.TaskDefinition, e.Cluster)
	case ExecutorSignal:
		return ExecutorSignal
	}
	return ExecutorQueue
}
