package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// drawRun prints a run and its tasks as a tree of their dependencies.
func drawRun(w io.Writer, d client.RunDetail) error {
	r := d.Run
	fmt.Fprintf(w, "run %s  job %s  %s", r.ID, r.Job, r.ExecutionState)
	if r.PublicationState != "" && r.PublicationState != statemodel.PublicationNotRequired {
		fmt.Fprintf(w, "  publication %s", r.PublicationState)
	}
	fmt.Fprintf(w, "\n  logical time %s  created %s  ended %s\n", when(r.LogicalTime), when(r.CreatedAt), when(r.EndedAt))
	if r.Event != nil {
		fmt.Fprintf(w, "  started by event %s  source %s  detail-type %s\n", r.Event.ID, r.Event.Source, r.Event.DetailType)
	}
	if line := admissionLine(r); line != "" {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
	t := newTable(w, "TASK", "STATE", "ATTEMPT", "DEP WAIT", "QUEUE WAIT", "RUN TIME", "DETAIL")
	for _, l := range dagLines(d.Tasks) {
		task := l.task
		t.row(l.prefix+task.Task+l.note, string(task.State), fmt.Sprint(task.Attempt),
			ms(task.Metrics.DependencyWaitMS), ms(task.Metrics.QueueWaitMS), ms(task.Metrics.RunMS), detail(task))
	}
	return t.flush()
}

// detail says how the latest attempt ended, when it did not succeed.
func detail(t client.Task) string {
	if len(t.Attempts) == 0 {
		return slotDetail(t)
	}
	parts := attemptDetail(t.Attempts[len(t.Attempts)-1])
	if t.CancelRequested && !t.State.Terminal() {
		parts = append(parts, "cancel requested")
	}
	parts = append(parts, mapAndOutput(t)...)
	if slot := slotDetail(t); slot != "" {
		parts = append(parts, slot)
	}
	return strings.Join(parts, " ")
}

// attemptDetail says how an attempt ended: its exit code when not 0 and
// its error category.
func attemptDetail(a protocol.Attempt) []string {
	var parts []string
	if a.ExitCode != nil && *a.ExitCode != 0 {
		parts = append(parts, fmt.Sprintf("exit %d", *a.ExitCode))
	}
	if a.ErrorCategory != "" {
		parts = append(parts, a.ErrorCategory)
	}
	return parts
}

// dagLine is one task of the drawing: the tree's prefix, the task, and the
// upstream tasks it waits for besides the one it is drawn under.
type dagLine struct {
	prefix string
	task   client.Task
	note   string
}

// dagLines orders the tasks as a tree: each task under its deepest
// upstream task (the last to be able to finish), roots in the run's order.
func dagLines(tasks []client.Task) []dagLine {
	byID := map[string]client.Task{}
	for _, t := range tasks {
		byID[t.Task] = t
	}
	depth := map[string]int{}
	var depthOf func(id string, seen map[string]bool) int
	depthOf = func(id string, seen map[string]bool) int {
		if d, ok := depth[id]; ok {
			return d
		}
		if seen[id] { // a cycle cannot be defined; do not loop on a bad answer
			return 0
		}
		seen[id] = true
		d := 0
		for _, up := range byID[id].DependsOn {
			if _, ok := byID[up]; ok {
				d = max(d, depthOf(up, seen)+1)
			}
		}
		depth[id] = d
		return d
	}
	children := map[string][]string{}
	var roots []string
	others := map[string][]string{}
	for _, t := range tasks {
		parent := ""
		for _, up := range t.DependsOn {
			if _, ok := byID[up]; ok && (parent == "" || depthOf(up, map[string]bool{}) > depthOf(parent, map[string]bool{})) {
				parent = up
			}
		}
		if parent == "" {
			roots = append(roots, t.Task)
			continue
		}
		children[parent] = append(children[parent], t.Task)
		for _, up := range t.DependsOn {
			if up != parent {
				others[t.Task] = append(others[t.Task], up)
			}
		}
	}
	var out []dagLine
	var walk func(id, indent string, last, root bool)
	walk = func(id, indent string, last, root bool) {
		prefix, childIndent := "", ""
		if !root {
			prefix, childIndent = indent+"├─ ", indent+"│  "
			if last {
				prefix, childIndent = indent+"└─ ", indent+"   "
			}
		}
		note := ""
		if o := others[id]; len(o) > 0 {
			note = " (also after " + strings.Join(o, ", ") + ")"
		}
		out = append(out, dagLine{prefix: prefix, task: byID[id], note: note})
		kids := children[id]
		for i, k := range kids {
			walk(k, childIndent, i == len(kids)-1, false)
		}
	}
	for _, r := range roots {
		walk(r, "", true, true)
	}
	return out
}

// stopped says why following run ended before the run did: --timeout,
// or the command was interrupted (the run goes on either way).
func (f followFlags) stopped(ctx context.Context, run string) error {
	if f.timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("run %s did not end within --timeout %s (it goes on)", run, f.timeout)
	}
	return fmt.Errorf("stopped following run %s before it ended (it goes on)", run)
}

// taskMark is what a follower compares to see a task change, and the
// last attempt whose end it printed.
type taskMark struct {
	state   statemodel.InstanceState
	attempt int
	ended   int
}

// follow reads the run every interval until it ends, printing a line per
// task that changes state or attempt; it fails with exit status 1 unless
// the run SUCCEEDED.
func follow(cmd *cobra.Command, c *client.Client, api *apiFlags, run string, f followFlags) error {
	ctx, cancel := f.context(cmd)
	defer cancel()
	out := cmd.OutOrStdout()
	seen := map[string]taskMark{}
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	for first := true; ; first = false {
		d, err := c.GetRun(ctx, run)
		if err != nil {
			if ctx.Err() != nil {
				return f.stopped(ctx, run)
			}
			return err
		}
		if first && !api.json() {
			fmt.Fprintf(out, "following run %s of job %s\n", d.Run.ID, d.Run.Job)
		}
		if !api.json() {
			printChanges(out, d, seen)
		}
		if d.Run.Ended() {
			return ended(cmd, api, d)
		}
		select {
		case <-ctx.Done():
			return f.stopped(ctx, run)
		case <-tick.C:
		}
	}
}

// printChanges prints a line per task whose state or attempt differs from
// what seen holds, and records it. An attempt that began and ended between
// two reads still gets its line (its outcome, from the task's attempts), so
// a quick retry never hides the failure before it.
func printChanges(out io.Writer, d client.RunDetail, seen map[string]taskMark) {
	now := time.Now().UTC()
	lines := dagLines(d.Tasks)
	width := 0
	for _, l := range lines {
		width = max(width, len(l.task.Task))
	}
	for _, l := range lines {
		t := l.task
		prev, ok := seen[t.Task]
		m := taskMark{state: t.State, attempt: t.Attempt, ended: prev.ended}
		if ok && prev.state == m.state && prev.attempt == m.attempt {
			continue
		}
		for _, a := range t.Attempts {
			if a.N <= m.ended || a.N >= t.Attempt || a.EndedAt.IsZero() {
				continue
			}
			line := fmt.Sprintf("%s  %-*s  %s  attempt %d", stamp(a.EndedAt), width, t.Task, a.State, a.N)
			if d := attemptDetail(a); len(d) > 0 {
				line += "  (" + strings.Join(d, " ") + ")"
			}
			fmt.Fprintln(out, line)
			m.ended, ok = a.N, false
		}
		change := string(t.State)
		if ok && prev.state != m.state {
			change = string(prev.state) + " -> " + change
		}
		line := fmt.Sprintf("%s  %-*s  %s", stamp(now), width, t.Task, change)
		if t.Attempt > 0 {
			line += fmt.Sprintf("  attempt %d", t.Attempt)
		}
		if t.State.Terminal() || t.State == statemodel.StateUpForRetry {
			m.ended = t.Attempt
			if d := detail(t); d != "" {
				line += "  (" + d + ")"
			}
		}
		seen[t.Task] = m
		fmt.Fprintln(out, line)
	}
}

// stamp is a follower line's time of day, in UTC.
func stamp(at time.Time) string { return at.UTC().Format("15:04:05.000") }

// ended reports a run that ended: exit 0 when it SUCCEEDED, else 1.
func ended(cmd *cobra.Command, api *apiFlags, d client.RunDetail) error {
	out := cmd.OutOrStdout()
	if api.json() {
		if err := printJSON(out, d); err != nil {
			return err
		}
	} else {
		took := ""
		if !d.Run.EndedAt.IsZero() && !d.Run.CreatedAt.IsZero() {
			took = " after " + d.Run.EndedAt.Sub(d.Run.CreatedAt).Round(100*time.Millisecond).String()
		}
		fmt.Fprintf(out, "run %s %s%s\n", d.Run.ID, d.Run.ExecutionState, took)
	}
	if d.Run.ExecutionState != statemodel.RunSucceeded {
		return &exitError{code: exitFailure}
	}
	return nil
}
