package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/execworker"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
)

// outputOf reads a task's output from the run answer ("" when absent).
func outputOf(t *testing.T, s *stack, run, task string) string {
	t.Helper()
	var d struct {
		Tasks []struct {
			Task   string          `json:"task"`
			Output json.RawMessage `json:"output"`
		} `json:"tasks"`
	}
	r := s.call("GET", "/v1/runs/"+run, nil).must(t, http.StatusOK)
	if err := json.Unmarshal(r.Raw, &d); err != nil {
		t.Fatal(err)
	}
	for _, td := range d.Tasks {
		if td.Task == task {
			return string(td.Output)
		}
	}
	return ""
}

// TestOutputsFlowDownstream: a command's output file becomes its task's
// output; the downstream task's claim answer carries it in inputs (its
// queue message does not), an exec template renders it with json, and an
// SDK completion's output lands on the task answer. An output over 16 KiB
// is refused with 413 and changes nothing.
func TestOutputsFlowDownstream(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Options{Pools: []string{"default", "shell"}})
	allow, err := execworker.NewAllowlist([]string{"sh"}, false)
	if err != nil {
		t.Fatal(err)
	}
	exec, err := execworker.New(execworker.Config{Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	s.startLoggedWorker("shell", "exec", nil, exec.Handle)
	s.createJob(map[string]any{
		"name": "outputs", "pool": "shell",
		"timeouts": map[string]any{"heartbeat": "10s", "queue": "1m", "run": "1m"},
		"tasks": []any{
			map[string]any{"id": "list", "payload": map[string]any{
				"command": []string{"sh", "-c", `printf '{"files": ["a.csv", "b.csv"], "n": 2}' > "$RUNLEDGER_OUTPUT"`}}},
			map[string]any{"id": "echo", "depends_on": []string{"list"}, "payload": map[string]any{
				"command": []string{"sh", "-c", `printf '%s' '{"seen": {{json .Inputs.list.files}}, "n": {{.Inputs.list.n}}}' > "$RUNLEDGER_OUTPUT"`}}},
			map[string]any{"id": "sum", "pool": "default", "depends_on": []string{"list", "echo"}},
		},
	})
	run := s.trigger("outputs", map[string]any{})

	m := s.manualWorker("default")
	env, _ := m.receive(run, "sum", 1)
	if env.Inputs != nil {
		t.Errorf("the queue message carries inputs: %s", env.Inputs)
	}
	resp, err := m.claim(env, "manual")
	if err != nil || resp.Envelope == nil {
		t.Fatalf("claim: %+v, %v", resp, err)
	}
	want := map[string]string{"list": `{"files":["a.csv","b.csv"],"n":2}`, "echo": `{"seen":["a.csv","b.csv"],"n":2}`}
	if len(resp.Envelope.Inputs) != len(want) {
		t.Errorf("inputs %s, want %v", resp.Envelope.Inputs, want)
	}
	for task, w := range want {
		if got := string(resp.Envelope.Inputs[task]); got != w {
			t.Errorf("input %s = %s, want %s", task, got, w)
		}
	}

	// Over 16 KiB: 413, and the attempt is still RUNNING.
	big := `"` + strings.Repeat("x", protocol.MaxOutputBytes) + `"`
	r := s.callAs("Bearer "+env.Token, "POST", "/v1/attempts/complete", map[string]any{
		"run": run, "task": "sum", "attempt": 1, "event_id": "too-big", "outcome": "succeeded", "output": json.RawMessage(big)})
	if r.Status != http.StatusRequestEntityTooLarge || r.code() != "payload_too_large" {
		t.Fatalf("an output of %d bytes: %d %s, want 413 payload_too_large", len(big), r.Status, r.Raw)
	}
	if st := s.runDetail(run).task("sum").State; st != "RUNNING" {
		t.Fatalf("after the refused completion sum is %s, want RUNNING", st)
	}
	if _, _, err := m.complete(env, worker.Completion{Outcome: worker.OutcomeSucceeded, Output: json.RawMessage(`{"total": 3}`)}); err != nil {
		t.Fatal(err)
	}
	s.waitDetail(run, "sum", "SUCCEEDED", 30*time.Second)
	for task, w := range map[string]string{"list": want["list"], "echo": want["echo"], "sum": `{"total":3}`} {
		if got := outputOf(t, s, run, task); got != w {
			t.Errorf("task answer of %s: output %s, want %s", task, got, w)
		}
	}
}

// TestSDKSetOutputAndInputs: a handler's SetOutput is its task's output,
// and the next task's handler reads it from Inputs.
func TestSDKSetOutputAndInputs(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Options{})
	got := make(chan string, 1)
	s.startLoggedWorker("default", "sdk", nil, func(ctx context.Context, task worker.Task) error {
		if task.Task == "first" {
			return task.SetOutput(map[string]any{"rows": 42})
		}
		got <- string(task.Inputs()["first"])
		return nil
	})
	s.createJob(map[string]any{"name": "sdk-outputs", "pool": "default", "tasks": []any{
		map[string]any{"id": "first"}, map[string]any{"id": "second", "depends_on": []string{"first"}},
	}})
	run := s.trigger("sdk-outputs", map[string]any{})
	s.waitDetail(run, "second", "SUCCEEDED", 30*time.Second)
	if in := <-got; in != `{"rows":42}` {
		t.Errorf("second's input from first: %s", in)
	}
	if out := outputOf(t, s, run, "first"); out != `{"rows":42}` {
		t.Errorf("first's output: %s", out)
	}
}
