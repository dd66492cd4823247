package main

import (
	"fmt"

	"github.com/runledger/runledger/client"
)

// maxShownOutput is how much of a task's output `runs show` prints.
const maxShownOutput = 60

// mapAndOutput describes a map task's children and a task's output for
// the DETAIL column: "map 998/1000 ok 2 failed", "output {...}".
func mapAndOutput(t client.Task) []string {
	var parts []string
	if m := t.Map; m != nil {
		s := fmt.Sprintf("map %d/%d ok", m.Succeeded, m.Total)
		for _, c := range []struct {
			n    int
			name string
		}{{m.Running, "running"}, {m.Pending, "pending"}, {m.Failed, "failed"}, {m.Cancelled, "cancelled"}} {
			if c.n > 0 {
				s += fmt.Sprintf(" %d %s", c.n, c.name)
			}
		}
		parts = append(parts, s)
	}
	switch {
	case t.OutputTruncated:
		parts = append(parts, "output over 256 KiB (children paged)")
	case len(t.Output) > maxShownOutput:
		parts = append(parts, "output "+string(t.Output[:maxShownOutput])+"...")
	case len(t.Output) > 0:
		parts = append(parts, "output "+string(t.Output))
	}
	return parts
}
