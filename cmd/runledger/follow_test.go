package main

import (
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// A retry that began and ended between two reads of the run still prints
// how the first attempt ended, once.
func TestFollowerPrintsAnAttemptItNeverSaw(t *testing.T) {
	three := 3
	ended := time.Date(2026, 1, 2, 3, 4, 5, 600e6, time.UTC)
	failed := protocol.Attempt{N: 1, State: "FAILED", EndedAt: ended, ExitCode: &three, ErrorCategory: "command_failed"}
	read := func(state statemodel.InstanceState, attempts ...protocol.Attempt) client.RunDetail {
		return client.RunDetail{Tasks: []client.Task{{Task: "main", State: state, Attempt: len(attempts), Attempts: attempts}}}
	}
	seen := map[string]taskMark{}
	var out strings.Builder
	printChanges(&out, read(statemodel.StateQueued, protocol.Attempt{N: 1, State: "QUEUED"}), seen)
	printChanges(&out, read(statemodel.StateRunning, failed, protocol.Attempt{N: 2, State: "RUNNING"}), seen)
	printChanges(&out, read(statemodel.StateRunning, failed, protocol.Attempt{N: 2, State: "RUNNING"}), seen)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got:\n%s", out.String())
	}
	if want := "03:04:05.600  main  FAILED  attempt 1  (exit 3 command_failed)"; lines[1] != want {
		t.Errorf("line 2 = %q, want %q", lines[1], want)
	}
	if !strings.HasSuffix(lines[2], "main  RUNNING  attempt 2") {
		t.Errorf("line 3 = %q: want the new attempt, without a from-state it was not seen in", lines[2])
	}
}
