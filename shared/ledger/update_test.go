package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
)

// cell is a versioned value, the smallest thing a read-decide-write
// loop works on: a write lands only on the version it was decided from.
type cell struct {
	version, value int
	// beat makes the next beat writes fail as if another writer had
	// won each time (moving the version on).
	beat int
	log  []string
}

func (c *cell) read(_ context.Context, round int) (cell, error) {
	c.log = append(c.log, fmt.Sprintf("read %d", round))
	return cell{version: c.version, value: c.value}, nil
}

func (c *cell) write(_ context.Context, w cell) error {
	if c.beat > 0 {
		c.beat--
		c.version++
	}
	if w.version != c.version {
		c.log = append(c.log, "refused")
		return fmt.Errorf("cell at %d: %w", c.version, ledger.ErrVersionConflict)
	}
	c.version, c.value = c.version+1, w.value
	c.log = append(c.log, fmt.Sprintf("wrote %d", w.value))
	return nil
}

// add decides cur plus n.
func add(n int) func(context.Context, cell) (cell, ledger.Step, error) {
	return func(_ context.Context, cur cell) (cell, ledger.Step, error) {
		return cell{version: cur.version, value: cur.value + n}, ledger.StepWrite, nil
	}
}

func TestUpdateDecidesAgainAfterEachConflict(t *testing.T) {
	c := &cell{value: 1, beat: 2}
	var paused []int
	rounds := ledger.Rounds{Max: 3, Pause: func(_ context.Context, missed int) error {
		paused = append(paused, missed)
		return nil
	}}
	if err := ledger.Update(context.Background(), rounds, c.read, add(10), c.write); err != nil {
		t.Fatal(err)
	}
	want := []string{"read 0", "refused", "read 1", "refused", "read 2", "wrote 11"}
	if c.value != 11 || !slices.Equal(c.log, want) {
		t.Errorf("value %d, rounds %v; want 11 and %v", c.value, c.log, want)
	}
	if !slices.Equal(paused, []int{1, 2}) {
		t.Errorf("paused before rounds that followed %v misses, want [1 2]", paused)
	}
}

func TestUpdateGivesUpAfterMaxRounds(t *testing.T) {
	c := &cell{beat: 100}
	err := ledger.Update(context.Background(), ledger.Rounds{Max: 4}, c.read, add(1), c.write)
	if !errors.Is(err, ledger.ErrUnsettled) || errors.Is(err, ledger.ErrVersionConflict) {
		t.Errorf("err %v, want ErrUnsettled alone", err)
	}
	if n := len(c.log); n != 8 || c.value != 0 {
		t.Errorf("%d steps %v, value %d; want 4 reads and 4 refusals, nothing written", n, c.log, c.value)
	}
}

func TestUpdateDoneWritesNothing(t *testing.T) {
	c := &cell{value: 5}
	done := func(_ context.Context, cur cell) (cell, ledger.Step, error) {
		return cur, ledger.StepDone, nil
	}
	if err := ledger.Update(context.Background(), ledger.Rounds{Max: 3}, c.read, done, c.write); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.log, []string{"read 0"}) || c.version != 0 {
		t.Errorf("steps %v, version %d; want one read and no write", c.log, c.version)
	}
}

// StepAgain reads again and counts as a round; StepWriteMore writes and
// goes on, uncounted.
func TestUpdateAgainAndMore(t *testing.T) {
	c := &cell{}
	step := func(_ context.Context, cur cell) (cell, ledger.Step, error) {
		switch {
		case len(c.log) == 1:
			return cur, ledger.StepAgain, nil // a guess: read
		case cur.value < 3:
			return cell{version: cur.version, value: cur.value + 1}, ledger.StepWriteMore, nil
		}
		return cur, ledger.StepDone, nil
	}
	if err := ledger.Update(context.Background(), ledger.Rounds{Max: 2}, c.read, step, c.write); err != nil {
		t.Fatal(err)
	}
	want := []string{"read 0", "read 1", "wrote 1", "read 2", "wrote 2", "read 3", "wrote 3", "read 4"}
	if !slices.Equal(c.log, want) {
		t.Errorf("steps %v, want %v", c.log, want)
	}
}

func TestUpdateEndsOnAnyOtherError(t *testing.T) {
	boom := errors.New("boom")
	fail := func(context.Context, int) (cell, error) { return cell{}, boom }
	never := func(context.Context, cell) error { t.Fatal("wrote after a failed read"); return nil }
	if err := ledger.Update(context.Background(), ledger.Rounds{Max: 3}, fail, add(1), never); !errors.Is(err, boom) {
		t.Errorf("read error: %v, want boom", err)
	}
	c := &cell{}
	refuse := func(context.Context, cell) (cell, ledger.Step, error) { return cell{}, ledger.StepWrite, boom }
	if err := ledger.Update(context.Background(), ledger.Rounds{Max: 3}, c.read, refuse, never); !errors.Is(err, boom) {
		t.Errorf("decide error: %v, want boom", err)
	}
	broken := func(context.Context, cell) error { return boom }
	c = &cell{}
	if err := ledger.Update(context.Background(), ledger.Rounds{Max: 3}, c.read, add(1), broken); !errors.Is(err, boom) || len(c.log) != 1 {
		t.Errorf("write error: %v after %v, want boom after one read", err, c.log)
	}
}

func TestUpdatePauseEndsIt(t *testing.T) {
	c := &cell{beat: 1}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rounds := ledger.Rounds{Max: 3, Pause: func(ctx context.Context, _ int) error { return ctx.Err() }}
	if err := ledger.Update(ctx, rounds, c.read, add(1), c.write); !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want the pause's", err)
	}
}
