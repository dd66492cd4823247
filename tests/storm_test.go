package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/worker"
	"github.com/runledger/runledger/statemodel"
)

// attemptLedger counts who ran each attempt: SDK handler calls and the
// claims of a worker that crashes right after claiming.
type attemptLedger struct {
	mu  sync.Mutex
	ran map[string]int
}

func (l *attemptLedger) add(run, task string, n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := fmt.Sprintf("%s/%s#%d", run, task, n)
	l.ran[k]++
	return l.ran[k]
}

// The storm end to end: two SDK workers whose handlers succeed, fail
// (retryable or not) at random, a worker that claims now and then and
// crashes at once (its attempt goes LOST and is retried), and an operator
// who retries (with or without downstream), marks, cancels, pauses and
// resumes through the API, all at once on the same runs of a five-task
// DAG. Once calm, every run ends with the state its tasks derive, every
// task's history is whole (seq 1..n, each move a row of the state
// machine, each from the previous to), and no attempt ran twice.
func TestStormThroughTheAPI(t *testing.T) {
	s := startStack(t, devstack.Options{})
	c := s.newClient()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s.createJob(quickJob("storm", map[string]any{"tasks": []any{
		map[string]any{"id": "a"},
		map[string]any{"id": "b", "depends_on": []string{"a"}},
		map[string]any{"id": "c", "depends_on": []string{"b"}},
		map[string]any{"id": "d", "depends_on": []string{"a"}},
		map[string]any{"id": "alert", "depends_on": []string{"c", "d"}, "trigger_rule": "one_failed"},
	}}))
	var runs []string
	for range 12 {
		runs = append(runs, s.trigger("storm", map[string]any{}))
	}

	ledger := &attemptLedger{ran: map[string]int{}}
	var calm atomic.Bool
	var seed atomic.Uint64
	handler := func(ctx context.Context, tk worker.Task) error {
		if n := ledger.add(tk.Run, tk.Task, tk.Attempt); n > 1 {
			t.Errorf("attempt %s/%s#%d ran %d times", tk.Run, tk.Task, tk.Attempt, n)
		}
		if calm.Load() {
			return nil
		}
		rng := rand.New(rand.NewPCG(seed.Add(1), 11))
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond) // the work
		switch rng.IntN(10) {
		case 0, 1:
			return errors.New("storm: try again")
		case 2:
			return worker.Permanent(errors.New("storm: bad input"))
		}
		return nil
	}
	s.startWorker("default", "storm-1", 4, handler)
	s.startWorker("default", "storm-2", 4, handler)

	crasher := s.manualWorker("default")
	crash := func() {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		msgs, err := s.Queue.Receive(rctx, s.Info.Queues["default"], queue.ReceiveOptions{MaxMessages: 2})
		if err != nil || len(msgs) == 0 {
			return
		}
		for _, msg := range msgs {
			env, err := worker.ParseEnvelope(msg.Body)
			if err != nil {
				t.Errorf("pool message: %v", err)
				return
			}
			if resp, err := crasher.claim(env, "crasher@boot"); err == nil && resp.Claimed {
				if n := ledger.add(env.Run, env.Task, env.Attempt); n > 1 {
					t.Errorf("attempt %s ran %d times", env.Ref(), n)
				}
			}
		}
		// Crashed: the message stays in flight, then comes back and its
		// claim is refused; nothing is reported.
	}

	rng := rand.New(rand.NewPCG(5, 11))
	for i := range 250 {
		run := runs[rng.IntN(len(runs))]
		task := []string{"a", "b", "c", "d", "alert"}[rng.IntN(5)]
		var err error
		switch p := rng.IntN(20); {
		case p < 8:
			_, err = c.RetryTask(ctx, run, task, client.Retry{Operator: "op", Reason: "storm", Downstream: p < 4})
		case p < 10:
			if p == 8 {
				_, err = c.MarkSucceeded(ctx, run, task, "op", "storm")
			} else {
				_, err = c.MarkFailed(ctx, run, task, "op", "storm")
			}
		case p < 11:
			_, err = c.CancelRun(ctx, run, "storm")
		case p < 15:
			_, err = c.PauseRun(ctx, run, "storm")
		default:
			_, err = c.ResumeRun(ctx, run, "storm")
		}
		if err != nil && client.ErrorCode(err) != client.CodeIllegalTransition {
			t.Fatalf("operator action %d on %s/%s: %v", i, run, task, err)
		}
		if i%3 == 0 {
			crash()
		}
	}

	// Calm: handlers succeed, paused runs resume; every run must end.
	calm.Store(true)
	for _, id := range runs {
		if _, err := c.ResumeRun(ctx, id, "calm"); err != nil && client.ErrorCode(err) != client.CodeIllegalTransition {
			t.Fatal(err)
		}
	}
	seen := map[statemodel.EventType]int{}
	for _, id := range runs {
		var d client.RunDetail
		eventually(t, 90*time.Second, "run "+id+" ends with the state its tasks derive", func() (bool, string) {
			var err error
			if d, err = c.GetRun(ctx, id); err != nil {
				return false, err.Error()
			}
			derived := statemodel.DeriveRunState(nodesOf(d)).State
			return d.Run.ExecutionState.Terminal() && d.Run.ExecutionState == derived && !d.Run.EndedAt.IsZero(),
				fmt.Sprintf("run %s, tasks %s, which derive %s", d.Run.ExecutionState, taskStates(d), derived)
		})
		for _, tk := range d.Tasks {
			for _, tr := range checkHistoryWhole(t, ctx, c, id, tk) {
				seen[tr.Event]++
			}
		}
	}
	t.Logf("attempts run %d; moves %v", len(ledger.ran), seen)
}

// nodesOf is a run detail's tasks as the state model derives them.
func nodesOf(d client.RunDetail) []statemodel.TaskNode {
	var out []statemodel.TaskNode
	for _, tk := range d.Tasks {
		out = append(out, statemodel.TaskNode{ID: tk.Task, DependsOn: tk.DependsOn, Rule: tk.TriggerRule, Publish: tk.Publish,
			State: tk.State, Started: len(tk.Attempts) > 0})
	}
	return out
}

func taskStates(d client.RunDetail) string {
	var b strings.Builder
	for _, tk := range d.Tasks {
		fmt.Fprintf(&b, "%s:%s ", tk.Task, tk.State)
	}
	return b.String()
}

// checkHistoryWhole reads a task's whole history through the API: seq 1..n
// without a gap, each record leaving the state the one before it entered,
// each move a row of the state machine, the last entering the task's
// state. It returns the history.
func checkHistoryWhole(t *testing.T, ctx context.Context, c *client.Client, run string, tk client.Task) []client.Transition {
	t.Helper()
	var all []client.Transition
	page := client.Page{Limit: 100}
	for {
		h, err := c.History(ctx, run, tk.Task, page)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, h.Transitions...)
		if h.NextToken == "" {
			break
		}
		page.NextToken = h.NextToken
	}
	prev := statemodel.StateNone
	for i, tr := range all {
		row, ok := statemodel.Lookup(tr.From, tr.Event)
		legal := ok && row.Actor == tr.Actor && containsState(row.To, tr.To)
		if tr.Seq != int64(i+1) || tr.From != prev || !legal {
			t.Fatalf("%s/%s record %d: seq %d, %s -%s(%s)-> %s after %s (a row of the state machine: %v)",
				run, tk.Task, i, tr.Seq, tr.From, tr.Event, tr.Actor, tr.To, prev, legal)
		}
		prev = tr.To
	}
	if prev != tk.State {
		t.Fatalf("%s/%s: history ends in %s, the task is %s", run, tk.Task, prev, tk.State)
	}
	return all
}

func containsState(list []statemodel.InstanceState, s statemodel.InstanceState) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
