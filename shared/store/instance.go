package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// instanceItem is the whole instance item, in partition pk (instancePK).
func instanceItem(pk string, inst ledger.Instance) item {
	it := instanceStatic(inst)
	for k, v := range snapshotItem(inst.Snapshot) {
		it[k] = v
	}
	for k, v := range timerItem(pk, instanceSK(inst.Key.Task), inst.TimerAt, inst.TimerKind) {
		it[k] = v
	}
	it[attrRecs] = compactRecords(inst.History)
	it[attrInlineAttempts] = inlineAttempts(inst.Snapshot, inst.History)
	it[tableschema.PK] = str(pk)
	it[tableschema.SK] = str(instanceSK(inst.Key.Task))
	return it
}

// instanceStatic holds the fields set at creation and never changed.
func instanceStatic(inst ledger.Instance) item {
	return item{
		attrKind:         str(kindInstance),
		attrRun:          str(inst.Key.Run),
		attrTask:         str(inst.Key.Task),
		attrJob:          optStr(inst.Job),
		attrPool:         optStr(inst.Pool),
		attrPayload:      bin(inst.Payload),
		attrExecutorSpec: bin(inst.Executor),
		attrPolicyD:      policyDelta(inst.Policy),
		attrDependsOn:    strList(inst.DependsOn),
		attrTriggerRule:  optStr(string(inst.TriggerRule)),
		attrPublish:      optBool(inst.Publish),
		attrSecret:       bin(inst.Secret),
		attrMapItem:      bin(inst.Item),
		attrMapSpec:      bin(inst.Map),
		tableschema.TTL:  expiry(inst.ExpiresAt),
	}
}

// timerItem holds the timer attributes of an instance whose indexed timer
// (ledger.IndexedTimer) is at, of kind: set while it waits on a time the
// index holds, absent (removed) when terminal, PAUSED or when its timer
// rides a delay message, which keeps it out of the sparse timers index.
func timerItem(pk, sk string, at time.Time, kind statemodel.TimerKind) item {
	if kind == statemodel.TimerNone || at.IsZero() {
		return item{tableschema.TimerShard: nil, tableschema.TimerAt: nil, attrTimerKind: nil}
	}
	return item{
		tableschema.TimerShard: str(timerShard(pk, sk)),
		tableschema.TimerAt:    str(ledger.FormatTime(at)),
		attrTimerKind:          str(string(kind)),
	}
}

func decodeInstance(m map[string]types.AttributeValue) (ledger.Instance, error) {
	r := &reader{it: m}
	inst := ledger.Instance{
		Key:         ledger.InstanceKey{Run: r.str(attrRun), Task: r.str(attrTask)},
		Job:         r.str(attrJob),
		Pool:        r.str(attrPool),
		Payload:     r.bytes(attrPayload),
		Executor:    r.bytes(attrExecutorSpec),
		Policy:      readInstancePolicy(r),
		DependsOn:   r.strList(attrDependsOn),
		TriggerRule: statemodel.TriggerRule(r.str(attrTriggerRule)),
		Publish:     r.bool(attrPublish),
		Snapshot:    readSnapshot(r),
		TimerAt:     r.time(tableschema.TimerAt),
		TimerKind:   statemodel.TimerKind(r.str(attrTimerKind)),
		Secret:      r.bytes(attrSecret),
		Item:        r.bytes(attrMapItem),
		Map:         r.bytes(attrMapSpec),
		ExpiresAt:   r.expiry(),
	}
	// An item of the former format holds its records long-named under
	// attrHistory; one being rewritten may hold both for no longer than
	// the write (the write sets one and removes the other).
	inst.History = mergeHistory(readHistoryList(r, attrHistory), readCompactRecords(r, attrRecs))
	if len(inst.History) == 0 {
		inst.History = nil
	}
	if len(inst.Snapshot.Recent) == 0 {
		inst.Snapshot.Recent = recentOf(inst.History)
	}
	if len(inst.Snapshot.Attempts) == 0 && inst.Snapshot.Attempt > 0 {
		if a, ok := lastAttemptRecord(inst.History); ok && a.N == inst.Snapshot.Attempt {
			inst.Snapshot.Attempts = []statemodel.AttemptRecord{a}
		}
	}
	return inst, r.err
}

// inlineAttempts is the snapshot's attempt records as the item stores
// them: nothing when they are the current attempt's record as the newest
// inline record that carries one holds it (the usual case: every
// transition of an attempt records it), else compact.
func inlineAttempts(s statemodel.Snapshot, inline []statemodel.Transition) types.AttributeValue {
	if len(s.Attempts) == 1 && s.Attempts[0].N == s.Attempt {
		if a, ok := lastAttemptRecord(inline); ok && a.Equal(s.Attempts[0]) {
			return nil
		}
	}
	return compactAttempts(s.Attempts)
}

// lastAttemptRecord is the attempt record of the newest record that
// carries one.
func lastAttemptRecord(trs []statemodel.Transition) (statemodel.AttemptRecord, bool) {
	for i := len(trs) - 1; i >= 0; i-- {
		if a := trs[i].AttemptRecord; a != nil {
			return *a, true
		}
	}
	return statemodel.AttemptRecord{}, false
}

// readInstancePolicy reads the policy as the default's fields with the
// stored delta over them, or, from an item written before, its whole
// compact policy or the former long-named one. An instance's writes after
// its creation never touch its policy, so an old item keeps its own.
func readInstancePolicy(r *reader) statemodel.Policy {
	if _, ok := r.it[attrPolicyC]; ok {
		return readPolicy(r, attrPolicyC, compactPolicyNames())
	}
	if _, ok := r.it[attrPolicy]; ok {
		return readPolicy(r, attrPolicy, longPolicy())
	}
	return readPolicyDelta(r)
}

// recentOf is the snapshot's recent event ids as the inline records hold
// them (the item stores no list of its own): the newest
// statemodel.RecentEvents at most. Fewer than the snapshot's seq makes the
// ledger look an unknown event up in the whole history (SeenBefore), so
// duplicates stay exact.
func recentOf(trs []statemodel.Transition) []statemodel.SeenEvent {
	if len(trs) == 0 {
		return nil
	}
	trs = trs[max(0, len(trs)-statemodel.RecentEvents):]
	out := make([]statemodel.SeenEvent, len(trs))
	for i, tr := range trs {
		out[i] = statemodel.SeenEvent{ID: statemodel.EventDigest(tr.EventID), Seq: tr.Seq, To: tr.To}
	}
	return out
}

// GetInstance reads one instance with a strongly consistent GetItem.
func (s *instances) GetInstance(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, error) {
	if err := ledger.CheckInstanceKey(key); err != nil {
		return ledger.Instance{}, fmt.Errorf("get instance %s: %w", key, err)
	}
	pk, err := s.instancePK(ctx, key)
	if err != nil {
		return ledger.Instance{}, fmt.Errorf("get instance %s: %w", key, err)
	}
	inst, err := getItem(ctx, s.base, pk, instanceSK(key.Task), decodeInstance)
	if err == nil && ledger.Expired(inst.ExpiresAt, s.clock()) {
		err = ledger.ErrNotFound // its run expired: gone, as the run is
	}
	if err != nil {
		return ledger.Instance{}, fmt.Errorf("get instance %s: %w", key, err)
	}
	return inst, nil
}

// GetAttempt reads attempt n: its record and its late events. The record
// of an attempt the instance still holds (statemodel.MaxInlineAttempts) is
// the instance's; an older one's is its attempt item's, written when the
// instance let it go. Late events live in the attempt item. One strongly
// consistent GetItem of the attempt item, and one of the instance when the
// item holds no record.
func (s *instances) GetAttempt(ctx context.Context, key ledger.InstanceKey, n int) (ledger.Attempt, error) {
	op := func(err error) error { return fmt.Errorf("get attempt %s#%d: %w", key, n, err) }
	if err := ledger.CheckInstanceKey(key); err != nil {
		return ledger.Attempt{}, op(err)
	}
	if n < 1 {
		return ledger.Attempt{}, op(fmt.Errorf("%w: attempt %d", ledger.ErrInvalidInput, n))
	}
	pk, err := s.instancePK(ctx, key)
	if err != nil {
		return ledger.Attempt{}, op(err)
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: keyOf(pk, attemptSK(key.Task, n)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return ledger.Attempt{}, op(translate(err))
	}
	a := ledger.Attempt{AttemptRecord: statemodel.AttemptRecord{N: n}}
	if out.Item != nil {
		r := &reader{it: out.Item}
		a = decodeAttempt(r)
		if r.err != nil {
			return ledger.Attempt{}, op(r.err)
		}
	}
	if a.HasRecord() {
		return a, nil
	}
	inst, err := s.GetInstance(ctx, key)
	if err != nil {
		return ledger.Attempt{}, op(err)
	}
	rec, ok := inst.Snapshot.AttemptN(n)
	if !ok {
		return ledger.Attempt{}, op(ledger.ErrNotFound)
	}
	a.AttemptRecord = rec
	return a, nil
}

// Fence is the ConditionCheck a worker's own TransactWriteItems adds to
// commit only while attempt owns the instance at key: the item's attempt
// is that number and its state one of statemodel.AttemptOwningStates (a
// read of nothing: the key's partition is the run's, or a map child's as
// its map's layout says).
func (s *instances) Fence(ctx context.Context, key ledger.InstanceKey, attempt int) (protocol.Fence, bool, error) {
	op := func(err error) error { return fmt.Errorf("fence %s#%d: %w", key, attempt, err) }
	if err := ledger.CheckInstanceKey(key); err != nil {
		return protocol.Fence{}, false, op(err)
	}
	if attempt < 1 {
		return protocol.Fence{}, false, op(fmt.Errorf("%w: attempt %d", ledger.ErrInvalidInput, attempt))
	}
	pk, err := s.instancePK(ctx, key)
	if err != nil {
		return protocol.Fence{}, false, op(err)
	}
	f := protocol.Fence{
		Table:  s.table,
		Key:    map[string]string{tableschema.PK: pk, tableschema.SK: instanceSK(key.Task)},
		Names:  map[string]string{"#a": attrAttempt, "#s": attrState},
		Values: map[string]any{":a": attempt},
	}
	var states []string
	for i, st := range statemodel.AttemptOwningStates() {
		v := fmt.Sprintf(":s%d", i)
		f.Values[v] = string(st)
		states = append(states, v)
	}
	f.Condition = "#a = :a AND #s IN (" + strings.Join(states, ", ") + ")"
	return f, true, nil
}

// asConflict turns the failed condition of an instance write into a
// *ledger.ConflictError with the item as DynamoDB found it, so the loop
// decides again from it; without an ALL_OLD image (an endpoint that sends
// none) the next round re-reads. ok is false for any other error.
func asConflict(key ledger.InstanceKey, err error) (*ledger.ConflictError, bool) {
	old, ok := conditionItem(err)
	if !ok {
		return nil, false
	}
	conflict := &ledger.ConflictError{Key: key}
	if len(old) > 0 {
		if found, derr := decodeInstance(old); derr == nil {
			conflict.Current = &found
		}
	}
	return conflict, true
}

// WriteInstance writes decisions made from from.Snapshot and returns the
// instance as written (ledger.InstanceStorage).
//
// Applied: ONE conditional UpdateItem of the instance, preceded only when
// a list is full by the spills of history.go:
//
//	instance  Update  SET the new snapshot, the timer attributes (REMOVE them
//	                  when the new state waits on no time) and the inline
//	                  history with the transition records appended
//	          condition  #state = :expected_state AND #version = :expected_version
//	                     [lease.expired: AND #lease_expires_at <= :now]
//	          fails when another transition (or, for lease.expired, a
//	          heartbeat) got there first: *ledger.ConflictError with the
//	          item as found.
//
// The state change, its history record and the event's id (in the
// record, whose ids are the snapshot's recent ids) are one atomic write:
// there is no separate record or guard item that a crash could leave
// behind. The item stays within instanceBudget (history.go).
//
// Refreshed (a heartbeat that changes no state): one UpdateItem of the
// instance's lease and timer, condition #state = :expected_state AND
// #version = :expected_version; fails as above.
func (s *instances) WriteInstance(ctx context.Context, from ledger.Instance, ds []statemodel.Decision) (ledger.Instance, error) {
	if err := ledger.CheckInstanceKey(from.Key); err != nil {
		return from, err
	}
	switch {
	case len(ds) == 1 && ds[0].Outcome == statemodel.Refreshed:
		return s.refreshLease(ctx, from, ds[0].Snapshot)
	case len(ds) == 0:
		return from, fmt.Errorf("%w: no decision to write", ledger.ErrInvalidInput)
	}
	for _, d := range ds {
		if d.Outcome != statemodel.Applied {
			return from, fmt.Errorf("%w: a %s decision among the written ones", ledger.ErrInvalidInput, d.Outcome)
		}
	}
	return s.writeTransitions(ctx, from, ds)
}

// writeTransitions writes applied decisions, made in order from
// inst.Snapshot, as one conditional UpdateItem (see WriteInstance).
func (s *instances) writeTransitions(ctx context.Context, inst ledger.Instance, ds []statemodel.Decision) (ledger.Instance, error) {
	key, from := inst.Key, inst.Snapshot
	trs := make([]statemodel.Transition, 0, len(ds))
	expiry := false
	for _, d := range ds {
		if d.Transition == nil {
			return inst, fmt.Errorf("%w: applied decision without a transition", ledger.ErrInvalidInput)
		}
		if err := ledger.CheckEventID(key, d.Transition.EventID); err != nil {
			return inst, err
		}
		trs = append(trs, *d.Transition)
		expiry = expiry || d.Transition.Event == statemodel.EvLeaseExpired
	}
	d := ds[len(ds)-1]
	tr := trs[len(trs)-1]
	pk, err := s.instancePK(ctx, key)
	if err != nil {
		return inst, err
	}
	sk := instanceSK(key.Task)

	next := inst
	next.Snapshot = d.Snapshot
	next.TimerAt, next.TimerKind = ledger.IndexedTimer(key, d.Snapshot, tr.ObservedAt, s.horizon)
	spill, keep := planHistory(func(keep []statemodel.Transition) int {
		next.History = keep
		return itemSize(instanceItem(pk, next).present())
	}, inst.History, trs...)
	next.History = keep
	full := instanceItem(pk, next)
	fullSize, err := checkSize("instance "+key.String(), full.present())
	if err != nil {
		return inst, err
	}
	if len(spill) > 0 {
		if err := s.putHistory(ctx, inst, spill); err != nil {
			return inst, err
		}
	}
	if err := s.putEvictedAttempts(ctx, inst, d.Snapshot); err != nil {
		return inst, err
	}

	ie := newExpr()
	set := snapshotItem(d.Snapshot)
	for k, v := range timerItem(pk, sk, next.TimerAt, next.TimerKind) {
		set[k] = v
	}
	set[attrRecs] = full[attrRecs]
	set[attrInlineAttempts] = full[attrInlineAttempts]
	set[attrHistory] = nil
	cond := ie.n(attrState) + " = " + ie.v("expected_state", str(string(from.State))) +
		" AND " + ie.n(attrVersion) + " = " + ie.v("expected_version", num(from.Version))
	if expiry {
		// A heartbeat may have refreshed the lease without bumping the
		// version: the expiry must still be past.
		cond += " AND " + ie.n(attrLeaseExpires) + " <= " + ie.v("now", str(ledger.FormatTime(tr.ObservedAt)))
	}
	if change := ledger.MapCountChange(key, from.State, d.Snapshot.State); change != nil {
		// A map child entering or leaving an end: its map's counts move
		// in the same atomic write.
		update := &types.Update{
			TableName: aws.String(s.table), Key: keyOf(pk, sk),
			UpdateExpression: aws.String(ie.update(set)), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: ie.nameMap(), ExpressionAttributeValues: ie.valueMap(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
		if err := s.maps.writeChildEnd(ctx, inst, update, change); err != nil {
			return inst, err
		}
		return next, nil
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(pk, sk),
		UpdateExpression: aws.String(ie.update(set)), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: ie.nameMap(), ExpressionAttributeValues: ie.valueMap(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              s.returnCapacity(),
	})
	if err != nil {
		if conflict, ok := asConflict(key, err); ok {
			return inst, conflict
		}
		return inst, translate(err)
	}
	s.report("transition", false, []int{fullSize}, timerIndexWrites(instanceItem(pk, inst), full), consumed(out.ConsumedCapacity))
	return next, nil
}

// refreshLease writes a Refreshed decision: the lease and the timer, no
// history, no version bump.
//
//	condition  #state = :expected_state AND #version = :expected_version
//	fails when a transition moved the instance: *ledger.ConflictError.
func (s *instances) refreshLease(ctx context.Context, inst ledger.Instance, n statemodel.Snapshot) (ledger.Instance, error) {
	pk, err := s.instancePK(ctx, inst.Key)
	if err != nil {
		return inst, err
	}
	sk := instanceSK(inst.Key.Task)
	next := inst
	next.Snapshot = n
	next.TimerAt, next.TimerKind = ledger.IndexedTimer(inst.Key, n, n.Lease.LastHeartbeatAt, s.horizon)
	set := item{attrLeaseBeat: tm(n.Lease.LastHeartbeatAt), attrLeaseExpires: tm(n.Lease.ExpiresAt)}
	for k, v := range timerItem(pk, sk, next.TimerAt, next.TimerKind) {
		set[k] = v
	}
	e := newExpr()
	cond := e.n(attrState) + " = " + e.v("expected_state", str(string(inst.Snapshot.State))) +
		" AND " + e.n(attrVersion) + " = " + e.v("expected_version", num(inst.Snapshot.Version))
	size := itemSize(instanceItem(pk, next).present())
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(pk, sk),
		UpdateExpression: aws.String(e.update(set)), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              s.returnCapacity(),
	})
	if err != nil {
		if conflict, ok := asConflict(inst.Key, err); ok {
			return inst, conflict
		}
		return inst, translate(err)
	}
	var cc []types.ConsumedCapacity
	if out.ConsumedCapacity != nil {
		cc = []types.ConsumedCapacity{*out.ConsumedCapacity}
	}
	s.report("refresh_lease", false, []int{size}, timerIndexWrites(instanceItem(pk, inst), instanceItem(pk, next)), cc)
	return next, nil
}

// AppendLate records a late event on its (older) attempt's item, creating
// the item when the attempt has none yet. The instance item is untouched: a
// stale event never changes an instance. The caller knows the attempt
// exists (statemodel called the event stale against a newer attempt).
//
//	attempt  Update  SET #late_events = list_append(if_not_exists(#late_events, :empty), :late),
//	                     #kind, #run, #task, #n
//	                 ADD #late_event_ids :event_ids
//	condition  NOT contains(#late_event_ids, :event_id)
//	           AND (attribute_not_exists(#late_events) OR size(#late_events) < :max)
//	fails when the event was recorded before (the append is idempotent:
//	nil) or the item holds MaxLateEvents already: then
//
//	attempt  Update  ADD #late_events_dropped :one
//	condition  attribute_exists(#pk)
func (s *instances) AppendLate(ctx context.Context, key ledger.InstanceKey, late statemodel.LateEvent) error {
	op := func(err error) error {
		return fmt.Errorf("record late event %s on %s#%d: %w", late.EventID, key, late.Attempt, err)
	}
	if err := ledger.CheckLateEvent(key, late); err != nil {
		return op(err)
	}
	entry := lateEventItem(late).present()
	if _, err := checkSize("late event", entry); err != nil {
		return op(err)
	}
	pk, err := s.instancePK(ctx, key)
	if err != nil {
		return op(err)
	}
	sk := attemptSK(key.Task, late.Attempt)
	// The attempt item may be created here, so it takes its run's expiry,
	// from the instance (late events are rare: one read each).
	expires, err := s.expiryOf(ctx, pk, instanceSK(key.Task))
	if err != nil {
		return op(err)
	}
	e := newExpr()
	// The item may not exist yet: an attempt the instance still holds has
	// no item until its first late event or its eviction.
	upd := "SET " + e.n(attrLateEvents) + " = list_append(if_not_exists(" + e.n(attrLateEvents) + ", " +
		e.v("empty", &types.AttributeValueMemberL{Value: []types.AttributeValue{}}) + "), " +
		e.v("late", &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: entry}}}) + ")" +
		", " + e.n(attrKind) + " = " + e.v("kind", str(kindAttempt)) + ", " + e.n(attrRun) + " = " + e.v("run", str(key.Run)) +
		", " + e.n(attrTask) + " = " + e.v("task", str(key.Task)) + ", " + e.n(attrN) + " = " + e.v("n", num(int64(late.Attempt)))
	if !expires.IsZero() {
		upd += ", " + e.n(tableschema.TTL) + " = " + e.v("expires_at", expiry(expires))
	}
	upd += " ADD " + e.n(attrLateEventIDs) + " " + e.v("event_ids", &types.AttributeValueMemberSS{Value: []string{late.EventID}})
	cond := "NOT contains(" + e.n(attrLateEventIDs) + ", " +
		e.v("event_id", str(late.EventID)) + ") AND (attribute_not_exists(" + e.n(attrLateEvents) + ") OR size(" +
		e.n(attrLateEvents) + ") < " + e.v("max", num(ledger.MaxLateEvents)) + ")"
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(pk, sk),
		UpdateExpression: aws.String(upd), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              s.returnCapacity(),
		ReturnValues:                        types.ReturnValueNone,
	})
	if err != nil {
		old, ok := conditionItem(err)
		if !ok {
			return op(translate(err))
		}
		if len(old) == 0 {
			// Either no item, or an endpoint without ALL_OLD images:
			// tell them apart with a read.
			got, rerr := s.db.GetItem(ctx, &dynamodb.GetItemInput{
				TableName: aws.String(s.table), Key: keyOf(pk, sk), ConsistentRead: aws.Bool(true),
			})
			if rerr != nil {
				return op(translate(rerr))
			}
			if got.Item == nil {
				return op(ledger.ErrNotFound)
			}
			old = got.Item
		}
		if recorded(old, late.EventID) {
			return nil
		}
		return s.countDroppedLate(ctx, pk, sk, op)
	}
	var cc []types.ConsumedCapacity
	if out.ConsumedCapacity != nil {
		cc = []types.ConsumedCapacity{*out.ConsumedCapacity}
	}
	s.report("record_late", false, []int{itemSize(entry)}, nil, cc)
	return nil
}

// recorded reports whether the attempt item holds the late event's id.
func recorded(it map[string]types.AttributeValue, eventID string) bool {
	ids, ok := it[attrLateEventIDs].(*types.AttributeValueMemberSS)
	return ok && slices.Contains(ids.Value, eventID)
}

// countDroppedLate counts one late event past MaxLateEvents.
func (s *instances) countDroppedLate(ctx context.Context, pk, sk string, op func(error) error) error {
	e := newExpr()
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(pk, sk),
		UpdateExpression:         aws.String("ADD " + e.n(attrLateDropped) + " " + e.v("one", num(1))),
		ConditionExpression:      aws.String("attribute_exists(" + e.n(tableschema.PK) + ")"),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		ReturnConsumedCapacity: s.returnCapacity(),
	})
	if err != nil {
		if _, ok := conditionItem(err); ok {
			return op(ledger.ErrNotFound)
		}
		return op(translate(err))
	}
	var cc []types.ConsumedCapacity
	if out.ConsumedCapacity != nil {
		cc = []types.ConsumedCapacity{*out.ConsumedCapacity}
	}
	s.report("count_dropped_late", false, []int{0}, nil, cc)
	return nil
}

// Heartbeat renews the lease of attempt n: a cheap conditional UpdateItem,
// no history record, no version bump. The token check is the caller's.
//
//	RUNNING     SET the lease, and the timer (the lease is RUNNING's timer)
//	            when the timers index holds it (ledger.IndexesTimer: a
//	            lease further off than ledger.TimerHorizon), else REMOVE
//	            the timer: a near lease rides the delay message armed at
//	            the claim, so a heartbeat writes no index entry
//	            condition  #state = :running AND #attempt = :attempt
//	CANCELLING  SET the lease only (the timer is the cancel deadline)
//	            condition  #state = :cancelling AND #attempt = :attempt
//
// It tries the RUNNING form; a failed condition returns the item as found
// (ALL_OLD), which decides: CANCELLING with attempt n takes the second form;
// LOST with attempt n is ErrLostNeedsTransition (the caller applies
// EvHeartbeat with Transition: it is a real transition); an older attempt is
// ErrStaleAttempt; anything else a *statemodel.TransitionError
// (ErrIllegalTransition, ErrUnknownAttempt); no item, ErrNotFound.
func (s *instances) Heartbeat(ctx context.Context, key ledger.InstanceKey, attempt int, now time.Time, lease time.Duration) (ledger.HeartbeatResult, error) {
	op := func(err error) error { return fmt.Errorf("heartbeat %s#%d: %w", key, attempt, err) }
	if err := ledger.CheckInstanceKey(key); err != nil {
		return ledger.HeartbeatResult{}, op(err)
	}
	if lease <= 0 || attempt < 1 {
		return ledger.HeartbeatResult{}, op(fmt.Errorf("%w: lease %s, attempt %d", ledger.ErrInvalidInput, lease, attempt))
	}
	b := &beat{s: s, key: key, attempt: attempt, now: now, expires: now.Add(lease)}
	if err := ledger.Update(ctx, ledger.Rounds{Max: ledger.MaxRounds}, b.read, b.decide, b.write); err != nil {
		return ledger.HeartbeatResult{}, op(err)
	}
	return b.res, nil
}

// beat is one Heartbeat as it goes from round to round.
type beat struct {
	s       *instances
	key     ledger.InstanceKey
	attempt int
	now     time.Time
	expires time.Time
	found   item // the item a refused write found (ALL_OLD; empty: none)
	res     ledger.HeartbeatResult
}

// read answers the instance's snapshot as the last refused write found
// it (read when it found no item), nil in the first round: a live
// attempt's instance is RUNNING, so that form is tried first.
func (b *beat) read(ctx context.Context, round int) (*statemodel.Snapshot, error) {
	if round == 0 {
		return nil, nil
	}
	if len(b.found) == 0 {
		inst, err := b.s.GetInstance(ctx, b.key)
		if err != nil {
			return nil, err
		}
		pk, err := b.s.instancePK(ctx, b.key)
		if err != nil {
			return nil, err
		}
		b.found = instanceItem(pk, inst).present()
	}
	r := &reader{it: b.found}
	cur := readSnapshot(r)
	return &cur, r.err
}

// decide picks the form of the write: RUNNING first, then the state the
// instance is found in (ledger.HeartbeatTarget).
func (b *beat) decide(_ context.Context, cur *statemodel.Snapshot) (statemodel.InstanceState, ledger.Step, error) {
	if cur == nil {
		return statemodel.StateRunning, ledger.StepWrite, nil
	}
	next, err := ledger.HeartbeatTarget(*cur, b.attempt)
	return next, ledger.StepWrite, err
}

// write renews the lease conditioned on state and the attempt; a failed
// condition keeps the item found for the next round's decision.
func (b *beat) write(ctx context.Context, state statemodel.InstanceState) error {
	s := b.s
	pk, err := s.instancePK(ctx, b.key)
	if err != nil {
		return err
	}
	sk := instanceSK(b.key.Task)
	e := newExpr()
	set := item{attrLeaseBeat: tm(b.now), attrLeaseExpires: tm(b.expires)}
	if state == statemodel.StateRunning {
		at, kind := time.Time{}, statemodel.TimerNone
		if ledger.IndexesTimer(b.key, b.expires, b.now, s.horizon) {
			at, kind = b.expires, statemodel.TimerLease
		}
		for k, v := range timerItem(pk, sk, at, kind) {
			set[k] = v
		}
	}
	cond := e.n(attrState) + " = " + e.v("state", str(string(state))) +
		" AND " + e.n(attrAttempt) + " = " + e.v("attempt", num(int64(b.attempt)))
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(pk, sk),
		UpdateExpression: aws.String(e.update(set)), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnValues:                        s.returnOldForReport(),
		ReturnConsumedCapacity:              s.returnCapacity(),
	})
	if err != nil {
		found, ok := conditionItem(err)
		if !ok {
			return translate(err)
		}
		b.found = found
		return fmt.Errorf("%w: instance %s is not %s with attempt %d", ledger.ErrVersionConflict, b.key, state, b.attempt)
	}
	// RUNNING never has a cancel request (a requested cancel moves it to
	// CANCELLING) and CANCELLING always has one.
	b.res = ledger.HeartbeatResult{State: state, CancelRequested: state == statemodel.StateCancelling, LeaseExpiresAt: b.expires}
	var cc []types.ConsumedCapacity
	if out.ConsumedCapacity != nil {
		cc = []types.ConsumedCapacity{*out.ConsumedCapacity}
	}
	if s.capacity != nil {
		next := item{}
		for k, v := range out.Attributes {
			next[k] = v
		}
		for k, v := range set {
			next[k] = v
		}
		// The index entries the heartbeat wrote: none while its lease
		// rides a delay message; a move (a delete and a put) for a lease
		// the index holds; a delete for an entry an older write left.
		s.report("heartbeat", false, []int{itemSize(next.present())}, timerIndexWrites(out.Attributes, next), cc)
	}
	return nil
}

// FullHistory pages History to the end.
func (s *instances) FullHistory(ctx context.Context, key ledger.InstanceKey) ([]statemodel.Transition, error) {
	return ledger.FullHistory(ctx, s, key)
}

// GetInstanceAndRun reads an instance and its run in ONE strongly
// consistent BatchGetItem: a claim answers with the attempt's envelope,
// which holds the run's params and logical time. A run whose params are
// stored apart (below, "A run's params") has them read after, with one GetItem: the
// batch cannot know before it reads the run item. ErrNotFound when either
// is missing.
func (s *instances) GetInstanceAndRun(ctx context.Context, key ledger.InstanceKey) (ledger.Instance, ledger.Run, error) {
	op := func(err error) error { return fmt.Errorf("get instance %s with its run: %w", key, err) }
	if err := ledger.CheckInstanceKey(key); err != nil {
		return ledger.Instance{}, ledger.Run{}, op(err)
	}
	pk, err := s.instancePK(ctx, key)
	if err != nil {
		return ledger.Instance{}, ledger.Run{}, op(err)
	}
	keys := []map[string]types.AttributeValue{keyOf(runPK(key.Run), skRun), keyOf(pk, instanceSK(key.Task))}
	req := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
	var inst *ledger.Instance
	var run *ledger.Run
	ref, pRef := "", ""
	for try := 0; len(req) > 0; try++ {
		out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return ledger.Instance{}, ledger.Run{}, op(translate(err))
		}
		for _, it := range out.Responses[s.table] {
			switch (&reader{it: it}).str(attrKind) {
			case kindRun:
				r, err := decodeRun(it)
				if err != nil {
					return ledger.Instance{}, ledger.Run{}, op(err)
				}
				run, ref, pRef = &r, specRefOf(it), paramsRefOf(it)
			case kindInstance:
				i, err := decodeInstance(it)
				if err != nil {
					return ledger.Instance{}, ledger.Run{}, op(err)
				}
				inst = &i
			}
		}
		req = out.UnprocessedKeys
		if len(req) > 0 {
			if try >= conflictRetries {
				return ledger.Instance{}, ledger.Run{}, op(fmt.Errorf("%w: unprocessed keys after %d tries", ledger.ErrThrottled, try+1))
			}
			if err := backoff(ctx, try); err != nil {
				return ledger.Instance{}, ledger.Run{}, op(err)
			}
		}
	}
	if inst == nil || run == nil {
		return ledger.Instance{}, ledger.Run{}, op(ledger.ErrNotFound)
	}
	if err := s.runSpec(ctx, run, ref); err != nil {
		return ledger.Instance{}, ledger.Run{}, op(err)
	}
	if err := s.runParams(ctx, run, pRef, nil); err != nil {
		return ledger.Instance{}, ledger.Run{}, op(err)
	}
	if err := s.legacyTrigger(ctx, run); err != nil {
		return ledger.Instance{}, ledger.Run{}, op(err)
	}
	return *inst, *run, nil
}
