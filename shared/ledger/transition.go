package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runledger/runledger/statemodel"
)

// The decision loop, written once above the stores: statemodel decides, a
// store writes conditionally, a failed condition is decided again from the
// instance as it stands, a refusal is confirmed, and an event the
// snapshot may have forgotten is looked up in the whole history. A store
// offers only the reads and conditional writes of InstanceStorage, and
// embeds a Decider, whose Transition, TransitionFrom and TransitionAll
// methods call these functions with the store.

// InstanceStorage is what the decision loop needs of a store: reads and
// conditional writes of one instance, no decisions.
type InstanceStorage interface {
	// GetInstance reads the instance as it stands (strongly consistent);
	// ErrNotFound when it does not exist.
	GetInstance(ctx context.Context, key InstanceKey) (Instance, error)
	// WriteInstance writes decisions made by statemodel.Apply in order from
	// from.Snapshot as ONE conditional write, and answers the instance as
	// written. The decisions are Applied ones (each adds its transition
	// record to the history), or one Refreshed decision (the lease and the
	// timer only: no record, no version bump). The write is conditioned on
	// the stored instance being in from's state and version and, when a
	// decision is lease.expired, on its lease being past at that
	// decision's observed time; a failed condition is a *ConflictError
	// carrying the instance as it stands. Errors carry no operation
	// prefix: the caller adds its own.
	WriteInstance(ctx context.Context, from Instance, ds []statemodel.Decision) (Instance, error)
	// AppendLate records a late event on its (older) attempt, once per
	// event id: the first MaxLateEvents, later ones only counted.
	AppendLate(ctx context.Context, key InstanceKey, late statemodel.LateEvent) error
	// SeenBefore looks an event id up in inst's whole history, up to its
	// snapshot's seq, and answers the outcome that stands when found.
	SeenBefore(ctx context.Context, inst Instance, id string) (statemodel.SeenEvent, bool, error)
}

// ConflictError is a conditional write of an instance that met another
// state, version or lease than the one it was decided from. Current is the
// instance as the write found it, nil when the store could not say (the
// loop then reads it).
type ConflictError struct {
	Key     InstanceKey
	Current *Instance
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("instance %s moved on since it was read", e.Key)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// Transition applies event e to the instance at key: read it (strongly
// consistent), then TransitionFrom.
func Transition(ctx context.Context, s InstanceStorage, key InstanceKey, e statemodel.Event, now time.Time, p statemodel.Policy) (Result, error) {
	if err := CheckInstanceKey(key); err != nil {
		return Result{}, fmt.Errorf("transition %s %s: %w", key, e, err)
	}
	inst, err := s.GetInstance(ctx, key)
	if err != nil {
		return Result{Rounds: 1}, fmt.Errorf("transition %s %s: %w", key, e, err)
	}
	return TransitionFrom(ctx, s, inst, e, now, p)
}

// TransitionFrom applies event e to inst, the instance as the caller last
// read or wrote it: decide with statemodel.Apply at now under policy p (or
// the stored policy, see StoredPolicy), write the decision (WriteInstance).
// The write is conditioned on the state and version decided from, so a
// stale copy costs one more round, never a wrong write.
//
// A failed condition is never retried blindly. The instance as it stood
// when the condition failed (the *ConflictError carries it; without it, one
// read) is classified again by
// statemodel: the event may now be a Duplicate (another delivery of it
// won), Stale (a newer attempt started), Rejected (another event moved the
// instance where this one has no row: a lost claim race ends here), or
// still Applied on the newer state. At most MaxRounds rounds, then
// ErrUnsettled.
//
// Duplicates: the snapshot's recent ids answer most. An event they do not
// know is looked up in the instance's whole history (SeenBefore) when
// statemodel would reject it or call it stale, and before it is applied to
// an instance whose oldest ids have left the recent list, so an old
// duplicate is answered with its first outcome and never applied twice.
//
// Errors: a Rejected outcome returns the Result and a non-nil error wrapping
// the *statemodel.TransitionError (errors.Is with statemodel's sentinels);
// ErrNotFound when the instance does not exist (creation is CreateRun's);
// ErrInvalidKey before any I/O for unusable keys or event ids.
func TransitionFrom(ctx context.Context, s InstanceStorage, held Instance, e statemodel.Event, now time.Time, p statemodel.Policy) (Result, error) {
	return TransitionAll(ctx, s, held, []statemodel.Event{e}, now, p)
}

// TransitionAll applies events in order to held in ONE write, each decided
// on the snapshot the one before it left (deps.met and dispatch.accepted of
// a task whose envelope was just sent). The sequence stops at the first
// event that is not Applied: the events applied before it are written
// together, and the Result is that event's (or the last one's, when every
// event applied; Effects then hold every event's). An empty or partly
// refused sequence is answered as TransitionFrom answers its one event.
func TransitionAll(ctx context.Context, s InstanceStorage, held Instance, events []statemodel.Event, now time.Time, p statemodel.Policy) (Result, error) {
	key := held.Key
	if len(events) == 0 {
		return Result{}, fmt.Errorf("transition %s: %w: no event", key, ErrInvalidInput)
	}
	op := func(err error) error { return fmt.Errorf("transition %s %s: %w", key, events[0], err) }
	if err := CheckInstanceKey(key); err != nil {
		return Result{}, op(err)
	}
	for _, e := range events {
		if e.ID != "" {
			if err := CheckEventID(key, e.ID); err != nil {
				return Result{}, op(err)
			}
		}
	}
	inst := &held
	if !HeldCopyUsable(held) {
		inst = nil // a copy whose history is not its snapshot's: read it
	}
	// fresh: inst is the instance as this call read it or as a failed
	// write found it. An answer that writes nothing (rejected, duplicate,
	// stale) is given only from a fresh copy: from the caller's copy it is
	// confirmed by one read first, so a stale copy never answers wrongly.
	fresh := false
	for round := 1; round <= MaxRounds; round++ {
		if inst == nil {
			got, err := s.GetInstance(ctx, key)
			if err != nil {
				return Result{Rounds: round}, op(err)
			}
			inst, fresh = &got, true
		}
		policy := DecisionPolicy(p, inst.Policy)
		var applied []statemodel.Decision
		snap := inst.Snapshot
		var res Result
		var stop *statemodel.Decision
		for _, e := range events {
			d := statemodel.Apply(snap, e, now, policy)
			if d.Outcome != statemodel.Duplicate && e.ID != "" && !errors.Is(d.Err, statemodel.ErrInvalidEvent) && MayHaveForgotten(*inst, d.Outcome) {
				first, seen, err := s.SeenBefore(ctx, *inst, e.ID)
				if err != nil {
					return Result{Outcome: d.Outcome, Snapshot: snap, Rounds: round, Instance: *inst}, op(err)
				}
				if seen {
					d = statemodel.Decision{Outcome: statemodel.Duplicate, Snapshot: snap, First: first}
				}
			}
			if d.Outcome != statemodel.Applied {
				stop = &d
				break
			}
			applied = append(applied, d)
			snap = d.Snapshot
		}
		if len(applied) == 0 && !fresh && stop.Outcome != statemodel.Refreshed {
			inst = nil // confirm the refusal against the instance as it stands
			continue
		}
		if len(applied) == 0 || (stop != nil && stop.Outcome == statemodel.Refreshed) {
			d := *stop
			res = Result{Outcome: d.Outcome, Snapshot: d.Snapshot, Transition: d.Transition, First: d.First, Late: d.Late, Effects: d.Effects, Rounds: round, Instance: *inst}
			switch d.Outcome {
			case statemodel.Duplicate:
				return res, nil
			case statemodel.Rejected:
				return res, op(d.Err)
			case statemodel.Stale:
				if err := s.AppendLate(ctx, key, *d.Late); err != nil {
					return res, op(err)
				}
				return res, nil
			}
			// Refreshed: a heartbeat that changes no state.
			written, err := s.WriteInstance(ctx, *inst, []statemodel.Decision{d})
			if err == nil {
				res.Instance = written
				return res, nil
			}
			var conflict *ConflictError
			if !errors.As(err, &conflict) {
				return res, op(err)
			}
			inst, fresh = conflict.Current, conflict.Current != nil // nil: re-read
			continue
		}
		last := applied[len(applied)-1]
		res = Result{Outcome: statemodel.Applied, Snapshot: last.Snapshot, Transition: last.Transition, Rounds: round, Instance: *inst}
		for _, d := range applied {
			res.Effects = append(res.Effects, d.Effects...)
			res.Transitions = append(res.Transitions, *d.Transition)
		}
		if stop != nil {
			res.Outcome, res.First, res.Late, res.Stopped = stop.Outcome, stop.First, stop.Late, true
		}
		written, err := s.WriteInstance(ctx, *inst, applied)
		if err == nil {
			res.Instance = written
			switch {
			case stop != nil && stop.Outcome == statemodel.Rejected:
				return res, op(stop.Err)
			case stop != nil && stop.Outcome == statemodel.Stale:
				if err := s.AppendLate(ctx, key, *stop.Late); err != nil {
					return res, op(err)
				}
			}
			return res, nil
		}
		var conflict *ConflictError
		if !errors.As(err, &conflict) {
			return res, op(err)
		}
		inst, fresh = conflict.Current, conflict.Current != nil // nil: re-read
	}
	return Result{Rounds: MaxRounds}, op(fmt.Errorf("%w after %d rounds", ErrUnsettled, MaxRounds))
}

// Decider gives a store the decision loop as its Transition,
// TransitionFrom and TransitionAll methods, run on the store's own reads
// and writes: a store embeds it, set to itself (Decider{Storage: s}), and
// so implements Instances' transitions without writing them again.
type Decider struct {
	Storage InstanceStorage
}

// Transition applies e to the instance at key (see the function
// Transition).
func (d Decider) Transition(ctx context.Context, key InstanceKey, e statemodel.Event, now time.Time, p statemodel.Policy) (Result, error) {
	return Transition(ctx, d.Storage, key, e, now, p)
}

// TransitionFrom applies e decided from held (see the function
// TransitionFrom).
func (d Decider) TransitionFrom(ctx context.Context, held Instance, e statemodel.Event, now time.Time, p statemodel.Policy) (Result, error) {
	return TransitionFrom(ctx, d.Storage, held, e, now, p)
}

// TransitionAll applies events in order to held as one write (see the
// function TransitionAll).
func (d Decider) TransitionAll(ctx context.Context, held Instance, events []statemodel.Event, now time.Time, p statemodel.Policy) (Result, error) {
	return TransitionAll(ctx, d.Storage, held, events, now, p)
}

// CheckLateEvent refuses a late event no store may record: a bad key or
// event id, or no attempt number.
func CheckLateEvent(key InstanceKey, late statemodel.LateEvent) error {
	if err := CheckInstanceKey(key); err != nil {
		return err
	}
	if err := CheckEventID(key, late.EventID); err != nil {
		return err
	}
	if late.Attempt < 1 {
		return fmt.Errorf("%w: attempt %d", ErrInvalidInput, late.Attempt)
	}
	return nil
}
