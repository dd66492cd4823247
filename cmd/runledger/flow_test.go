package main

import (
	"strings"
	"testing"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/shared/protocol"
)

// runs show says why a limited run waits: its limiter and place.
func TestRunsShowSaysWhyARunWaits(t *testing.T) {
	var b strings.Builder
	d := client.RunDetail{Run: client.Run{ID: "r1", Job: "orders", Priority: 2,
		Admission: &protocol.Admission{State: "waiting", Reason: "concurrency", Limiter: "orders/a", Place: 3}}}
	if err := drawRun(&b, d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "waiting for concurrency in limiter orders/a, place 3  (priority 2)") {
		t.Fatalf("runs show:\n%s", b.String())
	}
	if admissionLine(client.Run{}) != "" {
		t.Fatal("a run without limits has an admission line")
	}
}

// runs show says which task limiter a task waits in for a slot.
func TestRunsShowSaysWhyATaskWaitsForASlot(t *testing.T) {
	var b strings.Builder
	d := client.RunDetail{Run: client.Run{ID: "r1", Job: "export"},
		Tasks: []client.Task{{Task: "load", State: "SCHEDULED", WaitingForSlot: "warehouse/"}}}
	if err := drawRun(&b, d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "waiting for a slot in warehouse/") {
		t.Fatalf("runs show:\n%s", b.String())
	}
}
