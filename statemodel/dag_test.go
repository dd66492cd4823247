package statemodel

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// Shorthand for upstream states in the rule tables.
const (
	cr = StateCreated
	sc = StateScheduled
	ru = StateRunning
	rt = StateUpForRetry
	ok = StateSucceeded
	fa = StateFailed
	uf = StateUpstreamFailed
	ca = StateCancelled
	sk = StateSkipped
)

func states(s ...InstanceState) []InstanceState { return s }

func TestTriggerRuleParse(t *testing.T) {
	t.Parallel()
	for _, r := range AllTriggerRules() {
		got, err := ParseTriggerRule(string(r))
		if err != nil || got != r {
			t.Errorf("ParseTriggerRule(%q) = %q, %v; want %q, nil", r, got, err, r)
		}
		if !r.Valid() || r.Effective() != r {
			t.Errorf("%q: Valid=%v Effective=%q", r, r.Valid(), r.Effective())
		}
	}
	if got, err := ParseTriggerRule(""); err != nil || got != RuleAllSuccess {
		t.Errorf(`ParseTriggerRule("") = %q, %v; want all_success`, got, err)
	}
	if TriggerRule("").Effective() != RuleAllSuccess {
		t.Errorf("empty rule is not all_success")
	}
	for _, bad := range []string{"all-success", "ALL_SUCCESS", "sometimes", " "} {
		_, err := ParseTriggerRule(bad)
		var ue *UnknownTriggerRuleError
		if !errors.As(err, &ue) || ue.Rule != bad {
			t.Errorf("ParseTriggerRule(%q) error = %v; want *UnknownTriggerRuleError", bad, err)
		}
		if TriggerRule(bad).Valid() {
			t.Errorf("%q is Valid", bad)
		}
	}
	if n := len(AllTriggerRules()); n != 8 {
		t.Errorf("AllTriggerRules has %d rules, want 8", n)
	}
}

func TestEvaluateDeps(t *testing.T) {
	t.Parallel()
	W, M, K, U := DepsWait, DepsMet, DepsSkip, DepsUpstreamFailed
	type row struct {
		up   []InstanceState
		want DepVerdict
	}
	table := map[TriggerRule][]row{
		RuleAllSuccess: {
			{nil, M},
			{states(ok), M},
			{states(ok, ok, ok), M},
			{states(ok, ru), W},
			{states(cr), W},
			{states(ok, rt), W},
			{states(fa), U},
			{states(fa, ru), U}, // as soon as
			{states(uf, ok), U},
			{states(ca, ok), U},
			{states(sk), K},
			{states(sk, ru), K}, // as soon as
			{states(sk, ok), K},
			{states(sk, fa), U}, // failure wins over skip
			{states(sk, ca), U},
		},
		RuleAllDone: {
			{nil, M},
			{states(ok, fa, uf, ca, sk), M},
			{states(fa), M},
			{states(sk), M},
			{states(fa, ru), W},
			{states(ok, sc), W},
			{states(cr), W},
		},
		RuleAllFailed: {
			{nil, M},
			{states(fa), M},
			{states(fa, uf), M},
			{states(fa, ru), W},
			{states(ok), K},
			{states(ok, ru), K}, // as soon as
			{states(sk, fa), K},
			{states(ca, fa), K}, // a cancel is not a failure
			{states(cr, cr), W},
		},
		RuleOneSuccess: {
			{nil, M},
			{states(ok), M},
			{states(ok, ru, cr), M}, // as soon as
			{states(fa, ok), M},
			{states(fa, ru), W},
			{states(fa, uf), U},
			{states(sk, sk), K},
			{states(sk, fa), U},
			{states(sk, ca), U},
			{states(ca), U},
			{states(sk, ru), W},
		},
		RuleOneFailed: {
			{nil, M},
			{states(fa), M},
			{states(uf), M},
			{states(fa, ru), M}, // as soon as
			{states(ok, ru), W},
			{states(ok, ok), K},
			{states(ok, sk), K},
			{states(ca), K}, // a cancel does not fire failure handlers
			{states(ca, ok, sk), K},
			{states(cr), W},
		},
		RuleNoneFailed: {
			{nil, M},
			{states(ok, ok), M},
			{states(ok, sk), M},
			{states(sk, sk), M}, // skips are allowed
			{states(ok, ru), W},
			{states(fa, ru), U}, // as soon as
			{states(uf, ok), U},
			{states(ca, ok), U}, // CANCELLED counts as failed
			{states(sk, cr), W},
		},
		RuleNoneFailedMinOneSuccess: {
			{nil, M},
			{states(ok), M},
			{states(ok, sk), M},
			{states(sk, sk), K},
			{states(sk), K},
			{states(sk, ru), W},
			{states(ok, ru), W},
			{states(fa, ru), U},
			{states(uf, ok), U},
			{states(ca, sk), U},
		},
		RuleAlways: {
			{nil, M},
			{states(cr, ru), M},
			{states(fa, uf, ca), M},
			{states(sk), M},
		},
	}
	for _, rule := range AllTriggerRules() {
		rows := table[rule]
		if len(rows) == 0 {
			t.Errorf("no rows for rule %q", rule)
		}
		for _, r := range rows {
			t.Run(fmt.Sprintf("%s/%v", rule, r.up), func(t *testing.T) {
				if got := EvaluateDeps(rule, r.up); got != r.want {
					t.Errorf("EvaluateDeps(%s, %v) = %v, want %v", rule, r.up, got, r.want)
				}
			})
		}
	}
	t.Run("empty rule is all_success", func(t *testing.T) {
		for _, r := range table[RuleAllSuccess] {
			if got := EvaluateDeps("", r.up); got != r.want {
				t.Errorf(`EvaluateDeps("", %v) = %v, want %v`, r.up, got, r.want)
			}
		}
	})
	t.Run("unknown rule never runs", func(t *testing.T) {
		for _, up := range [][]InstanceState{nil, states(ok), states(fa, sk)} {
			if got := EvaluateDeps("sometimes", up); got != DepsWait {
				t.Errorf("EvaluateDeps(sometimes, %v) = %v, want wait", up, got)
			}
		}
	})
}

// combos returns every sequence of length 1..maxLen over alphabet.
func combos(alphabet []InstanceState, maxLen int) [][]InstanceState {
	var out [][]InstanceState
	level := [][]InstanceState{nil}
	for n := 1; n <= maxLen; n++ {
		var next [][]InstanceState
		for _, prefix := range level {
			for _, s := range alphabet {
				next = append(next, append(slices.Clone(prefix), s))
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

// Whatever the mix of terminal upstream states, every rule decides: this is
// what keeps a valid DAG from deadlocking.
func TestEvaluateDepsDecidesOnceUpstreamTerminal(t *testing.T) {
	t.Parallel()
	terminal := []InstanceState{ok, fa, uf, ca, sk}
	for _, rule := range AllTriggerRules() {
		for _, up := range combos(terminal, 4) {
			if got := EvaluateDeps(rule, up); got == DepsWait {
				t.Errorf("EvaluateDeps(%s, %v) = wait with every upstream terminal", rule, up)
			}
		}
	}
}

// The verdict reads the upstream as a set of outcomes: their order must not
// matter. An early verdict (reached with some upstream unfinished) must be
// one the rule can still give once they finish, or the scheduler would act on
// a decision the final states contradict in kind.
func TestEvaluateDepsOrderFreeAndEarlyVerdictsConsistent(t *testing.T) {
	t.Parallel()
	terminal := []InstanceState{ok, fa, uf, ca, sk}
	for _, rule := range AllTriggerRules() {
		for _, up := range combos(AllStates(), 3) {
			v := EvaluateDeps(rule, up)
			rev := slices.Clone(up)
			slices.Reverse(rev)
			if got := EvaluateDeps(rule, rev); got != v {
				t.Errorf("%s: %v gives %v but %v gives %v", rule, up, v, rev, got)
			}
			if v == DepsWait {
				continue
			}
			// Complete the unfinished upstream every possible way; the early
			// verdict must equal at least one completed verdict.
			var open []int
			for i, s := range up {
				if !s.Terminal() {
					open = append(open, i)
				}
			}
			if len(open) == 0 {
				continue
			}
			reachable := false
			for _, fill := range combos(terminal, len(open)) {
				if len(fill) != len(open) {
					continue
				}
				done := slices.Clone(up)
				for k, i := range open {
					done[i] = fill[k]
				}
				if EvaluateDeps(rule, done) == v {
					reachable = true
					break
				}
			}
			if !reachable {
				t.Errorf("%s: early verdict %v for %v is never the verdict once upstream finishes", rule, v, up)
			}
		}
	}
}

func TestDepVerdictTarget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		v    DepVerdict
		to   InstanceState
		move bool
		name string
	}{
		{DepsWait, "", false, "wait"},
		{DepsMet, StateScheduled, true, "met"},
		{DepsSkip, StateSkipped, true, "skip"},
		{DepsUpstreamFailed, StateUpstreamFailed, true, "upstream_failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			to, move := c.v.Target()
			if to != c.to || move != c.move || c.v.String() != c.name {
				t.Errorf("%v: Target = %q, %v; String = %q", c.v, to, move, c.v.String())
			}
		})
	}
	var zero DepVerdict
	if zero != DepsWait {
		t.Errorf("zero DepVerdict is %v, want wait", zero)
	}
}

// node builds a TaskNode: "id<-a,b" depends on a and b.
func node(spec string, state InstanceState) TaskNode {
	id, deps, _ := strings.Cut(spec, "<-")
	n := TaskNode{ID: id, State: state}
	if deps != "" {
		n.DependsOn = strings.Split(deps, ",")
	}
	return n
}

func withRule(n TaskNode, r TriggerRule) TaskNode { n.Rule = r; return n }
func publishing(n TaskNode) TaskNode              { n.Publish = true; return n }
func started(n TaskNode) TaskNode                 { n.Started = true; return n }

func TestValidateDAG(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		nodes []TaskNode
		check func(error) bool
		msg   string
	}{
		{"valid diamond", []TaskNode{node("a", cr), node("b<-a", cr), node("c<-a", cr), node("d<-b,c", cr)}, nil, ""},
		{"empty", nil, nil, ""},
		{"empty id", []TaskNode{node("a", cr), node("", cr)},
			func(err error) bool { var e *EmptyTaskIDError; return errors.As(err, &e) && e.Index == 1 },
			"task 1: empty id"},
		{"duplicate id", []TaskNode{node("a", cr), node("b<-a", cr), node("a", cr)},
			func(err error) bool { var e *DuplicateTaskError; return errors.As(err, &e) && e.Task == "a" },
			`task "a": duplicate id`},
		{"unknown dependency", []TaskNode{node("a", cr), node("b<-a,ghost", cr)},
			func(err error) bool {
				var e *UnknownDependencyError
				return errors.As(err, &e) && e.Task == "b" && e.Dependency == "ghost"
			},
			`task "b": depends on unknown task "ghost"`},
		{"self dependency", []TaskNode{node("a", cr), node("b<-a,b", cr)},
			func(err error) bool { var e *SelfDependencyError; return errors.As(err, &e) && e.Task == "b" },
			`task "b": depends on itself`},
		{"duplicate dependency", []TaskNode{node("a", cr), node("b<-a,a", cr)},
			func(err error) bool {
				var e *DuplicateDependencyError
				return errors.As(err, &e) && e.Task == "b" && e.Dependency == "a"
			},
			`task "b": depends on "a" twice`},
		{"unknown rule", []TaskNode{node("a", cr), withRule(node("b<-a", cr), "sometimes")},
			func(err error) bool {
				var e *InvalidTriggerRuleError
				var u *UnknownTriggerRuleError
				return errors.As(err, &e) && e.Task == "b" && errors.As(err, &u) && u.Rule == "sometimes"
			},
			`task "b": unknown trigger rule "sometimes"`},
		{"three-task cycle", []TaskNode{node("a<-c", cr), node("b<-a", cr), node("c<-b", cr)},
			cyclePath("a", "b", "c", "a"), "dependency cycle: a -> b -> c -> a"},
		{"cycle found from a later task starts at its first-defined task", []TaskNode{node("root", cr), node("x<-root", cr), node("z<-y", cr), node("y<-z,x", cr)},
			cyclePath("z", "y", "z"), "dependency cycle: z -> y -> z"},
		{"cycle behind a valid prefix", []TaskNode{node("d<-c", cr), node("a", cr), node("c<-b", cr), node("b<-a,c", cr)},
			cyclePath("c", "b", "c"), "dependency cycle: c -> b -> c"},
		{"two-task cycle", []TaskNode{node("a<-b", cr), node("b<-a", cr)},
			cyclePath("a", "b", "a"), "dependency cycle: a -> b -> a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateDAG(c.nodes)
			if c.check == nil {
				if err != nil {
					t.Fatalf("ValidateDAG = %v, want nil", err)
				}
				return
			}
			if err == nil || !c.check(err) {
				t.Fatalf("ValidateDAG = %#v (%v), wrong error", err, err)
			}
			if err.Error() != c.msg {
				t.Errorf("message %q, want %q", err.Error(), c.msg)
			}
			// Deterministic: the same input names the same problem.
			for range 5 {
				if again := ValidateDAG(c.nodes); again == nil || again.Error() != err.Error() {
					t.Fatalf("second call gave %v, first %v", again, err)
				}
			}
		})
	}
}

func cyclePath(path ...string) func(error) bool {
	return func(err error) bool {
		var e *CycleError
		return errors.As(err, &e) && slices.Equal(e.Path, path)
	}
}

func TestEvaluateReportsCreatedTasksInOrder(t *testing.T) {
	t.Parallel()
	nodes := []TaskNode{
		node("a", ok),
		node("late<-b", cr),
		node("b<-a", ru),
		node("c<-a", cr),
		withRule(node("alert<-a", cr), RuleOneFailed),
		node("d<-a", sc), // not CREATED: left out
		withRule(node("x<-ghost", cr), RuleAllDone),
	}
	got := Evaluate(nodes)
	want := []Readiness{
		{ID: "late", Rule: RuleAllSuccess, Verdict: DepsWait},
		{ID: "c", Rule: RuleAllSuccess, Verdict: DepsMet},
		{ID: "alert", Rule: RuleOneFailed, Verdict: DepsSkip},
		{ID: "x", Rule: RuleAllDone, Verdict: DepsWait}, // unknown upstream is not finished
	}
	if !slices.Equal(got, want) {
		t.Errorf("Evaluate = %+v\nwant       %+v", got, want)
	}
	if got := Evaluate([]TaskNode{node("a", ok)}); len(got) != 0 {
		t.Errorf("Evaluate with no CREATED task = %+v", got)
	}
}

// applyOnce moves every CREATED task whose verdict is decided, as the
// scheduler does after each Evaluate, and returns the ids moved.
func applyOnce(nodes []TaskNode) []string {
	var moved []string
	pos := map[string]int{}
	for i, n := range nodes {
		pos[n.ID] = i
	}
	for _, r := range Evaluate(nodes) {
		if to, move := r.Verdict.Target(); move {
			nodes[pos[r.ID]].State = to
			moved = append(moved, r.ID+"="+string(to))
		}
	}
	return moved
}

func set(nodes []TaskNode, id string, s InstanceState) {
	for i := range nodes {
		if nodes[i].ID == id {
			nodes[i].State = s
			return
		}
	}
	panic("no task " + id)
}

func stateOf(nodes []TaskNode, id string) InstanceState {
	for _, n := range nodes {
		if n.ID == id {
			return n.State
		}
	}
	return ""
}

func TestEvaluateUpstreamFailurePropagatesStepByStep(t *testing.T) {
	t.Parallel()
	nodes := []TaskNode{node("a", ru), node("b<-a", cr), node("c<-b", cr), node("d<-c", cr)}
	if err := ValidateDAG(nodes); err != nil {
		t.Fatal(err)
	}
	if m := applyOnce(nodes); len(m) != 0 {
		t.Fatalf("moved %v while a runs", m)
	}
	set(nodes, "a", fa)
	steps := [][]string{{"b=UPSTREAM_FAILED"}, {"c=UPSTREAM_FAILED"}, {"d=UPSTREAM_FAILED"}, nil}
	for i, want := range steps {
		if got := applyOnce(nodes); !slices.Equal(got, want) {
			t.Fatalf("step %d moved %v, want %v", i+1, got, want)
		}
		if i < 2 {
			if d := DeriveRunState(nodes); d.State != RunRunning || d.Deadlocked {
				t.Fatalf("step %d: run %+v mid-propagation, want RUNNING", i+1, d)
			}
		}
	}
	d := DeriveRunState(nodes)
	if d.State != RunFailed || d.Deadlocked || !slices.Equal(d.Leaves, []string{"d"}) {
		t.Errorf("run = %+v, want FAILED via leaf d", d)
	}
}

func TestRunCleanupWithAllDoneRunsAfterFailure(t *testing.T) {
	t.Parallel()
	// The shape of the API's example job: cleanup runs whatever load did;
	// publish needs load.
	nodes := []TaskNode{
		node("extract", ok),
		node("load<-extract", ru),
		withRule(node("cleanup<-load", cr), RuleAllDone),
		publishing(node("publish<-load", cr)),
	}
	set(nodes, "load", fa)
	if got, want := applyOnce(nodes), []string{"cleanup=SCHEDULED", "publish=UPSTREAM_FAILED"}; !slices.Equal(got, want) {
		t.Fatalf("after load failed moved %v, want %v", got, want)
	}
	if d := DeriveRunState(nodes); d.State != RunRunning {
		t.Fatalf("run while cleanup is scheduled = %+v, want RUNNING", d)
	}
	if p := DerivePublication(nodes); p != PublicationFailed {
		t.Errorf("publication = %s, want PUBLISH_FAILED", p)
	}
	set(nodes, "cleanup", ru)
	set(nodes, "cleanup", ok)
	d := DeriveRunState(nodes)
	if d.State != RunFailed || !slices.Equal(d.Leaves, []string{"cleanup", "publish"}) {
		t.Errorf("run = %+v, want FAILED: the publish leaf is UPSTREAM_FAILED", d)
	}
}

func TestRunSkippedBranches(t *testing.T) {
	t.Parallel()
	// work succeeds: the failure branch (one_failed) is skipped, its own
	// downstream is skipped with it, and the join (none_failed) still runs.
	nodes := []TaskNode{
		node("work", ru),
		withRule(node("alert<-work", cr), RuleOneFailed),
		node("page<-alert", cr),
		node("report<-work", cr),
		withRule(node("join<-page,report", cr), RuleNoneFailed),
	}
	set(nodes, "work", ok)
	var moved []string
	for {
		m := applyOnce(nodes)
		if len(m) == 0 {
			break
		}
		moved = append(moved, m...)
	}
	want := []string{"alert=SKIPPED", "report=SCHEDULED", "page=SKIPPED"}
	if !slices.Equal(moved, want) {
		t.Fatalf("moved %v, want %v", moved, want)
	}
	if stateOf(nodes, "join") != cr {
		t.Fatalf("join moved before report finished")
	}
	set(nodes, "report", ok)
	if got := applyOnce(nodes); !slices.Equal(got, []string{"join=SCHEDULED"}) {
		t.Fatalf("moved %v, want join scheduled", got)
	}
	set(nodes, "join", ok)
	if d := DeriveRunState(nodes); d.State != RunSucceeded || !slices.Equal(d.Leaves, []string{"join"}) {
		t.Errorf("run = %+v, want SUCCEEDED", d)
	}

	// A skipped branch as a leaf does not fail the run either.
	leafSkip := []TaskNode{node("work", ok), withRule(node("alert<-work", sk), RuleOneFailed), node("report<-work", ok)}
	if d := DeriveRunState(leafSkip); d.State != RunSucceeded {
		t.Errorf("run with a skipped leaf branch = %+v, want SUCCEEDED", d)
	}
}

func TestDeriveRunState(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		nodes      []TaskNode
		want       RunState
		deadlocked bool
		leaves     []string
		stuck      []string
	}{
		{"no tasks: nothing to do", nil, RunSucceeded, false, nil, nil},
		{"all created", []TaskNode{node("a", cr), node("b<-a", cr)}, RunQueued, false, []string{"b"}, nil},
		{"scheduled and queued", []TaskNode{node("a", sc), node("b", StateQueued), node("c<-a,b", cr)}, RunQueued, false, []string{"c"}, nil},
		{"all paused", []TaskNode{node("a", StatePaused), node("b<-a", StatePaused)}, RunQueued, false, []string{"b"}, nil},
		{"one running", []TaskNode{node("a", ru), node("b<-a", cr)}, RunRunning, false, []string{"b"}, nil},
		{"up for retry has started", []TaskNode{node("a", rt), node("b<-a", cr)}, RunRunning, false, []string{"b"}, nil},
		{"a re-queued retry keeps the run running", []TaskNode{started(node("a", StateQueued)), node("b<-a", cr)}, RunRunning, false, []string{"b"}, nil},
		{"a rescheduled retry keeps the run running", []TaskNode{started(node("a", sc)), node("b", StateQueued)}, RunRunning, false, []string{"a", "b"}, nil},
		{"a paused retry keeps the run running", []TaskNode{started(node("a", StatePaused))}, RunRunning, false, []string{"a"}, nil},
		{"a finished task counts as started", []TaskNode{node("a", ok), node("b<-a", sc)}, RunRunning, false, []string{"b"}, nil},
		{"lost is unfinished", []TaskNode{node("a", ok), node("b<-a", StateLost)}, RunRunning, false, []string{"b"}, nil},
		{"cancelling is unfinished", []TaskNode{node("a", ok), node("b<-a", StateCancelling)}, RunRunning, false, []string{"b"}, nil},
		{"paused after progress", []TaskNode{node("a", ok), node("b<-a", StatePaused)}, RunRunning, false, []string{"b"}, nil},
		{"all leaves succeeded", []TaskNode{node("a", ok), node("b<-a", ok), node("c<-a", ok)}, RunSucceeded, false, []string{"b", "c"}, nil},
		{"leaf rule: failed non-leaf, all_done cleanup leaf succeeded",
			[]TaskNode{node("a", fa), withRule(node("cleanup<-a", ok), RuleAllDone)}, RunSucceeded, false, []string{"cleanup"}, nil},
		{"leaf rule: failed leaf", []TaskNode{node("a", ok), node("b<-a", fa), node("c<-a", ok)}, RunFailed, false, []string{"b", "c"}, nil},
		{"upstream_failed leaf", []TaskNode{node("a", fa), node("b<-a", uf)}, RunFailed, false, []string{"b"}, nil},
		{"cancelled leaf", []TaskNode{node("a", ok), node("b<-a", ca), node("c<-a", ok)}, RunCancelled, false, []string{"b", "c"}, nil},
		{"failed leaf beats cancelled leaf", []TaskNode{node("a", ok), node("b<-a", ca), node("c<-a", fa)}, RunFailed, false, []string{"b", "c"}, nil},
		{"cancelled non-leaf, all_done leaf succeeded", []TaskNode{node("a", ca), withRule(node("b<-a", ok), RuleAllDone)}, RunSucceeded, false, []string{"b"}, nil},
		{"all leaves skipped", []TaskNode{node("a", ok), withRule(node("b<-a", sk), RuleOneFailed)}, RunSucceeded, false, []string{"b"}, nil},
		{"a failed leaf does not finish a run with work left", []TaskNode{node("a", fa), node("b", ru)}, RunRunning, false, []string{"a", "b"}, nil},
		{"created task ready but not yet moved is no deadlock",
			[]TaskNode{node("a", ok), node("b<-a", cr)}, RunRunning, false, []string{"b"}, nil},
		{"created task about to be skipped is no deadlock",
			[]TaskNode{node("a", ok), withRule(node("b<-a", cr), RuleOneFailed)}, RunRunning, false, []string{"b"}, nil},
		{"deadlock: cycle that bypassed validation",
			[]TaskNode{node("a", ok), node("b<-a,c", cr), node("c<-b", cr), node("d<-c", cr)}, RunFailed, true, []string{"d"}, []string{"b", "c", "d"}},
		{"deadlock: dependency on a task the run does not have",
			[]TaskNode{node("a", ok), node("b<-ghost", cr)}, RunFailed, true, []string{"a", "b"}, []string{"b"}},
		{"deadlock: unknown trigger rule",
			[]TaskNode{node("a", ok), withRule(node("b<-a", cr), "sometimes")}, RunFailed, true, []string{"b"}, []string{"b"}},
		{"no deadlock while a task on the cycle's edge can still progress",
			[]TaskNode{node("a", rt), node("b<-a,c", cr), node("c<-b", cr)}, RunRunning, false, []string{}, nil},
		{"no deadlock while a paused task waits",
			[]TaskNode{node("a", StatePaused), node("b<-c", cr), node("c<-b", cr)}, RunQueued, false, []string{"a"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := DeriveRunState(c.nodes)
			if d.State != c.want || d.Deadlocked != c.deadlocked {
				t.Errorf("DeriveRunState = %s deadlocked=%v, want %s deadlocked=%v", d.State, d.Deadlocked, c.want, c.deadlocked)
			}
			if len(d.Leaves) != len(c.leaves) || !slices.Equal(d.Leaves, c.leaves) {
				t.Errorf("leaves %v, want %v", d.Leaves, c.leaves)
			}
			if !slices.Equal(d.Stuck, c.stuck) {
				t.Errorf("stuck %v, want %v", d.Stuck, c.stuck)
			}
		})
	}
}

// randomDAG builds a valid DAG of n tasks: each task depends on up to three
// earlier ones, with a random rule and an occasional publish flag.
func randomDAG(r *rand.Rand, n int) []TaskNode {
	rules := append(AllTriggerRules(), "")
	nodes := make([]TaskNode, n)
	for i := range nodes {
		nodes[i] = TaskNode{ID: fmt.Sprintf("t%03d", i), Rule: rules[r.IntN(len(rules))], State: cr, Publish: r.IntN(8) == 0}
		if i == 0 {
			continue
		}
		k := r.IntN(min(i, 3) + 1)
		for _, j := range r.Perm(i)[:k] {
			nodes[i].DependsOn = append(nodes[i].DependsOn, nodes[j].ID)
		}
	}
	return nodes
}

// A valid DAG never deadlocks: drive random DAGs to the end, with every
// scheduled task passing through QUEUED and RUNNING to a random outcome, and
// check at every step that the derived run state is not deadlocked, and at
// the end that it follows the leaf rule.
func TestRunValidDAGNeverDeadlocks(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(2, 7))
	outcomes := []InstanceState{ok, ok, ok, fa, ca}
	for trial := range 300 {
		nodes := randomDAG(r, 2+r.IntN(25))
		if err := ValidateDAG(nodes); err != nil {
			t.Fatalf("trial %d: random DAG invalid: %v", trial, err)
		}
		for step := 0; ; step++ {
			d := DeriveRunState(nodes)
			if d.Deadlocked {
				t.Fatalf("trial %d step %d: deadlock in a valid DAG, stuck %v: %+v", trial, step, d.Stuck, nodes)
			}
			if d.State.Terminal() {
				checkLeafRule(t, nodes, d)
				break
			}
			moved := applyOnce(nodes)
			// Advance one task that is in flight.
			var flight []int
			for i, n := range nodes {
				if n.State == sc || n.State == StateQueued || n.State == ru {
					flight = append(flight, i)
				}
			}
			if len(moved) == 0 && len(flight) == 0 {
				t.Fatalf("trial %d step %d: run %s but nothing can move: %+v", trial, step, d.State, nodes)
			}
			if len(flight) > 0 {
				i := flight[r.IntN(len(flight))]
				switch nodes[i].State {
				case sc:
					nodes[i].State = StateQueued
				case StateQueued:
					nodes[i].State = ru
				case ru:
					nodes[i].State = outcomes[r.IntN(len(outcomes))]
				}
			}
		}
	}
}

func checkLeafRule(t *testing.T, nodes []TaskNode, d RunDerivation) {
	t.Helper()
	var failed, cancelled bool
	for _, n := range nodes {
		if !n.State.Terminal() {
			t.Fatalf("run %s with %s in %s", d.State, n.ID, n.State)
		}
		if slices.Contains(d.Leaves, n.ID) {
			failed = failed || n.State == fa || n.State == uf
			cancelled = cancelled || n.State == ca
		}
	}
	want := RunSucceeded
	if failed {
		want = RunFailed
	} else if cancelled {
		want = RunCancelled
	}
	if d.State != want {
		t.Fatalf("run %s, leaf rule says %s: %+v", d.State, want, nodes)
	}
}

func TestRunStateStatusAndTerminal(t *testing.T) {
	t.Parallel()
	want := map[RunState]struct {
		status   Status
		terminal bool
	}{
		RunQueued:    {StatusPending, false},
		RunRunning:   {StatusRunning, false},
		RunSucceeded: {StatusSucceeded, true},
		RunFailed:    {StatusFailed, true},
		RunCancelled: {StatusCancelled, true},
	}
	if len(AllRunStates()) != len(want) {
		t.Fatalf("AllRunStates = %v", AllRunStates())
	}
	for _, s := range AllRunStates() {
		t.Run(string(s), func(t *testing.T) {
			w, listed := want[s]
			if !listed || !s.Valid() || s.Status() != w.status || s.Terminal() != w.terminal {
				t.Errorf("%s: Valid=%v Status=%s Terminal=%v; want %s %v", s, s.Valid(), s.Status(), s.Terminal(), w.status, w.terminal)
			}
		})
	}
	if RunState("DONE").Valid() || RunState("DONE").Status() != "" || RunState("DONE").Terminal() {
		t.Errorf("an unknown run state is valid, mapped or terminal")
	}
}

func TestDerivePublication(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		nodes []TaskNode
		want  PublicationState
	}{
		{"no tasks", nil, PublicationNotRequired},
		{"no publish task", []TaskNode{node("a", ok), node("b<-a", fa)}, PublicationNotRequired},
		{"publish task waiting", []TaskNode{node("a", ru), publishing(node("p<-a", cr))}, PublicationPending},
		{"publish task running", []TaskNode{node("a", ok), publishing(node("p<-a", ru))}, PublicationPending},
		{"publish task lost", []TaskNode{node("a", ok), publishing(node("p<-a", StateLost))}, PublicationPending},
		{"published", []TaskNode{node("a", ok), publishing(node("p<-a", ok))}, PublicationPublished},
		{"all of two published", []TaskNode{publishing(node("p", ok)), publishing(node("q", ok))}, PublicationPublished},
		{"one of two published", []TaskNode{publishing(node("p", ok)), publishing(node("q", ru))}, PublicationPending},
		{"failed", []TaskNode{publishing(node("p", fa))}, PublicationFailed},
		{"upstream failed", []TaskNode{node("a", fa), publishing(node("p<-a", uf))}, PublicationFailed},
		{"cancelled", []TaskNode{publishing(node("p", ca))}, PublicationFailed},
		{"skipped", []TaskNode{publishing(node("p", sk))}, PublicationFailed},
		{"one failed while another runs", []TaskNode{publishing(node("p", fa)), publishing(node("q", ru))}, PublicationFailed},
		{"non-publish failure does not matter", []TaskNode{node("a", fa), publishing(node("p", ok))}, PublicationPublished},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := DerivePublication(c.nodes); got != c.want {
				t.Errorf("DerivePublication = %s, want %s", got, c.want)
			}
		})
	}
	if len(AllPublicationStates()) != 4 {
		t.Errorf("AllPublicationStates = %v", AllPublicationStates())
	}
}

// A run can execute SUCCEEDED while its publication failed: the green run
// must not satisfy a downstream job that needs the published output.
func TestPublicationSeparateFromExecution(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		nodes []TaskNode
	}{
		{"publish task skipped as a leaf", []TaskNode{
			node("check", ok),
			withRule(node("fresh<-check", sk), RuleOneFailed), // skipped branch
			publishing(node("publish<-fresh", sk)),            // all_success after a skip
		}},
		{"publish task failed, all_done leaf succeeded", []TaskNode{
			node("load", ok),
			publishing(node("publish<-load", fa)),
			withRule(node("notify<-publish", ok), RuleAllDone),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := ValidateDAG(c.nodes); err != nil {
				t.Fatal(err)
			}
			exec, pub := DeriveRunState(c.nodes).State, DerivePublication(c.nodes)
			if exec != RunSucceeded || pub != PublicationFailed {
				t.Fatalf("execution %s publication %s, want SUCCEEDED and PUBLISH_FAILED", exec, pub)
			}
			if DependencySatisfied(RequirePublished, exec, pub) {
				t.Errorf("require published satisfied by a run whose publication failed")
			}
			if !DependencySatisfied(RequireSucceeded, exec, pub) {
				t.Errorf("require succeeded not satisfied by a SUCCEEDED run")
			}
		})
	}
}

func TestPublicationDependencySatisfied(t *testing.T) {
	t.Parallel()
	type key struct {
		exec RunState
		pub  PublicationState
	}
	published := map[key]bool{
		{RunSucceeded, PublicationNotRequired}: true,
		{RunSucceeded, PublicationPublished}:   true,
		{RunRunning, PublicationPublished}:     true, // published before a later leaf finished
		{RunFailed, PublicationPublished}:      true, // a cleanup leaf failed after publishing
		{RunQueued, PublicationPublished}:      true,
		{RunCancelled, PublicationPublished}:   true,
	}
	for _, exec := range AllRunStates() {
		for _, pub := range AllPublicationStates() {
			t.Run(string(exec)+"/"+string(pub), func(t *testing.T) {
				if got := DependencySatisfied(RequirePublished, exec, pub); got != published[key{exec, pub}] {
					t.Errorf("published: got %v", got)
				}
				if got := DependencySatisfied(RequireSucceeded, exec, pub); got != (exec == RunSucceeded) {
					t.Errorf("succeeded: got %v", got)
				}
				if DependencySatisfied("ready", exec, pub) {
					t.Errorf("unknown requirement satisfied")
				}
			})
		}
	}
}

func TestRunRequirementParse(t *testing.T) {
	t.Parallel()
	for _, r := range AllRequirements() {
		if got, err := ParseRequirement(string(r)); err != nil || got != r {
			t.Errorf("ParseRequirement(%q) = %q, %v", r, got, err)
		}
	}
	for _, bad := range []string{"", "Published", "done"} {
		_, err := ParseRequirement(bad)
		var ue *UnknownRequirementError
		if !errors.As(err, &ue) || ue.Requirement != bad {
			t.Errorf("ParseRequirement(%q) error = %v", bad, err)
		}
	}
}

// benchDAG is a 200-task DAG in 20 layers of 10; each task depends on up to
// three tasks of the layer above.
func benchDAG(state func(layer int) InstanceState) []TaskNode {
	r := rand.New(rand.NewPCG(1, 1))
	rules := AllTriggerRules()
	var nodes []TaskNode
	for layer := range 20 {
		for k := range 10 {
			n := TaskNode{ID: fmt.Sprintf("l%02d_t%d", layer, k), Rule: rules[r.IntN(len(rules))], State: state(layer), Publish: layer == 19 && k == 0}
			if layer > 0 {
				for _, j := range r.Perm(10)[:1+r.IntN(3)] {
					n.DependsOn = append(n.DependsOn, fmt.Sprintf("l%02d_t%d", layer-1, j))
				}
			}
			nodes = append(nodes, n)
		}
	}
	return nodes
}

func BenchmarkDeriveRunState(b *testing.B) {
	cases := []struct {
		name  string
		state func(int) InstanceState
		want  RunState
	}{
		// Half done, one layer running, the rest waiting: the common case.
		{"200_tasks_mid_run", func(l int) InstanceState {
			switch {
			case l < 10:
				return ok
			case l == 10:
				return ru
			}
			return cr
		}, RunRunning},
		// Every task CREATED: the deadlock check evaluates every task.
		{"200_tasks_all_created", func(int) InstanceState { return cr }, RunQueued},
		{"200_tasks_finished", func(int) InstanceState { return ok }, RunSucceeded},
	}
	for _, c := range cases {
		nodes := benchDAG(c.state)
		if err := ValidateDAG(nodes); err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d := DeriveRunState(nodes); d.State != c.want {
					b.Fatalf("state %s, want %s", d.State, c.want)
				}
			}
		})
	}
}

func BenchmarkEvaluate200(b *testing.B) {
	nodes := benchDAG(func(l int) InstanceState {
		if l < 10 {
			return ok
		}
		return cr
	})
	b.ReportAllocs()
	for b.Loop() {
		if r := Evaluate(nodes); len(r) != 100 {
			b.Fatalf("%d verdicts", len(r))
		}
	}
}

func BenchmarkValidateDAG200(b *testing.B) {
	nodes := benchDAG(func(int) InstanceState { return cr })
	b.ReportAllocs()
	for b.Loop() {
		if err := ValidateDAG(nodes); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSnapshotStarted(t *testing.T) {
	t.Parallel()
	claimed := AttemptRecord{N: 1, StartedAt: time.Unix(1, 0)}
	cases := []struct {
		name string
		s    Snapshot
		want bool
	}{
		{"never dispatched", Snapshot{State: StateCreated}, false},
		{"first attempt queued", Snapshot{State: StateQueued, Attempt: 1, Attempts: []AttemptRecord{{N: 1}}}, false},
		{"first attempt claimed", Snapshot{State: StateRunning, Attempt: 1, Attempts: []AttemptRecord{claimed}}, true},
		{"retry queued after a claimed attempt", Snapshot{State: StateQueued, Attempt: 2, Attempts: []AttemptRecord{claimed, {N: 2}}}, true},
		{"second attempt after a queue timeout", Snapshot{State: StateQueued, Attempt: 2, Attempts: []AttemptRecord{{N: 1}, {N: 2}}}, true},
	}
	for _, c := range cases {
		if got := c.s.Started(); got != c.want {
			t.Errorf("%s: Started() = %t, want %t", c.name, got, c.want)
		}
	}
}
