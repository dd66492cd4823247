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
// offers only the reads and conditional writes of InstanceStorage; a
// Ledger (New) calls these functions with it as its Transition,
// TransitionFrom and TransitionAll.

// InstanceStorage is what the decision loop needs of a store: reads and
// conditional writes of one instance, no decisions.
type InstanceStorage interface {
	// GetInstance reads the instance as it stands (strongly consistent);
	// ErrNotFound when it does not exist, ErrInvalidKey (before any I/O)
	// for a key no instance can have.
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
// consistent), then TransitionFrom. The key is checked by the read, before
// any I/O (InstanceStorage.GetInstance).
func Transition(ctx context.Context, s InstanceStorage, key InstanceKey, e statemodel.Event, now time.Time, p statemodel.Policy) (Result, error) {
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
	u := &instanceUpdate{s: s, key: key, events: events, now: now, p: p}
	if HeldCopyUsable(held) {
		u.inst = &held // else a copy whose history is not its snapshot's: read it
	}
	err := Update(ctx, Rounds{Max: MaxRounds}, u.read, u.decide, u.write)
	switch {
	case errors.Is(err, ErrUnsettled):
		return Result{Rounds: MaxRounds}, op(err)
	case err != nil:
		return u.res, op(err)
	}
	return u.res, nil
}

// instanceUpdate is one TransitionAll as it goes from round to round.
type instanceUpdate struct {
	s      InstanceStorage
	key    InstanceKey
	events []statemodel.Event
	now    time.Time
	p      statemodel.Policy
	// inst is the instance the next round decides on (nil: read it).
	// fresh: inst is the instance as this call read it or as a failed
	// write found it. An answer that writes nothing (rejected,
	// duplicate, stale) is given only from a fresh copy: from the
	// caller's copy it is confirmed by one read first, so a stale copy
	// never answers wrongly.
	inst  *Instance
	fresh bool
	round int // the round under way, from 1
	res   Result
}

// decided is one round's decisions on from: the events applied, in
// order, and the one the sequence stopped at (nil: none).
type decided struct {
	from    Instance
	applied []statemodel.Decision
	stop    *statemodel.Decision
}

// read answers the instance to decide on, reading it when the round has
// none.
func (u *instanceUpdate) read(ctx context.Context, round int) (Instance, error) {
	u.round = round + 1
	if u.inst == nil {
		got, err := u.s.GetInstance(ctx, u.key)
		if err != nil {
			u.res = Result{Rounds: u.round}
			return Instance{}, err
		}
		u.inst, u.fresh = &got, true
	}
	return *u.inst, nil
}

// decide applies the events to inst and says what to write: the events
// applied, or a heartbeat's refresh; nothing for an answer that writes no
// instance (given only from a fresh copy), which finish completes.
func (u *instanceUpdate) decide(ctx context.Context, inst Instance) (decided, Step, error) {
	d, err := u.apply(ctx, inst)
	if err != nil {
		return d, 0, err
	}
	if len(d.applied) == 0 && !u.fresh && d.stop.Outcome != statemodel.Refreshed {
		u.inst = nil // confirm the refusal against the instance as it stands
		return d, StepAgain, nil
	}
	u.res = d.result(u.round)
	if len(d.applied) == 0 {
		switch d.stop.Outcome {
		case statemodel.Duplicate, statemodel.Rejected, statemodel.Stale:
			return d, StepDone, u.finish(ctx, d.stop)
		}
	}
	return d, StepWrite, nil
}

// apply decides the events in order on inst, each on the snapshot the
// one before left, up to the first that does not apply. An event the
// snapshot may have forgotten is looked up in the whole history.
func (u *instanceUpdate) apply(ctx context.Context, inst Instance) (decided, error) {
	policy := DecisionPolicy(u.p, inst.Policy)
	out := decided{from: inst}
	snap := inst.Snapshot
	for _, e := range u.events {
		d := statemodel.Apply(snap, e, u.now, policy)
		if d.Outcome != statemodel.Duplicate && e.ID != "" && !errors.Is(d.Err, statemodel.ErrInvalidEvent) && MayHaveForgotten(inst, d.Outcome) {
			first, seen, err := u.s.SeenBefore(ctx, inst, e.ID)
			if err != nil {
				u.res = Result{Outcome: d.Outcome, Snapshot: snap, Rounds: u.round, Instance: inst}
				return out, err
			}
			if seen {
				d = statemodel.Decision{Outcome: statemodel.Duplicate, Snapshot: snap, First: first}
			}
		}
		if d.Outcome != statemodel.Applied {
			out.stop = &d
			break
		}
		out.applied = append(out.applied, d)
		snap = d.Snapshot
	}
	return out, nil
}

// single: the round answers as its one decision (the stop; a refresh
// written alone), not as the events applied.
func (d decided) single() bool {
	return len(d.applied) == 0 || d.stop != nil && d.stop.Outcome == statemodel.Refreshed
}

// writes lists the decisions the round writes.
func (d decided) writes() []statemodel.Decision {
	if d.single() {
		return []statemodel.Decision{*d.stop}
	}
	return d.applied
}

// result is the round's Result before its write.
func (d decided) result(round int) Result {
	if d.single() {
		s := d.stop
		return Result{Outcome: s.Outcome, Snapshot: s.Snapshot, Transition: s.Transition, First: s.First, Late: s.Late, Effects: s.Effects, Rounds: round, Instance: d.from}
	}
	last := d.applied[len(d.applied)-1]
	res := Result{Outcome: statemodel.Applied, Snapshot: last.Snapshot, Transition: last.Transition, Rounds: round, Instance: d.from}
	for _, a := range d.applied {
		res.Effects = append(res.Effects, a.Effects...)
		res.Transitions = append(res.Transitions, *a.Transition)
	}
	if d.stop != nil {
		res.Outcome, res.First, res.Late, res.Stopped = d.stop.Outcome, d.stop.First, d.stop.Late, true
	}
	return res
}

// write writes the round's decisions conditioned on the instance they
// were decided from. A failed condition is a conflict (the next round
// decides on the instance as the write found it); a write that lands is
// finished by the event it stopped at.
func (u *instanceUpdate) write(ctx context.Context, d decided) error {
	written, err := u.s.WriteInstance(ctx, d.from, d.writes())
	var conflict *ConflictError
	if errors.As(err, &conflict) {
		u.inst, u.fresh = conflict.Current, conflict.Current != nil // nil: re-read
		return fmt.Errorf("%w: %w", ErrVersionConflict, err)
	}
	if err != nil {
		return err
	}
	u.res.Instance = written
	return u.finish(ctx, d.stop)
}

// finish completes what the event the sequence stopped at says: a
// rejection is the call's error, a stale event is recorded on its older
// attempt.
func (u *instanceUpdate) finish(ctx context.Context, stop *statemodel.Decision) error {
	switch {
	case stop == nil:
		return nil
	case stop.Outcome == statemodel.Rejected:
		return stop.Err
	case stop.Outcome == statemodel.Stale:
		return u.s.AppendLate(ctx, u.key, *stop.Late)
	}
	return nil
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
