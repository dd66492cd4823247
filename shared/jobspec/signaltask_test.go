package jobspec_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
)

// TestSignalExecutor: {"type": "signal"} parses on a job or a task; a
// signal task's run timeout defaults to 24h unless the task or the job
// sets one; the canonical JSON reads back equal; fields of other
// executors are refused.
func TestSignalExecutor(t *testing.T) {
	body := `{"name": "x", "tasks": [
	    {"id": "load"},
	    {"id": "gate", "depends_on": ["load"], "executor": {"type": "signal"}},
	    {"id": "gate2", "depends_on": ["load"], "executor": {"type": "signal"}, "timeouts": {"run": "2h"}}
	  ]}`
	j, err := jobspec.Parse([]byte(body), executorOpts)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]time.Duration{}
	for _, task := range j.Tasks() {
		runs[task.ID] = task.Policy.Timeouts.Run
	}
	if gate, _ := j.Task("gate"); gate.Executor.Type != jobspec.ExecutorSignal || gate.Executor.String() != "signal" {
		t.Fatalf("gate's executor %+v", gate.Executor)
	}
	if runs["load"] != time.Hour || runs["gate"] != jobspec.DefaultSignalRunTimeout || runs["gate2"] != 2*time.Hour {
		t.Fatalf("run timeouts %v, want load 1h, gate 24h, gate2 2h", runs)
	}
	spec, _ := wire.Marshal(j)
	back, err := jobspec.Load(spec)
	if err != nil {
		t.Fatalf("load %s: %v", spec, err)
	}
	if again, _ := wire.Marshal(back); string(again) != string(spec) {
		t.Fatalf("canonical form changed:\n%s\n%s", spec, again)
	}

	// A job whose timeouts set run: its signal tasks inherit it.
	j, err = jobspec.Parse([]byte(`{"name": "x", "timeouts": {"run": "3h"}, "tasks": [{"id": "gate", "executor": {"type": "signal"}}]}`), executorOpts)
	if err != nil {
		t.Fatal(err)
	}
	if gate, _ := j.Task("gate"); gate.Policy.Timeouts.Run != 3*time.Hour {
		t.Fatalf("inherited run timeout %s, want 3h", gate.Policy.Timeouts.Run)
	}
	// A job-level signal executor: its tasks wait 24h by default.
	j, err = jobspec.Parse([]byte(`{"name": "x", "executor": {"type": "signal"}}`), executorOpts)
	if err != nil {
		t.Fatal(err)
	}
	if main, _ := j.Task("main"); main.Executor.Type != jobspec.ExecutorSignal || main.Policy.Timeouts.Run != 24*time.Hour {
		t.Fatalf("job-level signal: %+v", main)
	}

	for _, bad := range []string{
		`{"name": "x", "executor": {"type": "signal", "function": "etl-fn"}}`,
		`{"name": "x", "executor": {"type": "signals"}}`,
	} {
		_, err := jobspec.Parse([]byte(bad), executorOpts)
		var je *jobspec.Error
		if !errors.As(err, &je) || je.Code != protocol.CodeInvalidField || !strings.HasPrefix(je.Field, "executor") {
			t.Errorf("%s: %v, want invalid_field naming executor", bad, err)
		}
	}
}
