package jobspec_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
)

var executorOpts = jobspec.Options{
	Pools: []string{"default"}, Now: now,
	Allowed: jobspec.Allowed{
		LambdaFunctions:    []string{"etl-fn", "arn:aws:lambda:eu-west-1:123456789012:function:report"},
		ECSClusters:        []string{"main"},
		ECSTaskDefinitions: []string{"etl", "arn:aws:ecs:eu-west-1:123456789012:task-definition/load:3"},
	},
}

// TestExecutorAccepts: each executor type parses to its typed form, task
// executors replace the job's, and the canonical JSON reads back equal.
func TestExecutorAccepts(t *testing.T) {
	body := `{"name": "x", "executor": {"type": "lambda", "function": "etl-fn"},
	  "tasks": [
	    {"id": "a"},
	    {"id": "b", "executor": {"type": "queue"}},
	    {"id": "c", "executor": {"type": "lambda", "function": "report:live"}},
	    {"id": "d", "executor": {"type": "ecs", "cluster": "arn:aws:ecs:eu-west-1:123456789012:cluster/main",
	      "task_definition": "etl:7", "container": "app", "subnets": ["subnet-1"], "security_groups": ["sg-1"]}},
	    {"id": "e", "executor": {"type": "ecs", "cluster": "main", "task_definition": "load:3", "container": "app", "launch_type": "EC2"}}
	  ]}`
	j, err := jobspec.Parse([]byte(body), executorOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]jobspec.Executor{
		"a": {Type: "lambda", Function: "etl-fn"},
		"b": {},
		"c": {Type: "lambda", Function: "report:live"},
		"d": {Type: "ecs", Cluster: "arn:aws:ecs:eu-west-1:123456789012:cluster/main", TaskDefinition: "etl:7", Container: "app",
			Subnets: []string{"subnet-1"}, SecurityGroups: []string{"sg-1"}, LaunchType: "FARGATE"},
		"e": {Type: "ecs", Cluster: "main", TaskDefinition: "load:3", Container: "app", LaunchType: "EC2"},
	}
	for _, task := range j.Tasks() {
		if !reflect.DeepEqual(task.Executor, want[task.ID]) {
			t.Errorf("task %s: executor %+v, want %+v", task.ID, task.Executor, want[task.ID])
		}
	}
	spec, err := wire.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	back, err := jobspec.Load(spec)
	if err != nil {
		t.Fatalf("load %s: %v", spec, err)
	}
	again, _ := wire.Marshal(back)
	if string(again) != string(spec) {
		t.Errorf("canonical JSON not stable:\n%s\n%s", spec, again)
	}
	e, err := jobspec.ParseExecutor(mustMarshal(t, want["d"]))
	if err != nil || !reflect.DeepEqual(e, want["d"]) {
		t.Errorf("ParseExecutor: %+v, %v", e, err)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExecutorErrors: each refusal is invalid_field naming the field.
func TestExecutorErrors(t *testing.T) {
	ecs := func(extra string) string {
		return `{"name": "x", "executor": {"type": "ecs", "cluster": "main", "task_definition": "etl", "container": "app"` + extra + `}}`
	}
	for _, c := range []struct{ name, body, field, says string }{
		{"no type", `{"name": "x", "executor": {"function": "etl-fn"}}`, "executor.type", "is required"},
		{"unknown type", `{"name": "x", "executor": {"type": "batch"}}`, "executor.type", `not "batch"`},
		{"not object", `{"name": "x", "executor": "lambda"}`, "executor", "must be an object"},
		{"no function", `{"name": "x", "executor": {"type": "lambda"}}`, "executor.function", "is required"},
		{"function not allowed", `{"name": "x", "executor": {"type": "lambda", "function": "other"}}`, "executor.function", "may invoke"},
		{"qualifier not allowed", `{"name": "x", "executor": {"type": "lambda", "function": "other:live"}}`, "executor.function", "may invoke"},
		{"field of another type", `{"name": "x", "executor": {"type": "lambda", "function": "etl-fn", "cluster": "main"}}`, "executor.cluster", "not a known field"},
		{"queue with fields", `{"name": "x", "executor": {"type": "queue", "function": "etl-fn"}}`, "executor.function", "not a known field"},
		{"fargate without subnets", ecs(""), "executor.subnets", "at least one subnet"},
		{"bad launch type", ecs(`, "subnets": ["s"], "launch_type": "fargate"`), "executor.launch_type", `"FARGATE" or "EC2"`},
		{"cluster not allowed", `{"name": "x", "executor": {"type": "ecs", "cluster": "other", "task_definition": "etl", "container": "app", "subnets": ["s"]}}`, "executor.cluster", "may run tasks in"},
		{"task definition not allowed", `{"name": "x", "executor": {"type": "ecs", "cluster": "main", "task_definition": "load:4", "container": "app", "subnets": ["s"]}}`, "executor.task_definition", "may run"},
		{"no container", `{"name": "x", "executor": {"type": "ecs", "cluster": "main", "task_definition": "etl", "subnets": ["s"]}}`, "executor.container", "is required"},
		{"duplicate subnet", ecs(`, "subnets": ["s", "s"]`), "executor.subnets[1]", "second time"},
		{"too many security groups", ecs(`, "subnets": ["s"], "security_groups": ["a","b","c","d","e","f"]`), "executor.security_groups", "over the limit of 5"},
		{"bad name", `{"name": "x", "executor": {"type": "lambda", "function": "etl fn"}}`, "executor.function", "not a name or ARN"},
		{"task executor", `{"name": "x", "tasks": [{"id": "a", "executor": {"type": "lambda", "function": "nope"}}]}`, "tasks[0].executor.function", "may invoke"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := jobspec.Parse([]byte(c.body), executorOpts)
			e, ok := err.(*jobspec.Error)
			if !ok {
				t.Fatalf("err = %v, want *jobspec.Error", err)
			}
			if e.Code != protocol.CodeInvalidField || e.Field != c.field || !strings.Contains(e.Message, c.says) {
				t.Errorf("got %s %s %q, want invalid_field %s saying %q", e.Code, e.Field, e.Message, c.field, c.says)
			}
		})
	}
}

// TestExecutorLoadSkipsAllowList: a stored definition whose function the
// deployment no longer allows still loads (its runs fail at dispatch).
func TestExecutorLoadSkipsAllowList(t *testing.T) {
	if _, err := jobspec.Load([]byte(`{"name": "x", "executor": {"type": "lambda", "function": "gone"}}`)); err != nil {
		t.Fatal(err)
	}
}
