package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

var inputCases = []Case{
	{"BadInputWritesNothing", badInput},
	{"CancelledContextWritesNothing", cancelledContext},
}

// cancelledContext: a call whose context is already cancelled fails with
// the context's error (which the scheduler counts as transient) and
// writes nothing.
func cancelledContext(t *testing.T, h *Harness) {
	v := h.MustCreate(t, NewRun("cancelled", "main"))
	key := v.Tasks[0].Instance.Key
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	now := h.Clock.Now()
	nr := NewRun("cancelled", "main")
	calls := map[string]func() error{
		"create run": func() error { _, err := h.CreateRun(ctx, nr, now); return err },
		"transition": func() error {
			_, err := h.Store.Transition(ctx, key, Ev(statemodel.EvDepsMet, 0), now, Policy())
			return err
		},
		"create job": func() error { _, err := h.Store.CreateJob(ctx, ledger.Job{Name: "cancelled"}); return err },
		"read run":   func() error { _, err := h.Store.ReadRun(ctx, v.Run.ID); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", name, err)
		}
	}
	bg := context.Background()
	if _, err := h.Store.GetRun(bg, nr.ID); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("a cancelled create run wrote the run: %v", err)
	}
	if _, err := h.Store.GetJob(bg, "cancelled"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("a cancelled create job wrote the job: %v", err)
	}
	if got := h.MustInstance(t, key); got.Snapshot.State != statemodel.StateCreated {
		t.Errorf("a cancelled transition moved the instance to %s", got.Snapshot.State)
	}
}

// badInput: oversized items, invalid keys and invalid runs give the store's
// typed errors and write nothing: no run, no job, no change of the
// instance they name.
func badInput(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("good", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.ToQueued(t, key)
	h.Step(t, key, Started(1, "w"), now)
	stored := h.MustInstance(t, key)
	history := len(h.FullHistory(t, key))

	big := []byte(strings.Repeat("x", 410*1024))
	withTasks := func(n int, payload []byte) ledger.NewRun {
		tasks := make([]string, n)
		for i := range tasks {
			tasks[i] = fmt.Sprintf("t%02d", i)
		}
		nr := NewRun("bad", tasks...)
		for i := range nr.Tasks {
			nr.Tasks[i].Payload = payload
		}
		return nr
	}
	create := func(mut func(*ledger.NewRun)) error {
		nr := NewRun("bad", "main")
		mut(&nr)
		_, err := h.CreateRun(ctx, nr, now)
		return err
	}
	huge := Ev(statemodel.EvSucceeded, 1)
	huge.OutputRef = string(big)
	evidence := Ev(statemodel.EvCancelRequested, 0)
	evidence.Operator, evidence.Reason = "ops", string(big)
	longID := Ev(statemodel.EvSucceeded, 1)
	longID.ID = strings.Repeat("e", 1100)

	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"payload over 400 KB", func() error { _, err := h.CreateRun(ctx, withTasks(1, big), now); return err }, ledger.ErrItemTooLarge},
		{"run over 4 MB", func() error {
			_, err := h.CreateRun(ctx, withTasks(ledger.MaxTasksPerRun, []byte(strings.Repeat("y", 90*1024))), now)
			return err
		}, ledger.ErrItemTooLarge},
		{"no task", func() error { return create(func(nr *ledger.NewRun) { nr.Tasks = nil }) }, ledger.ErrInvalidInput},
		{"49 tasks", func() error { _, err := h.CreateRun(ctx, withTasks(ledger.MaxTasksPerRun+1, nil), now); return err }, ledger.ErrTooManyTasks},
		{"empty job", func() error { return create(func(nr *ledger.NewRun) { nr.Job = "" }) }, ledger.ErrInvalidKey},
		{"job with separator", func() error { return create(func(nr *ledger.NewRun) { nr.Job = "a#b" }) }, ledger.ErrInvalidKey},
		{"job over 1024 bytes", func() error { return create(func(nr *ledger.NewRun) { nr.Job = strings.Repeat("j", 1025) }) }, ledger.ErrInvalidKey},
		{"empty run id", func() error { return create(func(nr *ledger.NewRun) { nr.ID = "" }) }, ledger.ErrInvalidKey},
		{"task over 1000 bytes", func() error { return create(func(nr *ledger.NewRun) { nr.Tasks[0].ID = strings.Repeat("t", 1001) }) }, ledger.ErrInvalidKey},
		{"empty task", func() error { return create(func(nr *ledger.NewRun) { nr.Tasks[0].ID = "" }) }, ledger.ErrInvalidKey},
		{"idempotency key over 1024 bytes", func() error {
			return create(func(nr *ledger.NewRun) { nr.Idempotency = &ledger.Idempotency{Key: strings.Repeat("k", 1100)} })
		}, ledger.ErrInvalidKey},
		{"invalid policy", func() error { return create(func(nr *ledger.NewRun) { nr.Tasks[0].Policy.Retry.MaxAttempts = 0 }) }, ledger.ErrInvalidInput},
		{"dependency cycle", func() error {
			return create(func(nr *ledger.NewRun) {
				nr.Tasks = append(nr.Tasks, ledger.NewTask{ID: "second", Policy: Policy(), DependsOn: []string{"main"}})
				nr.Tasks[0].DependsOn = []string{"second"}
			})
		}, ledger.ErrInvalidInput},
		{"job spec over 400 KB", func() error { _, err := h.Store.CreateJob(ctx, ledger.Job{Name: "big", Spec: big}); return err }, ledger.ErrItemTooLarge},
		{"job name empty", func() error { _, err := h.Store.CreateJob(ctx, ledger.Job{Name: ""}); return err }, ledger.ErrInvalidKey},
		{"output ref over 400 KB", func() error { _, err := h.Store.Transition(ctx, key, huge, now, Policy()); return err }, ledger.ErrItemTooLarge},
		{"reason over 400 KB", func() error { _, err := h.Store.Transition(ctx, key, evidence, now, Policy()); return err }, ledger.ErrItemTooLarge},
		{"event id over the key limit", func() error { _, err := h.Store.Transition(ctx, key, longID, now, Policy()); return err }, ledger.ErrInvalidKey},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	var tooLarge *ledger.ItemTooLargeError
	if _, err := h.CreateRun(ctx, withTasks(1, big), now); !errors.As(err, &tooLarge) || tooLarge.Size <= ledger.MaxItemSize {
		t.Errorf("oversized run: %v does not say the size", err)
	}
	if runs, _, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: "bad"}); err != nil || len(runs) != 0 {
		t.Errorf("bad input created runs %v (%v)", ids(runs), err)
	}
	if busy, err := h.Store.HasUnfinishedRuns(ctx, "bad"); err != nil || busy {
		t.Errorf("bad input left an unfinished run of job bad: %t %v", busy, err)
	}
	if _, err := h.Store.GetJob(ctx, "big"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("an oversized job was stored: %v", err)
	}
	inst := h.MustInstance(t, key)
	if !inst.Snapshot.EqualState(stored.Snapshot) || len(h.FullHistory(t, key)) != history {
		t.Fatalf("bad input changed the instance: %+v", inst.Snapshot)
	}
}
