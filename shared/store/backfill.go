package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// Backfill limits (docs/api.md, "Backfill").
const (
	MaxBackfillSlots  = 1000
	MaxBackfillActive = 100
)

// BackfillRun is a run a backfill released for one of its slots and has
// not seen end yet.
type BackfillRun struct {
	Run  string
	Slot time.Time
}

// Backfill is a backfill item: the slots of a range it has still to
// release (Pending, oldest first), the runs it released that have not
// ended (Active, at most MaxActive), and what became of the others. Every
// slot of the range is in exactly one place:
//
//	Slots = Existing + len(Pending) + len(Active) + Succeeded + Failed + Cancelled
//
// Existing counts the slots that had a run already (found when the
// backfill was posted, or when a release found the slot taken);
// Cancelled counts runs that ended CANCELLED and pending slots dropped by
// a cancel. Its State is derived (statemodel.DeriveBackfillState) and
// stored with every write, which is a compare-and-set on Version.
type Backfill struct {
	ID        string // a ULID, so backfill ids sort by creation time
	Job       string
	From, To  time.Time
	MaxActive int
	Params    []byte // opaque JSON, the params of every run it releases

	Slots           int
	Existing        int
	Pending         []time.Time
	Active          []BackfillRun
	Succeeded       int
	Failed          int
	Cancelled       int
	CancelRequested bool

	State     statemodel.BackfillState
	CreatedAt time.Time
	EndedAt   time.Time
	Version   int64
	// TimerAt is the backstop while the backfill is unfinished: the
	// ticker settles its runs and releases its slots then, should every
	// path that does so at once have failed.
	TimerAt time.Time
	// WakeAt asks a write for a backstop no later than this: the written
	// TimerAt is the earlier of WakeAt and the store's clock + backstop.
	// It is not stored; a caller that stopped releasing with slots still
	// releasable sets it to now, so the next tick goes on.
	WakeAt time.Time
}

// Created is the number of runs the backfill starts (or started).
func (b Backfill) Created() int { return b.Slots - b.Existing }

// Unfinished reports whether the backfill has slots to release or runs
// that have not ended.
func (b Backfill) Unfinished() bool { return len(b.Pending) > 0 || len(b.Active) > 0 }

// CheckNewBackfill refuses a backfill CreateBackfill must not write: bad
// keys, max_active outside 1..MaxBackfillActive, more than
// MaxBackfillSlots slots, pending slots out of order or outside the range,
// counts that do not add up, or one that released or ended anything yet.
func CheckNewBackfill(b Backfill) error {
	if err := checkBackfill(b.ID); err != nil {
		return err
	}
	if err := checkJob(b.Job); err != nil {
		return err
	}
	switch {
	case !b.From.Before(b.To):
		return fmt.Errorf("%w: backfill range [%s, %s) is empty", ErrInvalidInput, formatTime(b.From), formatTime(b.To))
	case b.Slots > MaxBackfillSlots:
		return fmt.Errorf("%w: %d slots, at most %d", ErrInvalidInput, b.Slots, MaxBackfillSlots)
	case len(b.Active) > 0 || b.Succeeded+b.Failed+b.Cancelled > 0 || b.CancelRequested:
		return fmt.Errorf("%w: a new backfill has released and ended nothing", ErrInvalidInput)
	}
	for i, t := range b.Pending {
		if t.Before(b.From) || !t.Before(b.To) || (i > 0 && !b.Pending[i-1].Before(t)) {
			return fmt.Errorf("%w: pending slot %s out of order or outside the range", ErrInvalidInput, formatTime(t))
		}
	}
	return checkBackfillCounts(b)
}

// CheckBackfillCounts refuses a backfill whose max_active or counts are
// out of bounds or do not add up to its slots (UpdateBackfill).
func CheckBackfillCounts(b Backfill) error { return checkBackfillCounts(b) }

func checkBackfillCounts(b Backfill) error {
	switch {
	case b.MaxActive < 1 || b.MaxActive > MaxBackfillActive:
		return fmt.Errorf("%w: max_active %d outside 1..%d", ErrInvalidInput, b.MaxActive, MaxBackfillActive)
	case len(b.Active) > b.MaxActive:
		return fmt.Errorf("%w: %d runs active, at most %d", ErrInvalidInput, len(b.Active), b.MaxActive)
	case b.Existing < 0 || b.Succeeded < 0 || b.Failed < 0 || b.Cancelled < 0:
		return fmt.Errorf("%w: negative backfill count", ErrInvalidInput)
	case b.Slots != b.Existing+len(b.Pending)+len(b.Active)+b.Succeeded+b.Failed+b.Cancelled:
		return fmt.Errorf("%w: backfill %s counts %d slots but holds %d", ErrInvalidInput, b.ID, b.Slots,
			b.Existing+len(b.Pending)+len(b.Active)+b.Succeeded+b.Failed+b.Cancelled)
	}
	return nil
}

// NextBackfill is b as a write stores it: its state derived, its end time
// set when it ended (stamp), its backstop moved to stamp + backstop (or
// b.WakeAt, when earlier) while unfinished, and the next version.
func NextBackfill(b Backfill, stamp time.Time, backstop time.Duration) Backfill {
	next := b
	next.Pending = slices.Clone(b.Pending)
	next.Active = slices.Clone(b.Active)
	next.State = statemodel.DeriveBackfillState(b.Unfinished(), b.CancelRequested, b.Failed, b.Cancelled)
	next.TimerAt, next.WakeAt = time.Time{}, time.Time{}
	if b.Unfinished() {
		next.TimerAt = stamp.Add(backstop)
		if !b.WakeAt.IsZero() && b.WakeAt.Before(next.TimerAt) {
			next.TimerAt = b.WakeAt
		}
	} else if next.EndedAt.IsZero() {
		next.EndedAt = stamp
	}
	next.Version = b.Version + 1
	return next
}

// ReleaseNext is b after releasing its oldest pending slot as run: the
// slot leaves Pending and the run joins Active. It refuses (ErrInvalidInput)
// a release of a cancelled backfill, of one with nothing pending, or one
// past max_active: so a release decided from a copy that is still current
// (the write's condition) never exceeds max_active.
func ReleaseNext(b Backfill, run string, slot time.Time) (Backfill, error) {
	switch {
	case b.CancelRequested:
		return b, fmt.Errorf("%w: backfill %s is cancelled", ErrInvalidInput, b.ID)
	case len(b.Pending) == 0 || !b.Pending[0].Equal(slot):
		return b, fmt.Errorf("%w: %s is not backfill %s's oldest pending slot", ErrInvalidInput, formatTime(slot), b.ID)
	case len(b.Active) >= b.MaxActive:
		return b, fmt.Errorf("%w: backfill %s has %d runs active, at most %d", ErrInvalidInput, b.ID, len(b.Active), b.MaxActive)
	}
	next := b
	next.Pending = slices.Clone(b.Pending[1:])
	next.Active = append(slices.Clone(b.Active), BackfillRun{Run: run, Slot: slot})
	return next, nil
}

const (
	prefixBackfill    = "BACKFILL#"
	skBackfill        = "BACKFILL"
	kindBackfill      = "backfill"
	kindBackfillPtr   = "backfill_pointer"
	timerKindBackfill = "backfill_backstop"

	attrMaxActive  = "max_active"
	attrSlots      = "slots"
	attrExisting   = "existing"
	attrPending    = "pending"
	attrActive     = "active"
	attrSlot       = "slot"
	attrSucceeded  = "succeeded"
	attrFailed     = "failed"
	attrCancelledN = "cancelled"
	attrBfState    = "backfill_state"
)

// TimerKindBackfill is the timer kind of a backfill's backstop.
const TimerKindBackfill = timerKindBackfill

func backfillPK(id string) string        { return prefixBackfill + id }
func backfillPointerSK(id string) string { return prefixBackfill + id }

const maxBackfillBytes = MaxSortKeyBytes - len(prefixBackfill)

func checkBackfill(id string) error { return checkName("backfill", id, maxBackfillBytes) }

// CheckBackfillID validates a backfill id (InvalidKeyError).
func CheckBackfillID(id string) error { return checkBackfill(id) }

func backfillItem(b Backfill) item {
	it := item{
		tableschema.PK: str(backfillPK(b.ID)), tableschema.SK: str(skBackfill),
		attrKind: str(kindBackfill), attrID: str(b.ID), attrJob: str(b.Job),
		attrFrom: tm(b.From), attrTo: tm(b.To), attrMaxActive: num(int64(b.MaxActive)),
		attrParams: bin(b.Params), attrSlots: num(int64(b.Slots)), attrCreatedAt: tm(b.CreatedAt),
	}
	for k, v := range backfillStateItem(b) {
		it[k] = v
	}
	return it
}

// backfillStateItem holds the fields UpdateBackfill and a release change.
func backfillStateItem(b Backfill) item {
	pending := make([]string, len(b.Pending))
	for i, t := range b.Pending {
		pending[i] = formatTime(t)
	}
	var active types.AttributeValue
	if len(b.Active) > 0 {
		l := make([]types.AttributeValue, len(b.Active))
		for i, a := range b.Active {
			l[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{attrRunID: str(a.Run), attrSlot: str(formatTime(a.Slot))}}
		}
		active = &types.AttributeValueMemberL{Value: l}
	}
	it := item{
		attrExisting: num(int64(b.Existing)), attrPending: strList(pending), attrActive: active,
		attrSucceeded: num(int64(b.Succeeded)), attrFailed: num(int64(b.Failed)), attrCancelledN: num(int64(b.Cancelled)),
		attrCancelReq: optBool(b.CancelRequested), attrBfState: str(string(b.State)),
		attrEndedAt: tm(b.EndedAt), attrVersion: num(b.Version),
		tableschema.TimerShard: nil, tableschema.TimerAt: nil, attrTimerKind: nil,
	}
	if !b.TimerAt.IsZero() {
		it[tableschema.TimerShard] = str(timerShard(backfillPK(b.ID), skBackfill))
		it[tableschema.TimerAt] = str(formatTime(b.TimerAt))
		it[attrTimerKind] = str(timerKindBackfill)
	}
	return it
}

func decodeBackfill(m map[string]types.AttributeValue) (Backfill, error) {
	r := &reader{it: m}
	b := Backfill{
		ID: r.str(attrID), Job: r.str(attrJob), From: r.time(attrFrom), To: r.time(attrTo),
		MaxActive: int(r.int(attrMaxActive)), Params: r.bytes(attrParams), Slots: int(r.int(attrSlots)),
		Existing: int(r.int(attrExisting)), Succeeded: int(r.int(attrSucceeded)), Failed: int(r.int(attrFailed)),
		Cancelled: int(r.int(attrCancelledN)), CancelRequested: r.bool(attrCancelReq),
		State: statemodel.BackfillState(r.str(attrBfState)), CreatedAt: r.time(attrCreatedAt), EndedAt: r.time(attrEndedAt),
		Version: r.int(attrVersion), TimerAt: r.time(tableschema.TimerAt),
	}
	for _, s := range r.strList(attrPending) {
		t, err := parseTime(s)
		if err != nil {
			r.fail(attrPending, "a list of times")
		}
		b.Pending = append(b.Pending, t)
	}
	for _, a := range r.maps(attrActive) {
		sub := &reader{it: a}
		b.Active = append(b.Active, BackfillRun{Run: sub.str(attrRunID), Slot: sub.time(attrSlot)})
		if sub.err != nil && r.err == nil {
			r.err = sub.err
		}
	}
	return b, r.err
}

// CreateBackfill writes a new backfill (version 1, its state derived) and
// its pointer under the job in ONE TransactWriteItems:
//
//	backfill  Put  BACKFILL#<id>/BACKFILL  attribute_not_exists(#pk)
//	pointer   Put  JOB#<job>/BACKFILL#<id>  attribute_not_exists(#pk)
//	          either failing: the id exists (ErrAlreadyExists).
//
// Its backstop is b.TimerAt, or the store's clock + its run backstop when
// zero; a backfill with nothing to run is written ended.
func (s *Store) CreateBackfill(ctx context.Context, b Backfill) (Backfill, error) {
	op := func(err error) error { return fmt.Errorf("create backfill %s of job %s: %w", b.ID, b.Job, err) }
	if err := CheckNewBackfill(b); err != nil {
		return Backfill{}, op(err)
	}
	stamp := s.clock()
	b = newBackfill(b, stamp, s.backstop)
	it := backfillItem(b).present()
	n, err := checkSize("backfill "+b.ID, it)
	if err != nil {
		return Backfill{}, op(err)
	}
	ptr := item{
		tableschema.PK: str(jobPK(b.Job)), tableschema.SK: str(backfillPointerSK(b.ID)),
		attrKind: str(kindBackfillPtr), attrID: str(b.ID), attrCreatedAt: tm(b.CreatedAt),
	}.present()
	names := map[string]string{"#pk": tableschema.PK}
	cond := aws.String("attribute_not_exists(#pk)")
	err = s.transact(ctx, "create_backfill", []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.table), Item: it, ConditionExpression: cond, ExpressionAttributeNames: names}},
		{Put: &types.Put{TableName: aws.String(s.table), Item: ptr, ConditionExpression: cond, ExpressionAttributeNames: names}},
	}, []int{n, itemSize(ptr)}, timerIndexWrites(nil, backfillItem(b)))
	if err != nil {
		if reasons := cancellation(err); reasons != nil && (conditionFailed(reasons, 0) || conditionFailed(reasons, 1)) {
			return Backfill{}, op(fmt.Errorf("%w: backfill %s", ErrAlreadyExists, b.ID))
		}
		return Backfill{}, op(translate(err))
	}
	return b, nil
}

// newBackfill is a new backfill as CreateBackfill writes it.
func newBackfill(b Backfill, stamp time.Time, backstop time.Duration) Backfill {
	timer := b.TimerAt
	b.Version = 0
	b = NextBackfill(b, stamp, backstop)
	if b.Unfinished() && !timer.IsZero() {
		b.TimerAt = timer
	}
	if b.CreatedAt.IsZero() {
		b.CreatedAt = stamp
	}
	return b
}

// GetBackfill reads a backfill (strongly consistent).
func (s *Store) GetBackfill(ctx context.Context, id string) (Backfill, error) {
	op := func(err error) error { return fmt.Errorf("get backfill %s: %w", id, err) }
	if err := checkBackfill(id); err != nil {
		return Backfill{}, op(err)
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: keyOf(backfillPK(id), skBackfill), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Backfill{}, op(translate(err))
	}
	if out.Item == nil {
		return Backfill{}, op(ErrNotFound)
	}
	b, err := decodeBackfill(out.Item)
	if err != nil {
		return Backfill{}, op(err)
	}
	return b, nil
}

// ListBackfills lists a job's backfills newest first: one strongly
// consistent Query of the job's backfill pointers, then the backfills
// (BatchGetItem). Callers page until the token is "".
func (s *Store) ListBackfills(ctx context.Context, job string, limit int, token string) ([]Backfill, string, error) {
	op := func(err error) error { return fmt.Errorf("list backfills of job %s: %w", job, err) }
	if err := checkJob(job); err != nil {
		return nil, "", op(err)
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	start, err := decodeToken(token, map[string]string{tableschema.PK: jobPK(job), tableschema.SK: ""})
	if err != nil {
		return nil, "", op(err)
	}
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table), ConsistentRead: aws.Bool(true), ScanIndexForward: aws.Bool(false),
		KeyConditionExpression: aws.String(e.prefixKey(jobPK(job), prefixBackfill)),
		ProjectionExpression:   aws.String(e.n(attrID)),
		Limit:                  aws.Int32(int32(min(limit, MaxListLimit))), ExclusiveStartKey: start,
	}
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.nameMap(), e.valueMap()
	out, err := s.db.Query(ctx, in)
	if err != nil {
		return nil, "", op(translate(err))
	}
	ids := make([]string, 0, len(out.Items))
	keys := make([]map[string]types.AttributeValue, 0, len(out.Items))
	for _, it := range out.Items {
		id := (&reader{it: it}).str(attrID)
		ids = append(ids, id)
		keys = append(keys, keyOf(backfillPK(id), skBackfill))
	}
	got := map[string]Backfill{}
	var derr error
	if err := s.batchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		b, err := decodeBackfill(it)
		if err != nil && derr == nil {
			derr = err
		}
		got[b.ID] = b
	}); err != nil {
		return nil, "", op(err)
	}
	if derr != nil {
		return nil, "", op(derr)
	}
	list := make([]Backfill, 0, len(ids))
	for _, id := range ids {
		if b, ok := got[id]; ok {
			list = append(list, b)
		}
	}
	return list, encodeToken(out.LastEvaluatedKey), nil
}

// UpdateBackfill stores what b now holds (its pending slots, active runs
// and counts; the range, job and params never change) with a
// compare-and-set on the version read (b.Version), in ONE UpdateItem:
//
//	backfill  Update  SET the counts, pending, active, state, ended_at,
//	                  version = :expected + 1, the backstop timer
//	          condition  #version = :expected_version
//	          fails: another writer stored first (ErrVersionConflict), or
//	          the backfill does not exist (ErrNotFound). Re-read, decide again.
//
// Counts that do not add up to the backfill's slots are refused
// (ErrInvalidInput) before any write.
func (s *Store) UpdateBackfill(ctx context.Context, b Backfill) (Backfill, error) {
	op := func(err error) error {
		return fmt.Errorf("update backfill %s from version %d: %w", b.ID, b.Version, err)
	}
	if err := checkBackfill(b.ID); err != nil {
		return Backfill{}, op(err)
	}
	if err := checkBackfillCounts(b); err != nil {
		return Backfill{}, op(err)
	}
	next := NextBackfill(b, s.clock(), s.backstop)
	e := newExpr()
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(backfillPK(b.ID), skBackfill),
		UpdateExpression:         aws.String(e.update(backfillStateItem(next))),
		ConditionExpression:      aws.String(e.n(attrVersion) + " = " + e.v("expected_version", num(b.Version))),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              s.returnCapacity(),
	})
	if err != nil {
		old, ok := conditionItem(err)
		if !ok {
			return Backfill{}, op(translate(err))
		}
		if len(old) == 0 {
			if _, gerr := s.GetBackfill(ctx, b.ID); errors.Is(gerr, ErrNotFound) {
				return Backfill{}, op(ErrNotFound)
			}
		}
		return Backfill{}, op(ErrVersionConflict)
	}
	size := itemSize(backfillItem(next).present())
	s.report("update_backfill", false, []int{size}, timerIndexWrites(backfillItem(b), backfillItem(next)), consumed(out.ConsumedCapacity))
	return next, nil
}

// TakenSlots reports which of a job's slots hold a run (a slot item: a
// schedule, catch-up or backfill run claimed it, or a manual run with
// that logical time marked it), in the order of slots. One BatchGetItem
// per 100 slots.
func (s *Store) TakenSlots(ctx context.Context, job string, slots []time.Time) ([]bool, error) {
	op := func(err error) error { return fmt.Errorf("read %d slots of job %s: %w", len(slots), job, err) }
	if err := checkJob(job); err != nil {
		return nil, op(err)
	}
	keys := make([]map[string]types.AttributeValue, len(slots))
	for i, t := range slots {
		keys[i] = keyOf(jobPK(job), slotSK(t))
	}
	held := map[string]bool{}
	if err := s.batchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		held[(&reader{it: it}).str(tableschema.SK)] = true
	}); err != nil {
		return nil, op(err)
	}
	out := make([]bool, len(slots))
	for i, t := range slots {
		out[i] = held[slotSK(t)]
	}
	return out, nil
}

// CheckRelease refuses a new run that releases a backfill's slot unless it
// is that backfill's run of its oldest pending slot, claims the slot, and
// the backfill (as held) may release it now (ReleaseNext). It returns the
// backfill as the release leaves it, before the write's stamp.
func CheckRelease(nr NewRun) (Backfill, error) {
	b := *nr.Release
	switch {
	case nr.Trigger != statemodel.TriggerBackfill || nr.BackfillID != b.ID:
		return b, fmt.Errorf("%w: a release of backfill %s is a backfill run naming it", ErrInvalidInput, b.ID)
	case !nr.ClaimSlot || nr.MarkSlot:
		return b, fmt.Errorf("%w: a backfill run claims its slot", ErrInvalidInput)
	case nr.Job != b.Job:
		return b, fmt.Errorf("%w: backfill %s is of job %s, not %s", ErrInvalidInput, b.ID, b.Job, nr.Job)
	}
	return ReleaseNext(b, nr.ID, nr.LogicalTime)
}
