package memstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// GetInstance reads one instance.
func (s *Store) GetInstance(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, error) {
	op := opError("get instance %s", key)
	if err := s.enter(ctx, ledger.CheckInstanceKey(key)); err != nil {
		return ledger.Instance{}, op(err)
	}
	defer s.mu.Unlock()
	in, ok := s.instances[key]
	if !ok {
		return ledger.Instance{}, op(ledger.ErrNotFound)
	}
	return cloneInstance(in.inst), nil
}

// GetAttempt reads attempt n: its record as the transitions left it, and
// its late events.
func (s *Store) GetAttempt(ctx context.Context, key ledger.InstanceKey, n int) (ledger.Attempt, error) {
	op := opError("get attempt %s#%d", key, n)
	if err := ledger.CheckInstanceKey(key); err != nil {
		return ledger.Attempt{}, op(err)
	}
	if n < 1 {
		return ledger.Attempt{}, op(fmt.Errorf("%w: attempt %d", ledger.ErrInvalidInput, n))
	}
	if err := s.begin(ctx); err != nil {
		return ledger.Attempt{}, op(err)
	}
	defer s.mu.Unlock()
	in, ok := s.instances[key]
	if !ok || in.attempts[n] == nil {
		return ledger.Attempt{}, op(ledger.ErrNotFound)
	}
	return cloneAttempt(*in.attempts[n]), nil
}

// Transition applies event e to the instance at key, decided from the
// stored instance (see TransitionAll).
func (s *Store) Transition(ctx context.Context, key ledger.InstanceKey, e statemodel.Event, now time.Time, p statemodel.Policy) (ledger.Result, error) {
	return s.transition(ctx, key, nil, []statemodel.Event{e}, now, p)
}

// TransitionFrom applies event e decided from held, the instance as the
// caller holds it (see TransitionAll).
func (s *Store) TransitionFrom(ctx context.Context, held ledger.Instance, e statemodel.Event, now time.Time, p statemodel.Policy) (ledger.Result, error) {
	return s.transition(ctx, held.Key, &held, []statemodel.Event{e}, now, p)
}

// TransitionAll applies events in order to held as one write: it stops at
// the first event that does not apply, keeping those applied before it.
//
// As the DynamoDB store does, it decides from held, not from the stored
// instance: a decision that writes (Applied, Refreshed) is written only
// when the stored instance is still in held's state and version (and, for
// lease.expired, its lease is still past), else it is decided again from
// the stored instance; a decision that writes nothing (Rejected,
// Duplicate, Stale) made from held is confirmed against the stored
// instance, as the DynamoDB store confirms it with a read. An event applied before answers Duplicate with its first outcome,
// also when the snapshot no longer remembers it; a Stale event is recorded
// as late on its attempt; a Rejected one returns the Result and an error
// wrapping the *statemodel.TransitionError.
func (s *Store) TransitionAll(ctx context.Context, held ledger.Instance, events []statemodel.Event, now time.Time, p statemodel.Policy) (ledger.Result, error) {
	if len(events) == 0 {
		return ledger.Result{}, fmt.Errorf("transition %s: %w: no event", held.Key, ledger.ErrInvalidInput)
	}
	return s.transition(ctx, held.Key, &held, events, now, p)
}

// transition decides events from held (nil: the stored instance) and
// writes what applied; when held proved stale, the next round decides
// from the stored instance, which settles it.
func (s *Store) transition(ctx context.Context, key ledger.InstanceKey, held *ledger.Instance, events []statemodel.Event, now time.Time, p statemodel.Policy) (ledger.Result, error) {
	op := opError("transition %s %s", key, events[0])
	if err := ledger.CheckInstanceKey(key); err != nil {
		return ledger.Result{}, op(err)
	}
	for _, e := range events {
		if e.ID != "" {
			if err := ledger.CheckEventID(key, e.ID); err != nil {
				return ledger.Result{}, op(err)
			}
		}
	}
	if err := s.begin(ctx); err != nil {
		return ledger.Result{}, op(err)
	}
	defer s.mu.Unlock()
	in, ok := s.instances[key]
	if !ok {
		return ledger.Result{Rounds: 1}, op(ledger.ErrNotFound)
	}
	from, fresh := in.inst, true
	if held != nil && ledger.HeldCopyUsable(*held) {
		from, fresh = cloneInstance(*held), false
	}
	for round := 1; round <= ledger.MaxRounds; round++ {
		applied, stop, err := in.decide(from, events, now, ledger.DecisionPolicy(p, from.Policy))
		if err != nil {
			return ledger.Result{Outcome: statemodel.Applied, Snapshot: from.Snapshot, Rounds: round, Instance: cloneInstance(from)}, op(err)
		}
		writes := len(applied) > 0 || stop.Outcome == statemodel.Refreshed
		if !in.unchangedSince(from.Snapshot, applied) && (writes || !fresh) {
			// held proved stale (a write's condition failed, or a refusal
			// from the caller's copy was confirmed against the stored
			// instance): decide again from the stored instance.
			from, fresh = in.inst, true
			continue
		}
		res, err := in.write(from, applied, stop)
		res.Rounds = round
		if err != nil {
			return res, op(err)
		}
		return res, nil
	}
	return ledger.Result{Rounds: ledger.MaxRounds}, op(fmt.Errorf("%w after %d rounds", ledger.ErrUnsettled, ledger.MaxRounds))
}

// decide applies events in order from inst's snapshot, up to the first
// that does not apply (stop; nil when all did). An event the snapshot may
// have forgotten (ledger.MayHaveForgotten) is looked up in inst's history,
// the records up to its seq, as the DynamoDB store looks it up.
func (in *instance) decide(inst ledger.Instance, events []statemodel.Event, now time.Time, policy statemodel.Policy) (applied []statemodel.Decision, stop *statemodel.Decision, err error) {
	snap := inst.Snapshot.Clone()
	for _, e := range events {
		d := statemodel.Apply(snap, e, now, policy)
		if d.Outcome != statemodel.Duplicate && e.ID != "" && !errors.Is(d.Err, statemodel.ErrInvalidEvent) && ledger.MayHaveForgotten(inst, d.Outcome) {
			if first, seen := in.guards[e.ID]; seen && first.Seq <= inst.Snapshot.Seq {
				d = statemodel.Decision{Outcome: statemodel.Duplicate, Snapshot: snap, First: first}
			}
		}
		if d.Outcome != statemodel.Applied {
			return applied, &d, nil
		}
		if err := in.checkSize(d); err != nil {
			return nil, nil, err
		}
		applied = append(applied, d)
		snap = d.Snapshot
	}
	return applied, nil, nil
}

// unchangedSince is the DynamoDB store's write condition: the stored
// instance is in the state and version decided from, and a lease.expired
// meets a lease that is still past.
func (in *instance) unchangedSince(from statemodel.Snapshot, applied []statemodel.Decision) bool {
	cur := in.inst.Snapshot
	if cur.State != from.State || cur.Version != from.Version {
		return false
	}
	for _, d := range applied {
		if tr := d.Transition; tr.Event == statemodel.EvLeaseExpired && cur.Lease.ExpiresAt.After(tr.ObservedAt) {
			return false
		}
	}
	return true
}

// write stores the decisions made from inst and answers the Result.
func (in *instance) write(from ledger.Instance, applied []statemodel.Decision, stop *statemodel.Decision) (ledger.Result, error) {
	if len(applied) == 0 {
		d := *stop
		res := ledger.Result{
			Outcome: d.Outcome, Snapshot: d.Snapshot, Transition: d.Transition,
			First: d.First, Late: d.Late, Effects: d.Effects, Instance: cloneInstance(from),
		}
		switch d.Outcome {
		case statemodel.Rejected:
			return res, d.Err
		case statemodel.Stale:
			in.appendLate(*d.Late)
		case statemodel.Refreshed:
			in.setSnapshot(d.Snapshot)
			res.Instance = cloneInstance(in.inst)
		}
		return res, nil
	}
	for _, d := range applied {
		tr := *d.Transition
		in.setSnapshot(d.Snapshot)
		in.history = append(in.history, cloneTransition(tr))
		in.guards[tr.EventID] = statemodel.SeenEvent{ID: tr.EventID, Seq: tr.Seq, To: tr.To}
		if rec := tr.AttemptRecord; rec != nil {
			a := in.attempts[rec.N]
			if a == nil {
				a = &ledger.Attempt{}
				in.attempts[rec.N] = a
			}
			a.AttemptRecord = *rec // the late events stay
		}
	}
	last := applied[len(applied)-1]
	res := ledger.Result{Outcome: statemodel.Applied, Snapshot: last.Snapshot, Transition: last.Transition, Instance: cloneInstance(in.inst)}
	for _, d := range applied {
		res.Effects = append(res.Effects, d.Effects...)
		res.Transitions = append(res.Transitions, *d.Transition)
	}
	if stop != nil {
		res.Outcome, res.First, res.Late, res.Stopped = stop.Outcome, stop.First, stop.Late, true
		switch stop.Outcome {
		case statemodel.Rejected:
			return res, stop.Err
		case statemodel.Stale:
			in.appendLate(*stop.Late)
		}
	}
	return res, nil
}

func (in *instance) setSnapshot(n statemodel.Snapshot) {
	in.inst.Snapshot = n.Clone()
	in.inst.TimerAt, in.inst.TimerKind = timerOf(n)
}

// checkSize refuses a transition whose caller-supplied bytes cannot fit in
// the instance or in its history record.
func (in *instance) checkSize(d statemodel.Decision) error {
	held := len(in.inst.Payload)
	for _, a := range d.Snapshot.Attempts {
		held += len(a.OutputRef) + len(a.ErrorCategory)
	}
	if err := tooLarge("instance "+in.inst.Key.String(), held, ledger.MaxItemSize); err != nil {
		return err
	}
	tr := d.Transition
	record := len(tr.Reason) + len(tr.Operator)
	for k, v := range tr.Evidence {
		record += len(k) + len(v)
	}
	if tr.AttemptRecord != nil {
		record += len(tr.AttemptRecord.OutputRef) + len(tr.AttemptRecord.ErrorCategory)
	}
	return tooLarge(fmt.Sprintf("transition %s#%d", in.inst.Key, tr.Seq), record, ledger.MaxItemSize)
}

// appendLate records a late event on its attempt: the first
// ledger.MaxLateEvents once each, later ones only counted.
func (in *instance) appendLate(late statemodel.LateEvent) {
	a := in.attempts[late.Attempt]
	if a == nil {
		a = &ledger.Attempt{AttemptRecord: statemodel.AttemptRecord{N: late.Attempt}}
		in.attempts[late.Attempt] = a
	}
	for _, l := range a.Late {
		if l.EventID == late.EventID {
			return
		}
	}
	if len(a.Late) >= ledger.MaxLateEvents {
		a.LateDropped++
		return
	}
	a.Late = append(a.Late, late)
}

// Heartbeat renews attempt's lease (and, in RUNNING, the timer, which is
// the lease): no history record, no version bump. ledger.HeartbeatTarget
// says which form fits or why none does.
func (s *Store) Heartbeat(ctx context.Context, key ledger.InstanceKey, attempt int, now time.Time, lease time.Duration) (ledger.HeartbeatResult, error) {
	op := opError("heartbeat %s#%d", key, attempt)
	if err := ledger.CheckInstanceKey(key); err != nil {
		return ledger.HeartbeatResult{}, op(err)
	}
	if lease <= 0 || attempt < 1 {
		return ledger.HeartbeatResult{}, op(fmt.Errorf("%w: lease %s, attempt %d", ledger.ErrInvalidInput, lease, attempt))
	}
	if err := s.begin(ctx); err != nil {
		return ledger.HeartbeatResult{}, op(err)
	}
	defer s.mu.Unlock()
	in, ok := s.instances[key]
	if !ok {
		return ledger.HeartbeatResult{}, op(ledger.ErrNotFound)
	}
	state, err := ledger.HeartbeatTarget(in.inst.Snapshot, attempt)
	if err != nil {
		return ledger.HeartbeatResult{}, op(err)
	}
	n := in.inst.Snapshot
	n.Lease = statemodel.Lease{LastHeartbeatAt: now, ExpiresAt: now.Add(lease)}
	in.setSnapshot(n)
	return ledger.HeartbeatResult{State: state, CancelRequested: state == statemodel.StateCancelling, LeaseExpiresAt: n.Lease.ExpiresAt}, nil
}

// History returns an instance's transition records in seq order, at most
// limit (0: all) per call, and the token of the next page ("" at the end).
// An instance that does not exist has no records.
func (s *Store) History(ctx context.Context, key ledger.InstanceKey, limit int, token string) ([]statemodel.Transition, string, error) {
	op := opError("history %s", key)
	if err := ledger.CheckInstanceKey(key); err != nil {
		return nil, "", op(err)
	}
	listing := "history of " + key.String()
	after, err := decodeToken(token, listing)
	if err != nil {
		return nil, "", op(err)
	}
	if err := s.begin(ctx); err != nil {
		return nil, "", op(err)
	}
	defer s.mu.Unlock()
	in, ok := s.instances[key]
	if !ok {
		return []statemodel.Transition{}, "", nil
	}
	seqKey := func(tr statemodel.Transition) string { return fmt.Sprintf("%020d", tr.Seq) }
	got, next := page(in.history, seqKey, ascending, listing, after, limit)
	out := make([]statemodel.Transition, len(got))
	for i, tr := range got {
		out[i] = cloneTransition(tr)
	}
	return out, next, nil
}

// GetInstanceAndRun reads an instance and its run.
func (s *Store) GetInstanceAndRun(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, ledger.Run, error) {
	op := opError("get instance %s with its run", key)
	if err := s.enter(ctx, ledger.CheckInstanceKey(key)); err != nil {
		return ledger.Instance{}, ledger.Run{}, op(err)
	}
	defer s.mu.Unlock()
	in, ok := s.instances[key]
	run, found := s.runs[key.Run]
	if !ok || !found {
		return ledger.Instance{}, ledger.Run{}, op(ledger.ErrNotFound)
	}
	return cloneInstance(in.inst), cloneRun(run), nil
}
