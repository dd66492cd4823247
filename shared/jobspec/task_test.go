package jobspec_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/statemodel"
)

const mergeBody = `{
  "name": "merge", "payload": {"job": 1},
  "retry": {"max_attempts": 5, "initial_interval": "30s"},
  "timeouts": {"run": "2h"},
  "evidence_window": "1m",
  "tasks": [
    {"id": "a"},
    {"id": "b", "depends_on": ["a"], "trigger_rule": "one_failed", "publish": true,
     "pool": "demo", "payload": {"task": 2},
     "retry": {"max_attempts": 1, "jitter": "none"}, "timeouts": {"heartbeat": "15s"}}
  ]
}`

// TestEffectiveTasks: a task's pool, payload, retry and timeouts override
// the job's field by field; what it leaves out it inherits.
func TestEffectiveTasks(t *testing.T) {
	j := mustParse(t, mergeBody)

	jobPolicy := statemodel.DefaultPolicy()
	jobPolicy.Retry.MaxAttempts = 5
	jobPolicy.Retry.InitialInterval = 30 * time.Second
	jobPolicy.Timeouts.Run = 2 * time.Hour
	jobPolicy.EvidenceWindow = time.Minute
	if !reflect.DeepEqual(j.Policy(), jobPolicy) {
		t.Errorf("job policy = %+v\nwant %+v", j.Policy(), jobPolicy)
	}

	bPolicy := jobPolicy
	bPolicy.Retry.MaxAttempts = 1
	bPolicy.Retry.Jitter = statemodel.JitterNone
	bPolicy.Timeouts.Heartbeat = 15 * time.Second
	want := []jobspec.Task{
		{ID: "a", Rule: statemodel.RuleAllSuccess, Pool: "default", Payload: json.RawMessage(`{"job":1}`), Policy: jobPolicy},
		{ID: "b", DependsOn: []string{"a"}, Rule: statemodel.RuleOneFailed, Publish: true, Pool: "demo",
			Payload: json.RawMessage(`{"task":2}`), Policy: bPolicy},
	}
	if got := j.Tasks(); !reflect.DeepEqual(got, want) {
		t.Errorf("tasks = %+v\nwant %+v", got, want)
	}
	if b, ok := j.Task("b"); !ok || !reflect.DeepEqual(b, want[1]) {
		t.Errorf("Task(b) = %+v %v", b, ok)
	}
	if _, ok := j.Task("main"); ok {
		t.Error("a job with tasks has a main task")
	}
	for _, task := range j.Tasks() {
		if err := task.Policy.Validate(); err != nil {
			t.Errorf("task %s: %v", task.ID, err)
		}
	}

	// The canonical JSON keeps b's overrides partial, so a new job-level
	// value reaches b's inherited fields.
	canonical := string(marshal(t, j))
	if !strings.Contains(canonical, `"retry":{"max_attempts":1,"jitter":"none"}`) {
		t.Errorf("b's retry is not kept partial: %s", canonical)
	}
	changed := mustParse(t, strings.Replace(canonical, `"initial_interval":"30s"`, `"initial_interval":"45s"`, 1))
	if b, _ := changed.Task("b"); b.Policy.Retry.InitialInterval != 45*time.Second || b.Policy.Retry.MaxAttempts != 1 {
		t.Errorf("after a job-level change b's retry is %+v", b.Policy.Retry)
	}
}

// TestNodesEvaluate: Nodes feed statemodel's DAG rules directly.
func TestNodesEvaluate(t *testing.T) {
	j := mustParse(t, mergeBody)
	nodes := j.Nodes()
	if err := statemodel.ValidateDAG(nodes); err != nil {
		t.Fatal(err)
	}
	nodes[0].State = statemodel.StateFailed
	nodes[1].State = statemodel.StateCreated
	got := statemodel.Evaluate(nodes)
	if len(got) != 1 || got[0].ID != "b" || got[0].Verdict != statemodel.DepsMet {
		t.Errorf("Evaluate = %+v; want b met (one_failed after a failed)", got)
	}
	if statemodel.DerivePublication(nodes) != statemodel.PublicationPending {
		t.Error("b's publish flag did not reach the nodes")
	}
	// Nodes are copies: changing them leaves the job alone.
	nodes[1].DependsOn[0] = "changed"
	if j.Nodes()[1].DependsOn[0] != "a" {
		t.Error("Nodes shares its slices with the job")
	}
}

// TestRetryIntervals: a retry object with intervals spaces its retries by
// them (jitter none unless it says otherwise); a task inherits the job's
// intervals, replaces them with its own, or drops them with its own
// initial interval; and the definition reads back as written.
func TestRetryIntervals(t *testing.T) {
	j := mustParse(t, `{"name": "a", "retry": {"intervals": ["30s", "5m", "30m"], "max_attempts": 5},
		"tasks": [{"id": "inherits"}, {"id": "own", "retry": {"intervals": ["1s"], "jitter": "full"}},
		{"id": "backoff", "retry": {"initial_interval": "2s"}}]}`)
	byID := map[string]statemodel.RetryPolicy{}
	for _, task := range j.Tasks() {
		byID[task.ID] = task.Policy.Retry
	}
	want := []time.Duration{30 * time.Second, 5 * time.Minute, 30 * time.Minute}
	if r := byID["inherits"]; !slices.Equal(r.Intervals, want) || r.Jitter != statemodel.JitterNone || r.MaxAttempts != 5 {
		t.Fatalf("inherited retry %+v", r)
	}
	waits := []time.Duration{}
	for n := 1; n <= 4; n++ {
		waits = append(waits, byID["inherits"].Backoff(n, 0.5))
	}
	if !slices.Equal(waits, append(want, 30*time.Minute)) {
		t.Fatalf("waits %v, want %v then the last repeating", waits, want)
	}
	if r := byID["own"]; !slices.Equal(r.Intervals, []time.Duration{time.Second}) || r.Jitter != statemodel.JitterFull || r.Backoff(3, 0.5) != 500*time.Millisecond {
		t.Fatalf("own retry %+v", r)
	}
	if r := byID["backoff"]; r.Intervals != nil || r.Backoff(2, 0.5) != 4*time.Second {
		t.Fatalf("a task's initial interval should replace the job's intervals: %+v", r)
	}
	again := mustParse(t, string(marshal(t, j)))
	for i, task := range again.Tasks() {
		if !task.Policy.Retry.Equal(j.Tasks()[i].Policy.Retry) {
			t.Fatalf("task %s's retry changed on the round trip: %+v, want %+v", task.ID, task.Policy.Retry, j.Tasks()[i].Policy.Retry)
		}
	}
}
