package main

import (
	"fmt"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/shared/protocol"
)

// admissionLine says where a limited run stands in its limiter: why it
// waits and its place, or when it was admitted; "" for a job without
// limits.
func admissionLine(r client.Run) string {
	a := r.Admission
	if a == nil {
		return ""
	}
	if a.State == protocol.AdmissionWaiting {
		line := fmt.Sprintf("  waiting for %s in limiter %s", a.Reason, a.Limiter)
		if a.Place > 0 {
			line += fmt.Sprintf(", place %d", a.Place)
		}
		return line + fmt.Sprintf("  (priority %d)", r.Priority)
	}
	line := fmt.Sprintf("  admitted in limiter %s", a.Limiter)
	if !a.AdmittedAt.IsZero() {
		line += " at " + when(a.AdmittedAt)
	}
	return line + fmt.Sprintf("  (priority %d)", r.Priority)
}

// slotDetail says which task limiter a task waits in for a slot; "" when
// it waits for none.
func slotDetail(t client.Task) string {
	if t.WaitingForSlot == "" {
		return ""
	}
	return "waiting for a slot in " + t.WaitingForSlot
}
