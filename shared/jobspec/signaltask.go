package jobspec

import (
	"encoding/json"
	"time"
)

// DefaultSignalRunTimeout is timeouts.run of a signal task whose
// definition sets none: how long it waits for its signal.
const DefaultSignalRunTimeout = 24 * time.Hour

// readSignalDefaults gives signal tasks their own default run timeout.
// A job whose executor is signal and whose timeouts set no run waits
// DefaultSignalRunTimeout (its tasks inherit it); a task whose own
// executor is signal, under a job that sets no run, gets it on the task.
// The canonical definition carries the value, so Load reads it back as
// Parse set it.
func readSignalDefaults(d *decoder, top map[string]json.RawMessage, j *Job, _ parseMode) {
	if runSet(get(top, "timeouts")) {
		return
	}
	if j.Executor.Type == ExecutorSignal {
		j.Timeouts.Run = ptr(DefaultSignalRunTimeout)
		return
	}
	for i := range j.TaskDefs {
		t := &j.TaskDefs[i]
		if t.Executor != nil && t.Executor.Type == ExecutorSignal && t.Timeouts.Run == nil {
			t.Timeouts.Run = ptr(DefaultSignalRunTimeout)
		}
	}
}

// runSet reports whether a timeouts object (already checked) sets run.
func runSet(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	if raw == nil || json.Unmarshal(raw, &m) != nil {
		return false
	}
	_, ok := m["run"]
	return ok
}
