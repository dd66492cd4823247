package statemodel

import (
	"fmt"
	"strings"
)

// This file holds the workflow half of the state model: how a task's trigger
// rule turns its upstream states into SCHEDULED, SKIPPED or UPSTREAM_FAILED,
// how a run's execution state is derived from its tasks, and how publication
// is tracked apart from execution. The reference semantics are Airflow's
// trigger rules and DagRun.update_state; the differences are written where
// they occur (CANCELLED, which Airflow lacks, and the QUEUED run state).
//
// Everything here is a function of the task states passed in. Nothing is
// stored: the run state is recomputed from the tasks whenever one of them
// changes, so it can never drift from them or be set by hand.

// TriggerRule decides, from the states of a task's upstream tasks, whether the
// task runs, is skipped, or fails because of its upstream.
type TriggerRule string

const (
	// RuleAllSuccess runs the task once every upstream task succeeded. It is
	// the default: the empty rule means all_success, so a definition that
	// names no rule gets the safe one (nothing runs on top of a failure).
	RuleAllSuccess TriggerRule = "all_success"
	// RuleAllDone runs the task once every upstream task is terminal, whatever
	// the outcome. It is the rule for cleanup tasks that must run after a
	// failure.
	RuleAllDone TriggerRule = "all_done"
	// RuleAllFailed runs the task only if every upstream task failed.
	RuleAllFailed TriggerRule = "all_failed"
	// RuleOneSuccess runs the task as soon as one upstream task succeeded,
	// without waiting for the others.
	RuleOneSuccess TriggerRule = "one_success"
	// RuleOneFailed runs the task as soon as one upstream task failed: the
	// rule for alerting and rollback branches.
	RuleOneFailed TriggerRule = "one_failed"
	// RuleNoneFailed runs the task once every upstream task is terminal and
	// none failed; skipped upstream tasks are allowed. It is the rule for
	// joining the branches of a choice where only one branch ran.
	RuleNoneFailed TriggerRule = "none_failed"
	// RuleNoneFailedMinOneSuccess is none_failed that also needs at least one
	// upstream success, so a join after branches that were all skipped is
	// skipped rather than run on nothing.
	RuleNoneFailedMinOneSuccess TriggerRule = "none_failed_min_one_success"
	// RuleAlways runs the task at once, independent of its upstream tasks.
	RuleAlways TriggerRule = "always"
)

// AllTriggerRules lists every trigger rule, the default first.
func AllTriggerRules() []TriggerRule {
	return []TriggerRule{
		RuleAllSuccess, RuleAllDone, RuleAllFailed, RuleOneSuccess,
		RuleOneFailed, RuleNoneFailed, RuleNoneFailedMinOneSuccess, RuleAlways,
	}
}

// UnknownTriggerRuleError reports a trigger rule name that is not one of
// AllTriggerRules.
type UnknownTriggerRuleError struct {
	Rule string
}

func (e *UnknownTriggerRuleError) Error() string {
	return fmt.Sprintf("unknown trigger rule %q", e.Rule)
}

// ParseTriggerRule turns a definition's trigger_rule into a TriggerRule. The
// empty string is the default, all_success. Anything else unknown is an
// *UnknownTriggerRuleError: a misspelt rule must be refused when the job is
// defined, not discovered as a stuck run.
func ParseTriggerRule(s string) (TriggerRule, error) {
	if s == "" {
		return RuleAllSuccess, nil
	}
	r := TriggerRule(s)
	if !r.Valid() {
		return "", &UnknownTriggerRuleError{Rule: s}
	}
	return r, nil
}

// Valid reports whether r is a known rule or the empty (default) rule.
func (r TriggerRule) Valid() bool {
	if r == "" {
		return true
	}
	for _, k := range AllTriggerRules() {
		if k == r {
			return true
		}
	}
	return false
}

// Effective returns the rule that applies: all_success for the empty rule.
func (r TriggerRule) Effective() TriggerRule {
	if r == "" {
		return RuleAllSuccess
	}
	return r
}

// DepVerdict is the outcome of evaluating a task's trigger rule against its
// upstream states. The zero value is DepsWait, so an unset verdict never lets
// a task run.
type DepVerdict int

const (
	// DepsWait: the rule cannot be decided yet; the task stays CREATED.
	DepsWait DepVerdict = iota
	// DepsMet: the task may run; it moves to SCHEDULED.
	DepsMet
	// DepsSkip: the task will not run and that is not a failure; it moves to
	// SKIPPED.
	DepsSkip
	// DepsUpstreamFailed: the task cannot run because of its upstream; it
	// moves to UPSTREAM_FAILED.
	DepsUpstreamFailed
)

func (v DepVerdict) String() string {
	switch v {
	case DepsWait:
		return "wait"
	case DepsMet:
		return "met"
	case DepsSkip:
		return "skip"
	case DepsUpstreamFailed:
		return "upstream_failed"
	}
	return fmt.Sprintf("DepVerdict(%d)", int(v))
}

// Target is the state a CREATED task moves to on this verdict, and false for
// DepsWait (the task stays where it is).
func (v DepVerdict) Target() (InstanceState, bool) {
	switch v {
	case DepsMet:
		return StateScheduled, true
	case DepsSkip:
		return StateSkipped, true
	case DepsUpstreamFailed:
		return StateUpstreamFailed, true
	}
	return "", false
}

// upstreamCounts tallies upstream states into the classes the rules read.
//
// Two classes of "went wrong" exist because CANCELLED, which Airflow has no
// equivalent of, is an operator's decision and not a failure of the work:
//   - failed (FAILED, UPSTREAM_FAILED) is what failure handlers react to
//     (one_failed, all_failed);
//   - cancelled blocks the success path like a failure (all_success,
//     none_failed, one_success turn it into UPSTREAM_FAILED, so nothing runs
//     on top of work that never finished) but does not fire failure handlers.
type upstreamCounts struct {
	total, terminal                       int
	succeeded, failed, cancelled, skipped int
}

func countUpstream(upstream []InstanceState) upstreamCounts {
	c := upstreamCounts{total: len(upstream)}
	for _, s := range upstream {
		switch s {
		case StateSucceeded:
			c.succeeded++
		case StateFailed, StateUpstreamFailed:
			c.failed++
		case StateCancelled:
			c.cancelled++
		case StateSkipped:
			c.skipped++
		default:
			// Non-terminal, or a value that is not a state at all: either
			// way its outcome is not known, so it cannot decide a rule.
			continue
		}
		c.terminal++
	}
	return c
}

// EvaluateDeps applies a trigger rule to the states of a task's upstream
// tasks. Verdicts are reached as early as the rule allows ("as soon as" one
// upstream success, failure or skip decides it), so a downstream task moves
// the moment its outcome is certain instead of waiting for slow siblings.
//
// A task with no upstream tasks is met under every rule. Whenever every
// upstream task is terminal, every rule gives a verdict other than DepsWait:
// that is what makes a valid DAG free of deadlocks. An unknown rule gives
// DepsWait (it must never let a task run); ValidateDAG refuses such rules, and
// a run that carries one anyway ends as a detected deadlock, not silently.
func EvaluateDeps(rule TriggerRule, upstream []InstanceState) DepVerdict {
	if len(upstream) == 0 {
		if rule.Valid() {
			return DepsMet
		}
		return DepsWait
	}
	c := countUpstream(upstream)
	allDone := c.terminal == c.total
	switch rule.Effective() {
	case RuleAllSuccess:
		// Failure takes precedence over skip: a task with one failed and one
		// skipped upstream is UPSTREAM_FAILED, so the failure reaches the
		// leaves and the run.
		if c.failed > 0 || c.cancelled > 0 {
			return DepsUpstreamFailed
		}
		if c.skipped > 0 {
			return DepsSkip
		}
		if c.succeeded == c.total {
			return DepsMet
		}
	case RuleAllDone:
		if allDone {
			return DepsMet
		}
	case RuleAllFailed:
		// One upstream that did anything but fail makes "all failed"
		// impossible; a cancelled upstream did not fail, so it skips too.
		if c.succeeded > 0 || c.skipped > 0 || c.cancelled > 0 {
			return DepsSkip
		}
		if c.failed == c.total {
			return DepsMet
		}
	case RuleOneSuccess:
		if c.succeeded > 0 {
			return DepsMet
		}
		if allDone {
			if c.skipped == c.total {
				return DepsSkip
			}
			return DepsUpstreamFailed
		}
	case RuleOneFailed:
		if c.failed > 0 {
			return DepsMet
		}
		if allDone {
			return DepsSkip
		}
	case RuleNoneFailed:
		if c.failed > 0 || c.cancelled > 0 {
			return DepsUpstreamFailed
		}
		if allDone {
			return DepsMet
		}
	case RuleNoneFailedMinOneSuccess:
		if c.failed > 0 || c.cancelled > 0 {
			return DepsUpstreamFailed
		}
		if allDone {
			if c.succeeded > 0 {
				return DepsMet
			}
			return DepsSkip
		}
	case RuleAlways:
		return DepsMet
	}
	return DepsWait
}

// TaskNode is one task of a workflow run as the DAG rules see it: its place in
// the graph and its current state.
type TaskNode struct {
	ID        string
	DependsOn []string
	// Rule is the task's trigger rule; empty means all_success.
	Rule TriggerRule
	// Publish marks a task whose success publishes the run's output for
	// other jobs; see DerivePublication.
	Publish bool
	State   InstanceState
	// Started: an attempt of the task was claimed, or an attempt ended
	// (a retry follows), at any time before. A retry waiting in SCHEDULED
	// or QUEUED has started all the same: its run stays RUNNING.
	Started bool
}

// EmptyTaskIDError reports a task without an id, by its position.
type EmptyTaskIDError struct {
	Index int
}

func (e *EmptyTaskIDError) Error() string {
	return fmt.Sprintf("task %d: empty id", e.Index)
}

// DuplicateTaskError reports a task id that appears twice.
type DuplicateTaskError struct {
	Task string
}

func (e *DuplicateTaskError) Error() string {
	return fmt.Sprintf("task %q: duplicate id", e.Task)
}

// UnknownDependencyError reports a dependency on a task the workflow does not
// have.
type UnknownDependencyError struct {
	Task, Dependency string
}

func (e *UnknownDependencyError) Error() string {
	return fmt.Sprintf("task %q: depends on unknown task %q", e.Task, e.Dependency)
}

// SelfDependencyError reports a task that depends on itself.
type SelfDependencyError struct {
	Task string
}

func (e *SelfDependencyError) Error() string {
	return fmt.Sprintf("task %q: depends on itself", e.Task)
}

// DuplicateDependencyError reports a dependency listed twice by one task.
type DuplicateDependencyError struct {
	Task, Dependency string
}

func (e *DuplicateDependencyError) Error() string {
	return fmt.Sprintf("task %q: depends on %q twice", e.Task, e.Dependency)
}

// InvalidTriggerRuleError reports a task whose trigger rule is unknown.
type InvalidTriggerRuleError struct {
	Task string
	Err  *UnknownTriggerRuleError
}

func (e *InvalidTriggerRuleError) Error() string {
	return fmt.Sprintf("task %q: %v", e.Task, e.Err)
}

func (e *InvalidTriggerRuleError) Unwrap() error { return e.Err }

// CycleError reports a dependency cycle. Path lists the tasks in execution
// order (each task is upstream of the next) and repeats the first at the end;
// it starts at the cycle's task that comes first in the definition, so the
// same definition always names the same path.
type CycleError struct {
	Path []string
}

func (e *CycleError) Error() string {
	return "dependency cycle: " + strings.Join(e.Path, " -> ")
}

// ValidateDAG checks that nodes form a DAG the rules can run: non-empty unique
// ids, dependencies that exist, are not the task itself and are not listed
// twice, known trigger rules, and no cycle. A cycle or a missing task would
// leave tasks waiting forever, so they are refused when the job is defined.
//
// It returns the first problem found, checking tasks in input order and each
// task's dependencies in their order, then cycles; the same input always
// gives the same error.
func ValidateDAG(nodes []TaskNode) error {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if n.ID == "" {
			return &EmptyTaskIDError{Index: i}
		}
		if _, dup := index[n.ID]; dup {
			return &DuplicateTaskError{Task: n.ID}
		}
		index[n.ID] = i
	}
	for _, n := range nodes {
		if !n.Rule.Valid() {
			return &InvalidTriggerRuleError{Task: n.ID, Err: &UnknownTriggerRuleError{Rule: string(n.Rule)}}
		}
		seen := make(map[string]bool, len(n.DependsOn))
		for _, d := range n.DependsOn {
			if d == n.ID {
				return &SelfDependencyError{Task: n.ID}
			}
			if _, ok := index[d]; !ok {
				return &UnknownDependencyError{Task: n.ID, Dependency: d}
			}
			if seen[d] {
				return &DuplicateDependencyError{Task: n.ID, Dependency: d}
			}
			seen[d] = true
		}
	}
	if path := findCycle(nodes, index); path != nil {
		return &CycleError{Path: path}
	}
	return nil
}

// findCycle runs a depth-first search along DependsOn edges, starting from
// tasks in input order, and returns the first cycle met in execution order,
// rotated to start at its earliest-defined task. Dependencies must be known
// ids (ValidateDAG checks that first).
func findCycle(nodes []TaskNode, index map[string]int) []string {
	const (
		white = iota // not visited
		grey         // on the current search path
		black        // fully explored, on no cycle
	)
	color := make([]int, len(nodes))
	var stack []int // the current search path; stack[k+1] is a dependency of stack[k]
	var cycle []int
	var visit func(i int) bool
	visit = func(i int) bool {
		color[i] = grey
		stack = append(stack, i)
		for _, d := range nodes[i].DependsOn {
			j := index[d]
			switch color[j] {
			case grey:
				// stack from j to the top is a chain of dependencies that
				// closes back on j.
				for k := len(stack) - 1; k >= 0; k-- {
					if stack[k] == j {
						cycle = append([]int(nil), stack[k:]...)
						break
					}
				}
				return true
			case white:
				if visit(j) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = black
		return false
	}
	for i := range nodes {
		if color[i] == white && visit(i) {
			break
		}
	}
	if cycle == nil {
		return nil
	}
	// cycle runs along DependsOn (downstream to upstream); reverse it into
	// execution order, then rotate it to start at the earliest-defined task.
	for l, r := 0, len(cycle)-1; l < r; l, r = l+1, r-1 {
		cycle[l], cycle[r] = cycle[r], cycle[l]
	}
	first := 0
	for k, i := range cycle {
		if i < cycle[first] {
			first = k
		}
	}
	path := make([]string, 0, len(cycle)+1)
	for k := range cycle {
		path = append(path, nodes[cycle[(first+k)%len(cycle)]].ID)
	}
	return append(path, path[0])
}

// Readiness is the dependency verdict for one CREATED task.
type Readiness struct {
	ID      string
	Rule    TriggerRule
	Verdict DepVerdict
}

// Evaluate gives the dependency verdict of every CREATED task, in input
// order. The scheduler calls it whenever a task of the run reaches a terminal
// state, and moves each task whose verdict is not DepsWait (see
// DepVerdict.Target) at once, so downstream tasks never wait for a polling
// cycle. Verdicts read only the current states: a task moved to SKIPPED or
// UPSTREAM_FAILED is itself terminal, so the scheduler calls Evaluate again
// until nothing moves, and the outcome ripples down the graph.
//
// Tasks in any other state are left out: only CREATED tasks are waiting on
// their dependencies. A dependency on an unknown task counts as not finished
// (ValidateDAG refuses such a graph).
func Evaluate(nodes []TaskNode) []Readiness {
	index := indexNodes(nodes)
	var out []Readiness
	var upstream []InstanceState
	for _, n := range nodes {
		if n.State != StateCreated {
			continue
		}
		upstream = upstreamStates(nodes, index, n, upstream[:0])
		out = append(out, Readiness{ID: n.ID, Rule: n.Rule.Effective(), Verdict: EvaluateDeps(n.Rule, upstream)})
	}
	return out
}

func indexNodes(nodes []TaskNode) map[string]int {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if _, dup := index[n.ID]; !dup {
			index[n.ID] = i
		}
	}
	return index
}

func upstreamStates(nodes []TaskNode, index map[string]int, n TaskNode, buf []InstanceState) []InstanceState {
	for _, d := range n.DependsOn {
		if j, ok := index[d]; ok {
			buf = append(buf, nodes[j].State)
		} else {
			buf = append(buf, "")
		}
	}
	return buf
}

// RunState is the execution state of a workflow run. It is always derived
// from the run's tasks by DeriveRunState and never written by hand, so the run
// can never say something its tasks do not.
type RunState string

const (
	// RunQueued: no task has started yet; every task is CREATED, SCHEDULED,
	// QUEUED or PAUSED and none ever started. It keeps queue wait apart from run time at the run
	// level, as attempts do at the task level.
	RunQueued RunState = "QUEUED"
	// RunRunning: some task has started and the run is not finished.
	RunRunning RunState = "RUNNING"
	// RunSucceeded: nothing unfinished and every leaf SUCCEEDED or SKIPPED.
	RunSucceeded RunState = "SUCCEEDED"
	// RunFailed: nothing unfinished and a leaf FAILED or UPSTREAM_FAILED, or
	// a deadlock (unfinished tasks of which none can ever run).
	RunFailed RunState = "FAILED"
	// RunCancelled: nothing unfinished, a leaf CANCELLED and none failed.
	RunCancelled RunState = "CANCELLED"
)

// AllRunStates lists every run execution state.
func AllRunStates() []RunState {
	return []RunState{RunQueued, RunRunning, RunSucceeded, RunFailed, RunCancelled}
}

// Valid reports whether s is one of AllRunStates.
func (s RunState) Valid() bool {
	for _, k := range AllRunStates() {
		if k == s {
			return true
		}
	}
	return false
}

// Terminal reports whether the run is finished. A finished run's state can
// still change if an operator overrides one of its tasks, because it is
// derived; no automatic event changes it.
func (s RunState) Terminal() bool {
	switch s {
	case RunSucceeded, RunFailed, RunCancelled:
		return true
	}
	return false
}

// Status maps the run state to the coarse compat status.
func (s RunState) Status() Status {
	switch s {
	case RunQueued:
		return StatusPending
	case RunRunning:
		return StatusRunning
	case RunSucceeded:
		return StatusSucceeded
	case RunFailed:
		return StatusFailed
	case RunCancelled:
		return StatusCancelled
	}
	return ""
}

// RunDerivation is the run state derived from its tasks, with what it was
// derived from.
type RunDerivation struct {
	State RunState
	// Deadlocked: tasks are unfinished but none of them can ever run; the
	// run is FAILED so it does not sit RUNNING forever.
	Deadlocked bool
	// Leaves are the ids of the tasks no other task depends on, in input
	// order; a finished run's outcome is theirs.
	Leaves []string
	// Stuck lists the tasks that will never run when Deadlocked, in input
	// order; empty otherwise.
	Stuck []string
	// Started: a task has started (by the rule that tells QUEUED from
	// RUNNING below), whatever State says. A store that keeps a run
	// QUEUED until it ends shows it RUNNING from this.
	Started bool
}

// DeriveRunState computes a run's execution state from its tasks, following
// Airflow's DagRun.update_state:
//
//   - No unfinished task: FAILED if any leaf is FAILED or UPSTREAM_FAILED,
//     else CANCELLED if any leaf is CANCELLED, else SUCCEEDED (every leaf
//     SUCCEEDED or SKIPPED). Only leaves count: a failure handled by a
//     downstream task (an all_done cleanup, a one_failed branch) does not fail
//     the run, while an unhandled failure reaches a leaf as UPSTREAM_FAILED
//     through the default rule. A run without tasks has nothing to do and is
//     SUCCEEDED.
//   - Unfinished tasks, all CREATED, and Evaluate gives DepsWait for every one
//     of them: nothing is runnable and nothing will become runnable, so the run
//     is FAILED with Deadlocked set. Any task in another unfinished state
//     (SCHEDULED, QUEUED, RUNNING, UP_FOR_RETRY, LOST, CANCELLING, PAUSED)
//     will still progress, so it rules a deadlock out. A graph that passed
//     ValidateDAG never deadlocks: its earliest unfinished task has only
//     terminal upstream tasks, and every rule decides on those.
//   - Otherwise QUEUED while every task is CREATED, SCHEDULED, QUEUED or
//     PAUSED and none of them ever started (TaskNode.Started), else RUNNING.
//     A task that is terminal already counts as started, and so does one
//     whose retry waits in SCHEDULED or QUEUED: once a task has started,
//     the run stays RUNNING until it ends.
//
// LOST and CANCELLING are unfinished: the outcome of their work is not yet
// known, so the run cannot be finished.
func DeriveRunState(nodes []TaskNode) RunDerivation {
	var d RunDerivation
	dependedOn := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		for _, dep := range n.DependsOn {
			dependedOn[dep] = true
		}
	}
	unfinished, created, started := 0, 0, false
	for _, n := range nodes {
		if !dependedOn[n.ID] {
			d.Leaves = append(d.Leaves, n.ID)
		}
		if !n.State.Terminal() {
			// Anything that is not a terminal state, even a value that is
			// not a state, keeps the run from finishing.
			unfinished++
		}
		switch n.State {
		case StateCreated:
			created++
		case StateScheduled, StateQueued, StatePaused:
			// Waiting to start, unless an earlier attempt started: a
			// re-queued retry never takes its run back to QUEUED.
			started = started || n.Started
		default:
			started = true
		}
	}
	d.Started = started

	if unfinished == 0 {
		d.State = RunSucceeded
		failed, cancelled := false, false
		for _, n := range nodes {
			if dependedOn[n.ID] {
				continue
			}
			switch n.State {
			case StateFailed, StateUpstreamFailed:
				failed = true
			case StateCancelled:
				cancelled = true
			}
		}
		switch {
		case failed:
			d.State = RunFailed
		case cancelled:
			d.State = RunCancelled
		}
		return d
	}

	if created == unfinished {
		deadlocked := true
		for _, r := range Evaluate(nodes) {
			if r.Verdict != DepsWait {
				deadlocked = false
				break
			}
		}
		if deadlocked {
			d.State = RunFailed
			d.Deadlocked = true
			for _, n := range nodes {
				if n.State == StateCreated {
					d.Stuck = append(d.Stuck, n.ID)
				}
			}
			return d
		}
	}

	if started {
		d.State = RunRunning
	} else {
		d.State = RunQueued
	}
	return d
}

// PublicationState tracks whether a run published its output, apart from its
// execution state. A run can execute SUCCEEDED while its publish task was
// skipped or failed under a leaf rule that still succeeds; downstream jobs
// that need the output must see that, so they read this state, not the
// execution state.
type PublicationState string

const (
	// PublicationNotRequired: no task of the run publishes.
	PublicationNotRequired PublicationState = "NOT_REQUIRED"
	// PublicationPending: a publish task has not finished yet.
	PublicationPending PublicationState = "PENDING"
	// PublicationPublished: every publish task SUCCEEDED.
	PublicationPublished PublicationState = "PUBLISHED"
	// PublicationFailed: a publish task ended without succeeding (FAILED,
	// UPSTREAM_FAILED, CANCELLED or SKIPPED).
	PublicationFailed PublicationState = "PUBLISH_FAILED"
)

// AllPublicationStates lists every publication state.
func AllPublicationStates() []PublicationState {
	return []PublicationState{PublicationNotRequired, PublicationPending, PublicationPublished, PublicationFailed}
}

// DerivePublication computes a run's publication state from its publish
// tasks. PUBLISH_FAILED is reported as soon as one publish task ends without
// success, even while others still run: a partial publication is not a
// publication, and an operator should learn of it at once. Like the run
// state it is derived, so an operator override of the publish task to
// SUCCEEDED makes the run PUBLISHED.
func DerivePublication(nodes []TaskNode) PublicationState {
	publish, succeeded := 0, 0
	for _, n := range nodes {
		if !n.Publish {
			continue
		}
		publish++
		switch {
		case n.State == StateSucceeded:
			succeeded++
		case n.State.Terminal():
			return PublicationFailed
		}
	}
	switch {
	case publish == 0:
		return PublicationNotRequired
	case succeeded == publish:
		return PublicationPublished
	}
	return PublicationPending
}

// Requirement is what a job's dependency on another job's run asks of that
// run (depends_on_jobs[].require).
type Requirement string

const (
	// RequirePublished: the upstream run's output must be published. It is
	// the requirement for consuming data: execution success alone may hide
	// a skipped or failed publish task.
	RequirePublished Requirement = "published"
	// RequireSucceeded: the upstream run must have executed successfully,
	// whatever its publication.
	RequireSucceeded Requirement = "succeeded"
)

// AllRequirements lists every cross-job requirement.
func AllRequirements() []Requirement {
	return []Requirement{RequirePublished, RequireSucceeded}
}

// UnknownRequirementError reports a require value that is not one of
// AllRequirements.
type UnknownRequirementError struct {
	Requirement string
}

func (e *UnknownRequirementError) Error() string {
	return fmt.Sprintf("unknown requirement %q", e.Requirement)
}

// ParseRequirement turns a definition's require into a Requirement.
func ParseRequirement(s string) (Requirement, error) {
	for _, r := range AllRequirements() {
		if string(r) == s {
			return r, nil
		}
	}
	return "", &UnknownRequirementError{Requirement: s}
}

// DependencySatisfied reports whether an upstream run in execution state exec
// and publication state pub satisfies req.
//
// "published" is satisfied only by PUBLISHED, or by an execution SUCCEEDED
// when the upstream job publishes nothing (NOT_REQUIRED): a job without a
// publish task publishes by succeeding. A PUBLISHED run satisfies it even if
// a later leaf (say, a cleanup) failed the run, because the output was
// published. "succeeded" needs execution SUCCEEDED. An unknown requirement is
// never satisfied.
func DependencySatisfied(req Requirement, exec RunState, pub PublicationState) bool {
	switch req {
	case RequirePublished:
		return pub == PublicationPublished || (pub == PublicationNotRequired && exec == RunSucceeded)
	case RequireSucceeded:
		return exec == RunSucceeded
	}
	return false
}
