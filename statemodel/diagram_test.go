package statemodel

import (
	"os"
	"strings"
	"testing"
)

// TestDiagramMatchesTable fails when docs/state-machine.md and the table
// differ: run `go generate ./statemodel` after changing the table.
func TestDiagramMatchesTable(t *testing.T) {
	got, err := os.ReadFile("../docs/state-machine.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != Mermaid() {
		t.Fatal("docs/state-machine.md is stale: run `go generate ./statemodel`")
	}
	for _, r := range table {
		for _, to := range r.To {
			if !strings.Contains(string(got), string(to)) || !strings.Contains(string(got), string(r.Event)) {
				t.Fatalf("diagram lacks %s -> %s", r.Event, to)
			}
		}
	}
}
