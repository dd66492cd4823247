package statemodel

import (
	"fmt"
	"strings"
)

//go:generate go run ./internal/gendiagram -o ../docs/state-machine.md

// Mermaid renders the transition table as a mermaid state diagram inside a
// Markdown page. docs/state-machine.md is this text; a test keeps them equal.
func Mermaid() string {
	var b strings.Builder
	b.WriteString("# Task instance state machine\n\n")
	b.WriteString("Generated from `statemodel/table.go` by `go generate ./statemodel`; do not edit by hand.\n")
	b.WriteString("Each arrow is one row of the closed transition table: `event (actor)`.\n")
	b.WriteString("Arrows marked silent (heartbeats) refresh the lease without a history record.\n\n")
	b.WriteString("```mermaid\nstateDiagram-v2\n")
	name := func(s InstanceState) string {
		if s == StateNone {
			return "[*]"
		}
		return string(s)
	}
	for _, r := range table {
		for _, to := range r.To {
			label := fmt.Sprintf("%s (%s)", r.Event, r.Actor)
			if r.Silent {
				label += " silent"
			}
			fmt.Fprintf(&b, "    %s --> %s: %s\n", name(r.From), name(to), label)
		}
	}
	for _, s := range AllStates() {
		if s.Terminal() {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	b.WriteString("```\n\n| from | event | actor | to | guard |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range table {
		to := make([]string, len(r.To))
		for i, s := range r.To {
			to[i] = string(s)
		}
		guard := r.Guard
		if r.Silent {
			guard = strings.TrimSpace(guard + "; silent")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", name(r.From), r.Event, r.Actor, strings.Join(to, ", "), guard)
	}
	return b.String()
}
