package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// GetInstance reads one instance.
func (s *instances) GetInstance(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, error) {
	op := opError("get instance %s", key)
	if err := s.enter(ctx, ledger.CheckInstanceKey(key)); err != nil {
		return ledger.Instance{}, op(err)
	}
	defer s.mu.Unlock()
	in, ok := s.instances[key]
	if !ok || ledger.Expired(in.inst.ExpiresAt, s.clock()) {
		return ledger.Instance{}, op(ledger.ErrNotFound)
	}
	return cloneInstance(in.inst), nil
}

// GetAttempt reads attempt n: its record as the transitions left it, and
// its late events.
func (s *instances) GetAttempt(ctx context.Context, key ledger.InstanceKey, n int) (ledger.Attempt, error) {
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

// Fence answers none: an in-memory ledger has no item a worker's own
// transaction could check (ledger.InstanceRecords).
func (s *instances) Fence(ctx context.Context, key ledger.InstanceKey, attempt int) (protocol.Fence, bool, error) {
	if err := ledger.CheckInstanceKey(key); err != nil {
		return protocol.Fence{}, false, opError("fence %s#%d", key, attempt)(err)
	}
	return protocol.Fence{}, false, nil
}

// WriteInstance writes decisions made from from.Snapshot when the stored
// instance is still in from's state and version (and, for lease.expired,
// its lease is still past), as the DynamoDB store's condition does; else
// it answers a *ledger.ConflictError with the instance as it stands
// (ledger.InstanceStorage).
func (s *instances) WriteInstance(ctx context.Context, from ledger.Instance, ds []statemodel.Decision) (ledger.Instance, error) {
	if err := s.enter(ctx, ledger.CheckInstanceKey(from.Key)); err != nil {
		return from, err
	}
	defer s.mu.Unlock()
	in, ok := s.instances[from.Key]
	if !ok {
		// DynamoDB's condition fails on a missing item too, and returns
		// no item: the loop reads, and finds none.
		return from, &ledger.ConflictError{Key: from.Key}
	}
	refresh := len(ds) == 1 && ds[0].Outcome == statemodel.Refreshed
	if len(ds) == 0 {
		return from, fmt.Errorf("%w: no decision to write", ledger.ErrInvalidInput)
	}
	for _, d := range ds {
		if refresh {
			break
		}
		if d.Outcome != statemodel.Applied || d.Transition == nil {
			return from, fmt.Errorf("%w: a %s decision among the written ones", ledger.ErrInvalidInput, d.Outcome)
		}
		if err := in.checkSize(d); err != nil {
			return from, err
		}
	}
	if !in.unchangedSince(from.Snapshot, ds) {
		cur := cloneInstance(in.inst)
		return from, &ledger.ConflictError{Key: from.Key, Current: &cur}
	}
	if refresh {
		n := ds[0].Snapshot
		in.setSnapshot(n, n.Lease.LastHeartbeatAt, s.horizon)
		return cloneInstance(in.inst), nil
	}
	if change := ledger.MapCountChange(from.Key, from.Snapshot.State, ds[len(ds)-1].Snapshot.State); change != nil {
		// A map child's end moves its map's counts in the same write.
		if err := s.addChildEnd(from.Key, change); err != nil {
			return from, err
		}
	}
	for _, d := range ds {
		tr := *d.Transition
		in.setSnapshot(d.Snapshot, tr.ObservedAt, s.horizon)
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
	return cloneInstance(in.inst), nil
}

// unchangedSince is the DynamoDB store's write condition: the stored
// instance is in the state and version decided from, and a lease.expired
// meets a lease that is still past.
func (in *instance) unchangedSince(from statemodel.Snapshot, ds []statemodel.Decision) bool {
	cur := in.inst.Snapshot
	if cur.State != from.State || cur.Version != from.Version {
		return false
	}
	for _, d := range ds {
		if tr := d.Transition; tr != nil && tr.Event == statemodel.EvLeaseExpired && cur.Lease.ExpiresAt.After(tr.ObservedAt) {
			return false
		}
	}
	return true
}

// AppendLate records a late event on its attempt: the first
// ledger.MaxLateEvents once each, later ones only counted.
func (s *instances) AppendLate(ctx context.Context, key ledger.InstanceKey, late statemodel.LateEvent) error {
	op := opError("record late event %s on %s#%d", late.EventID, key, late.Attempt)
	if err := ledger.CheckLateEvent(key, late); err != nil {
		return op(err)
	}
	if err := s.begin(ctx); err != nil {
		return op(err)
	}
	defer s.mu.Unlock()
	in, ok := s.instances[key]
	if !ok {
		return op(ledger.ErrNotFound)
	}
	in.appendLate(late)
	return nil
}

// SeenBefore looks an event id up in inst's history, the records up to
// its seq (ledger.InstanceStorage).
func (s *instances) SeenBefore(ctx context.Context, inst ledger.Instance, id string) (statemodel.SeenEvent, bool, error) {
	if seen, ok := inst.Snapshot.Seen(id); ok {
		return seen, true, nil
	}
	if err := s.begin(ctx); err != nil {
		return statemodel.SeenEvent{}, false, err
	}
	defer s.mu.Unlock()
	in, ok := s.instances[inst.Key]
	if !ok {
		return statemodel.SeenEvent{}, false, nil
	}
	first, seen := in.guards[id]
	if !seen || first.Seq > inst.Snapshot.Seq {
		return statemodel.SeenEvent{}, false, nil
	}
	return first, true, nil
}

// setSnapshot stores n as written at now, its timer indexed by
// ledger.IndexedTimer's rule at horizon.
func (in *instance) setSnapshot(n statemodel.Snapshot, now time.Time, horizon time.Duration) {
	in.inst.Snapshot = n.Clone()
	in.inst.TimerAt, in.inst.TimerKind = ledger.IndexedTimer(in.inst.Key, n, now, horizon)
}

// checkSize refuses a transition whose caller-supplied bytes cannot fit in
// the instance or in its history record.
func (in *instance) checkSize(d statemodel.Decision) error {
	held := len(in.inst.Payload)
	for _, a := range d.Snapshot.Attempts {
		held += len(a.OutputRef) + len(a.ErrorCategory) + len(a.Output)
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
		record += len(tr.AttemptRecord.OutputRef) + len(tr.AttemptRecord.ErrorCategory) + len(tr.AttemptRecord.Output)
	}
	return tooLarge(fmt.Sprintf("transition %s#%d", in.inst.Key, tr.Seq), record, ledger.MaxItemSize)
}

// appendLate records a late event on its attempt.
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
// the lease, indexed or not by ledger.IndexedTimer's rule; in CANCELLING
// the timer is the cancel deadline, left as it is): no history record, no
// version bump. ledger.HeartbeatTarget
// says which form fits or why none does.
func (s *instances) Heartbeat(ctx context.Context, key ledger.InstanceKey, attempt int, now time.Time, lease time.Duration) (ledger.HeartbeatResult, error) {
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
	if state == statemodel.StateRunning {
		in.setSnapshot(n, now, s.horizon)
	} else {
		in.inst.Snapshot = n.Clone()
	}
	return ledger.HeartbeatResult{State: state, CancelRequested: state == statemodel.StateCancelling, LeaseExpiresAt: n.Lease.ExpiresAt}, nil
}

// History returns an instance's transition records in seq order, at most
// limit (0: all) per call, and the token of the next page ("" at the end).
// An instance that does not exist has no records.
func (s *instances) History(ctx context.Context, key ledger.InstanceKey, limit int, token string) ([]statemodel.Transition, string, error) {
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
func (s *instances) GetInstanceAndRun(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, ledger.Run, error) {
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
