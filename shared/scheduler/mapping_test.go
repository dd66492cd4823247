package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// drainEnvelopes takes every envelope the pool holds now.
func (f *fixture) drainEnvelopes(t *testing.T) []protocol.Envelope {
	t.Helper()
	var out []protocol.Envelope
	for {
		msgs, err := f.q.Receive(context.Background(), f.pool, queue.ReceiveOptions{MaxMessages: 10, Wait: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return out
		}
		for _, m := range msgs {
			env, err := protocol.ParseEnvelope(m.Body)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, env)
		}
	}
}

// mapDriver works a run's envelopes as a worker pool would, completing
// them in random order, and checks that at most max children are claimed
// and not completed at any time.
type mapDriver struct {
	f        *fixture
	rng      *rand.Rand
	inFlight int
	most     int
	inputs   map[string]map[string]json.RawMessage // task -> its claim's inputs
	complete func(env protocol.Envelope, claim protocol.ClaimAnswer) protocol.Completion
}

func (d *mapDriver) run(t *testing.T, runID string) {
	t.Helper()
	ctx := context.Background()
	var held []protocol.Envelope
	var answers []protocol.ClaimAnswer
	for round := 0; round < 10000; round++ {
		for _, env := range d.f.drainEnvelopes(t) {
			ans, err := d.f.svc.Workers().Claim(ctx, refOf(env), env.Token, "w@boot", fmt.Sprintf("claim-%d", round))
			if err != nil {
				t.Fatalf("claim %s: %v", env.Ref(), err)
			}
			if _, _, child := ledger.ParseChild(env.Task); child {
				d.inFlight++
				d.most = max(d.most, d.inFlight)
			}
			d.inputs[env.Task] = ans.Envelope.Inputs
			held = append(held, env)
			answers = append(answers, ans)
		}
		if len(held) == 0 {
			v, err := d.f.st.ReadRun(ctx, runID)
			if err != nil {
				t.Fatal(err)
			}
			if v.Run.ExecutionState.Terminal() {
				return
			}
			t.Fatalf("run %s is %s with nothing to work on", runID, v.Run.ExecutionState)
		}
		i := d.rng.IntN(len(held))
		env, ans := held[i], answers[i]
		held, answers = append(held[:i], held[i+1:]...), append(answers[:i], answers[i+1:]...)
		c := d.complete(env, ans)
		c.Run, c.Task, c.Attempt, c.EventID = env.Run, env.Task, env.Attempt, fmt.Sprintf("done-%d", round)
		if _, _, child := ledger.ParseChild(env.Task); child {
			d.inFlight--
		}
		if _, err := d.f.svc.Workers().Complete(ctx, c, env.Token); err != nil {
			t.Fatalf("complete %s: %v", env.Ref(), err)
		}
		if d.rng.IntN(4) == 0 {
			// A duplicate delivery of the same completion changes nothing.
			if res, err := d.f.svc.Workers().Complete(ctx, c, env.Token); err != nil || res.Result != string(statemodel.Duplicate) {
				t.Fatalf("duplicate completion of %s: %+v, %v", env.Ref(), res, err)
			}
		}
	}
	t.Fatal("the run did not end")
}

// TestMapFansOutOverAnUpstreamOutput: a map over an upstream task's
// output runs one child per element, with its item and index, never more
// than max_parallel at once, in any completion order; it succeeds with
// one failure tolerated, its counts and output are as the children
// ended, and its downstream task gets the output as its input.
func TestMapFansOutOverAnUpstreamOutput(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			f := newFixture(t)
			f.createJob(t, `{"name":"fan","retry":{"max_attempts":1},"tasks":[
				{"id":"list"},
				{"id":"each","depends_on":["list"],"map":{"over":"{{json .Inputs.list.files}}","max_parallel":3,"tolerated_failures":1}},
				{"id":"sum","depends_on":["each"]}]}`)
			v := f.trigger(t, "fan", time.Time{})
			const n = 25
			files := make([]int, n)
			for i := range files {
				files[i] = i
			}
			d := &mapDriver{f: f, rng: rand.New(rand.NewPCG(seed, 7)), inputs: map[string]map[string]json.RawMessage{}}
			d.complete = func(env protocol.Envelope, ans protocol.ClaimAnswer) protocol.Completion {
				switch env.Task {
				case "list":
					out, _ := json.Marshal(map[string]any{"files": files})
					return protocol.Completion{Outcome: protocol.OutcomeSucceeded, Output: out}
				case "sum":
					return protocol.Completion{Outcome: protocol.OutcomeSucceeded}
				}
				var item int
				if err := json.Unmarshal(ans.Envelope.Item, &item); err != nil || ans.Envelope.Index == nil ||
					*ans.Envelope.Index != item || env.Task != ledger.ChildTask("each", item) {
					t.Fatalf("child %s: item %s, index %v", env.Task, ans.Envelope.Item, ans.Envelope.Index)
				}
				if item == 7 {
					return protocol.Completion{Outcome: protocol.OutcomeFailed, ErrorCategory: "boom", Retryable: new(bool)}
				}
				return protocol.Completion{Outcome: protocol.OutcomeSucceeded, Output: json.RawMessage(fmt.Sprint(item * 2))}
			}
			d.run(t, v.Run.ID)
			if d.most > 3 || d.most < 2 {
				t.Errorf("at most %d children were in flight at once, want 2..3 (max_parallel 3)", d.most)
			}
			view := f.readRun(t, v.Run.ID)
			if view.Run.ExecutionState != statemodel.RunSucceeded {
				t.Errorf("run %s", view.Run.ExecutionState)
			}
			for _, tv := range view.Tasks {
				if tv.Instance.Snapshot.State != statemodel.StateSucceeded {
					t.Errorf("%s is %s", tv.Instance.Key.Task, tv.Instance.Snapshot.State)
				}
			}
			// The map's items expire with its run (its instances' expiry).
			want := ledger.MapState{Run: v.Run.ID, Task: "each", Total: n, Next: n, Succeeded: n - 1, Failed: 1, MaxParallel: 3, Tolerated: 1,
				ExpiresAt: view.Run.ExpiresAt}
			if want.ExpiresAt.IsZero() {
				t.Error("the run has no expiry")
			}
			if got := view.Maps["each"]; got != want {
				t.Errorf("map counts %+v, want %+v", got, want)
			}
			out, truncated, err := f.st.GetMapOutput(context.Background(), v.Run.ID, "each")
			var wantOut []any
			for i := range n {
				if i == 7 {
					wantOut = append(wantOut, nil)
				} else {
					wantOut = append(wantOut, i*2)
				}
			}
			wantJSON, _ := json.Marshal(wantOut)
			if err != nil || truncated || string(out) != string(wantJSON) {
				t.Errorf("map output %s (truncated %v, %v), want %s", out, truncated, err, wantJSON)
			}
			if got := string(d.inputs["sum"]["each"]); got != string(wantJSON) {
				t.Errorf("sum's input from each: %s", got)
			}
			if len(view.Tasks) != 3 {
				t.Errorf("the run reads %d tasks, want its 3 static ones", len(view.Tasks))
			}
		})
	}
}

// TestMapOverEdgeCases: over that is not a JSON array fails the map task
// with invalid_map (and its run); an empty array succeeds at once; more
// failures than tolerated fail it.
func TestMapOverEdgeCases(t *testing.T) {
	for name, c := range map[string]struct {
		over     string
		fail     bool
		state    statemodel.InstanceState
		category string
	}{
		"not an array":        {`{"a":1}`, false, statemodel.StateFailed, "invalid_map"},
		"not json":            {`[1,`, false, statemodel.StateFailed, "invalid_map"},
		"missing input":       {`{{json .Inputs.nothing.x}}`, false, statemodel.StateFailed, "invalid_map"},
		"empty":               {`[]`, false, statemodel.StateSucceeded, ""},
		"too many failures":   {`[1,2]`, true, statemodel.StateFailed, "children_failed"},
		"all children follow": {`[1,2,3]`, false, statemodel.StateSucceeded, ""},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			spec, _ := json.Marshal(map[string]any{"name": "m", "retry": map[string]any{"max_attempts": 1},
				"tasks": []any{map[string]any{"id": "each", "map": map[string]any{"over": c.over, "max_parallel": 2}}}})
			f.createJob(t, string(spec))
			v := f.trigger(t, "m", time.Time{})
			d := &mapDriver{f: f, rng: rand.New(rand.NewPCG(1, 2)), inputs: map[string]map[string]json.RawMessage{}}
			d.complete = func(env protocol.Envelope, ans protocol.ClaimAnswer) protocol.Completion {
				if c.fail {
					return protocol.Completion{Outcome: protocol.OutcomeFailed, ErrorCategory: "boom", Retryable: new(bool)}
				}
				return protocol.Completion{Outcome: protocol.OutcomeSucceeded}
			}
			d.run(t, v.Run.ID)
			inst := f.readRun(t, v.Run.ID).Tasks[0].Instance
			cur, _ := inst.Snapshot.Current()
			if inst.Snapshot.State != c.state || cur.ErrorCategory != c.category {
				t.Errorf("map task %s (%q), want %s (%q)", inst.Snapshot.State, cur.ErrorCategory, c.state, c.category)
			}
		})
	}
}

// TestMapCancelReachesEveryChild: cancelling the run stops the releases
// (the pending children count cancelled), cancels the running children,
// and the map task ends CANCELLED once they acknowledge. In a race of the
// run's cancel with the last child's completion the map task ends exactly
// once, either way.
func TestMapCancelReachesEveryChild(t *testing.T) {
	ctx := context.Background()
	t.Run("running children", func(t *testing.T) {
		f := newFixture(t)
		f.createJob(t, `{"name":"m","retry":{"max_attempts":1},"tasks":[{"id":"each","map":{"over":"[1,2,3,4,5,6,7,8,9,10]","max_parallel":2}}]}`)
		v := f.trigger(t, "m", time.Time{})
		envs := f.drainEnvelopes(t)
		if len(envs) != 2 {
			t.Fatalf("%d children dispatched, want 2", len(envs))
		}
		for i, env := range envs {
			if _, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "w@boot", fmt.Sprintf("c%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.svc.CancelRun(ctx, v.Run.ID, "stop"); err != nil {
			t.Fatal(err)
		}
		for i, env := range envs {
			inst, err := f.st.GetInstance(ctx, ledger.InstanceKey{Run: env.Run, Task: env.Task})
			if err != nil || inst.Snapshot.State != statemodel.StateCancelling {
				t.Fatalf("child %s is %s after the cancel (%v)", env.Task, inst.Snapshot.State, err)
			}
			c := protocol.Completion{Run: env.Run, Task: env.Task, Attempt: env.Attempt, EventID: fmt.Sprintf("ack%d", i), Outcome: protocol.OutcomeCancelled}
			if _, err := f.svc.Workers().Complete(ctx, c, env.Token); err != nil {
				t.Fatal(err)
			}
		}
		view := f.readRun(t, v.Run.ID)
		if st := view.Tasks[0].Instance.Snapshot.State; st != statemodel.StateCancelled || view.Run.ExecutionState != statemodel.RunCancelled {
			t.Errorf("map task %s, run %s", st, view.Run.ExecutionState)
		}
		if m := view.Maps["each"]; m.Cancelled != 10 || m.Running != 0 || m.Next != 10 {
			t.Errorf("counts %+v", m)
		}
		if left := f.drainEnvelopes(t); len(left) != 0 {
			t.Errorf("%d children were dispatched after the cancel", len(left))
		}
	})
	t.Run("racing the last child", func(t *testing.T) {
		for round := range 30 {
			f := newFixture(t)
			f.createJob(t, `{"name":"m","retry":{"max_attempts":1},"tasks":[{"id":"each","map":{"over":"[1]","max_parallel":1}}]}`)
			v := f.trigger(t, "m", time.Time{})
			env := f.drainEnvelopes(t)[0]
			if _, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "w@boot", "c"); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 2)
			go func() {
				c := protocol.Completion{Run: env.Run, Task: env.Task, Attempt: 1, EventID: "done", Outcome: protocol.OutcomeSucceeded}
				_, err := f.svc.Workers().Complete(ctx, c, env.Token)
				done <- err
			}()
			go func() { done <- f.svc.CancelRun(ctx, v.Run.ID, "stop") }()
			for range 2 {
				if err := <-done; err != nil {
					t.Logf("round %d: %v", round, err)
				}
			}
			// A cancel that came first waits for the child's acknowledgement.
			if inst, _ := f.st.GetInstance(ctx, ledger.InstanceKey{Run: env.Run, Task: env.Task}); inst.Snapshot.State == statemodel.StateCancelling {
				c := protocol.Completion{Run: env.Run, Task: env.Task, Attempt: 1, EventID: "ack", Outcome: protocol.OutcomeCancelled}
				if _, err := f.svc.Workers().Complete(ctx, c, env.Token); err != nil {
					t.Fatal(err)
				}
			}
			view := f.readRun(t, v.Run.ID)
			parent := view.Tasks[0].Instance
			if !parent.Snapshot.State.Terminal() || !view.Run.ExecutionState.Terminal() {
				t.Fatalf("round %d: map task %s, run %s", round, parent.Snapshot.State, view.Run.ExecutionState)
			}
			ends := 0
			for _, tr := range mapHistory(t, f, parent.Key) {
				if tr.To.Terminal() {
					ends++
				}
			}
			if ends != 1 {
				t.Fatalf("round %d: the map task ended %d times", round, ends)
			}
		}
	})
}

func mapHistory(t *testing.T, f *fixture, key ledger.InstanceKey) []statemodel.Transition {
	t.Helper()
	all, err := ledger.FullHistory(context.Background(), f.st, key)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// TestMapChildRetryReopensTheMap: an operator's retry of a failed child
// of a FAILED map task reopens it; when the child then succeeds, the map
// task and its run succeed.
func TestMapChildRetryReopensTheMap(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.createJob(t, `{"name":"m","retry":{"max_attempts":1},"tasks":[{"id":"each","map":{"over":"[0,1,2]","max_parallel":3}}]}`)
	v := f.trigger(t, "m", time.Time{})
	d := &mapDriver{f: f, rng: rand.New(rand.NewPCG(3, 4)), inputs: map[string]map[string]json.RawMessage{}}
	fail := true
	d.complete = func(env protocol.Envelope, ans protocol.ClaimAnswer) protocol.Completion {
		if env.Task == "each[1]" && fail {
			return protocol.Completion{Outcome: protocol.OutcomeFailed, ErrorCategory: "boom", Retryable: new(bool)}
		}
		return protocol.Completion{Outcome: protocol.OutcomeSucceeded, Output: json.RawMessage(`"ok"`)}
	}
	d.run(t, v.Run.ID)
	if st := f.readRun(t, v.Run.ID).Run.ExecutionState; st != statemodel.RunFailed {
		t.Fatalf("run %s, want FAILED", st)
	}
	fail = false
	if err := f.svc.RetryTask(ctx, ledger.InstanceKey{Run: v.Run.ID, Task: "each[1]"}, scheduler.Retry{Operator: "ana", Reason: "fixed"}); err != nil {
		t.Fatal(err)
	}
	view := f.readRun(t, v.Run.ID)
	if st := view.Tasks[0].Instance.Snapshot.State; st.Terminal() {
		t.Fatalf("the map task is %s after its child's retry, want it reopened", st)
	}
	d.run(t, v.Run.ID)
	view = f.readRun(t, v.Run.ID)
	if view.Run.ExecutionState != statemodel.RunSucceeded || view.Tasks[0].Instance.Snapshot.State != statemodel.StateSucceeded {
		t.Errorf("after the retried child succeeded: run %s, map task %s", view.Run.ExecutionState, view.Tasks[0].Instance.Snapshot.State)
	}
	if m := view.Maps["each"]; m.Succeeded != 3 || m.Failed != 0 || m.Running != 0 {
		t.Errorf("counts %+v", m)
	}
	if out, _, err := f.st.GetMapOutput(ctx, v.Run.ID, "each"); err != nil || string(out) != `["ok","ok","ok"]` {
		t.Errorf("output %s (%v)", out, err)
	}
}

// TestMapChildLostAndResolved: a child whose worker went silent is LOST,
// then retried by the timers; its late report is stale; the counts see
// one end of it, and the map task ends once.
func TestMapChildLostAndResolved(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.createJob(t, `{"name":"m","timeouts":{"heartbeat":"10s"},"evidence_window":"1m",
		"retry":{"max_attempts":3,"initial_interval":"1s","jitter":"none"},
		"tasks":[{"id":"each","map":{"over":"[0,1]","max_parallel":2}}]}`)
	v := f.trigger(t, "m", time.Time{})
	envs := f.drainEnvelopes(t)
	if len(envs) != 2 {
		t.Fatalf("%d children dispatched", len(envs))
	}
	for i, env := range envs {
		if _, err := f.svc.Workers().Claim(ctx, refOf(env), env.Token, "w@boot", fmt.Sprintf("c%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	ok := func(env protocol.Envelope, id string) protocol.CompleteAnswer {
		t.Helper()
		ans, err := f.svc.Workers().Complete(ctx, protocol.Completion{Run: env.Run, Task: env.Task, Attempt: env.Attempt, EventID: id, Outcome: protocol.OutcomeSucceeded}, env.Token)
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	ok(envs[0], "done0")
	// envs[1]'s worker goes silent: LOST, then retried after the evidence
	// window.
	var retried []protocol.Envelope
	for step := 0; step < 20 && len(retried) == 0; step++ {
		f.clock.Advance(15 * time.Second)
		if err := f.svc.FireTimer(ctx, ledger.InstanceKey{Run: envs[1].Run, Task: envs[1].Task}); err != nil {
			t.Fatal(err)
		}
		retried = f.drainEnvelopes(t)
	}
	if len(retried) != 1 || retried[0].Task != envs[1].Task || retried[0].Attempt != 2 {
		t.Fatalf("after the lease ran out: %v", retried)
	}
	if m := f.readRun(t, v.Run.ID).Maps["each"]; m.Running != 1 || m.Succeeded != 1 {
		t.Fatalf("counts while the child was LOST and retried: %+v", m)
	}
	if _, err := f.svc.Workers().Claim(ctx, refOf(retried[0]), retried[0].Token, "w2@boot", "c2"); err != nil {
		t.Fatal(err)
	}
	if ans, err := f.svc.Workers().Complete(ctx, protocol.Completion{Run: envs[1].Run, Task: envs[1].Task, Attempt: 1, EventID: "late", Outcome: protocol.OutcomeSucceeded}, envs[1].Token); err == nil && ans.Result != string(statemodel.Stale) {
		t.Fatalf("the lost attempt's late report: %+v", ans)
	}
	ok(retried[0], "done1")
	view := f.readRun(t, v.Run.ID)
	if m := view.Maps["each"]; m.Running != 0 || m.Succeeded != 2 || m.Failed != 0 {
		t.Errorf("counts %+v", m)
	}
	if st := view.Tasks[0].Instance.Snapshot.State; st != statemodel.StateSucceeded || view.Run.ExecutionState != statemodel.RunSucceeded {
		t.Errorf("map task %s, run %s", st, view.Run.ExecutionState)
	}
}
