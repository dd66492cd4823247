package ledger

import (
	"context"
	"errors"
	"fmt"
)

// Step is what a decision asks of Update.
type Step int

const (
	// StepWrite: write the decision; Update returns once the write lands.
	StepWrite Step = iota + 1
	// StepWriteMore: write the decision and, once it lands, decide again
	// in a new round, which the bound does not count: a sequence of
	// writes, each decided on the one before (a limiter's hand-off admits
	// its queue's head a write at a time).
	StepWriteMore
	// StepDone: nothing to write; the answer stands and Update returns.
	StepDone
	// StepAgain: nothing to write on what this round read (a guess, or a
	// copy that proved stale); read again in a new round.
	StepAgain
)

// Rounds bounds an Update.
type Rounds struct {
	// Max is how many rounds may end without a write that landed (a write
	// refused with ErrVersionConflict, or StepAgain) before Update gives
	// up with ErrUnsettled.
	Max int
	// Pause, when set, waits before each round that follows one that did
	// not land; missed is how many did not land so far (1 for the first).
	// Defaults to no wait.
	Pause func(ctx context.Context, missed int) error
}

// Update is the one read-decide-write loop of the ledger and the
// scheduler: each round reads (round counts the rounds before it, from
// 0), decides on what it read, and writes the decision conditionally. A
// write refused with ErrVersionConflict (its condition met another
// writer's write; a write refused in other words, a *ConflictError,
// answers ErrVersionConflict for it) is decided again in a new round from
// a new read, never resubmitted blindly. Any other error
// of read, decide or write ends the loop and is returned as it is. What a
// caller carries from round to round (a conflict's found item, the
// effects decided so far) lives in its closures.
//
// After rounds.Max rounds that did not land it returns an error wrapping
// ErrUnsettled.
func Update[T, W any](ctx context.Context, rounds Rounds,
	read func(ctx context.Context, round int) (T, error),
	decide func(ctx context.Context, cur T) (W, Step, error),
	write func(ctx context.Context, w W) error,
) error {
	landed := true
	for round, missed := 0, 0; missed < rounds.Max; round++ {
		if !landed && rounds.Pause != nil {
			if err := rounds.Pause(ctx, missed); err != nil {
				return err
			}
		}
		cur, err := read(ctx, round)
		if err != nil {
			return err
		}
		w, step, err := decide(ctx, cur)
		if err != nil || step == StepDone {
			return err
		}
		landed = step != StepAgain
		if landed {
			err = write(ctx, w)
			landed = err == nil
			if err != nil && !errors.Is(err, ErrVersionConflict) {
				return err
			}
		}
		if landed && step != StepWriteMore {
			return nil
		}
		if !landed {
			missed++
		}
	}
	return fmt.Errorf("%w after %d rounds", ErrUnsettled, rounds.Max)
}
