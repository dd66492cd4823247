package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

const (
	prefixBackfill  = "BACKFILL#"
	skBackfill      = "BACKFILL"
	kindBackfill    = "backfill"
	kindBackfillPtr = "backfill_pointer"

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

func backfillPK(id string) string        { return prefixBackfill + id }
func backfillPointerSK(id string) string { return prefixBackfill + id }

func backfillItem(b ledger.Backfill) item {
	it := item{
		tableschema.PK: str(backfillPK(b.ID)), tableschema.SK: str(skBackfill),
		attrKind: str(kindBackfill), attrID: str(b.ID), attrJob: str(b.Job),
		attrFrom: tm(b.From), attrTo: tm(b.To), attrMaxActive: num(int64(b.MaxActive)),
		attrParams: bin(b.Params), attrSlots: num(int64(b.Slots)), attrCreatedAt: tm(b.CreatedAt),
		attrPriority: optNum(int64(b.Priority)),
	}
	for k, v := range backfillStateItem(b) {
		it[k] = v
	}
	return it
}

// backfillStateItem holds the fields UpdateBackfill and a release change.
func backfillStateItem(b ledger.Backfill) item {
	pending := make([]string, len(b.Pending))
	for i, t := range b.Pending {
		pending[i] = ledger.FormatTime(t)
	}
	var active types.AttributeValue
	if len(b.Active) > 0 {
		l := make([]types.AttributeValue, len(b.Active))
		for i, a := range b.Active {
			l[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{attrRunID: str(a.Run), attrSlot: str(ledger.FormatTime(a.Slot))}}
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
		it[tableschema.TimerAt] = str(ledger.FormatTime(b.TimerAt))
		it[attrTimerKind] = str(ledger.TimerKindBackfill)
	}
	return it
}

func decodeBackfill(m map[string]types.AttributeValue) (ledger.Backfill, error) {
	r := &reader{it: m}
	b := ledger.Backfill{
		ID: r.str(attrID), Job: r.str(attrJob), From: r.time(attrFrom), To: r.time(attrTo),
		MaxActive: int(r.int(attrMaxActive)), Params: r.bytes(attrParams), Slots: int(r.int(attrSlots)),
		Existing: int(r.int(attrExisting)), Succeeded: int(r.int(attrSucceeded)), Failed: int(r.int(attrFailed)),
		Cancelled: int(r.int(attrCancelledN)), CancelRequested: r.bool(attrCancelReq),
		State: statemodel.BackfillState(r.str(attrBfState)), CreatedAt: r.time(attrCreatedAt), EndedAt: r.time(attrEndedAt),
		Version: r.int(attrVersion), TimerAt: r.time(tableschema.TimerAt),
		Priority: int(r.int(attrPriority)),
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
		b.Active = append(b.Active, ledger.BackfillRun{Run: sub.str(attrRunID), Slot: sub.time(attrSlot)})
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
func (s *backfills) CreateBackfill(ctx context.Context, b ledger.Backfill) (ledger.Backfill, error) {
	op := func(err error) error { return fmt.Errorf("create backfill %s of job %s: %w", b.ID, b.Job, err) }
	if err := ledger.CheckNewBackfill(b); err != nil {
		return ledger.Backfill{}, op(err)
	}
	stamp := s.clock()
	b = newBackfill(b, stamp, s.backstop)
	it := backfillItem(b).present()
	n, err := checkSize("backfill "+b.ID, it)
	if err != nil {
		return ledger.Backfill{}, op(err)
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
			return ledger.Backfill{}, op(fmt.Errorf("%w: backfill %s", ledger.ErrAlreadyExists, b.ID))
		}
		return ledger.Backfill{}, op(translate(err))
	}
	return b, nil
}

// newBackfill is a new backfill as CreateBackfill writes it.
func newBackfill(b ledger.Backfill, stamp time.Time, backstop time.Duration) ledger.Backfill {
	timer := b.TimerAt
	b.Version = 0
	b = ledger.NextBackfill(b, stamp, backstop)
	if b.Unfinished() && !timer.IsZero() {
		b.TimerAt = timer
	}
	if b.CreatedAt.IsZero() {
		b.CreatedAt = stamp
	}
	return b
}

// GetBackfill reads a backfill (strongly consistent).
func (s *backfills) GetBackfill(ctx context.Context, id string) (ledger.Backfill, error) {
	op := func(err error) error { return fmt.Errorf("get backfill %s: %w", id, err) }
	if err := ledger.CheckBackfillID(id); err != nil {
		return ledger.Backfill{}, op(err)
	}
	b, err := getItem(ctx, s.base, backfillPK(id), skBackfill, decodeBackfill)
	if err != nil {
		return ledger.Backfill{}, op(err)
	}
	return b, nil
}

// ListBackfills lists a job's backfills newest first: one strongly
// consistent Query of the job's backfill pointers, then the backfills
// (BatchGetItem). Callers page until the token is "".
func (s *backfills) ListBackfills(ctx context.Context, job string, limit int, token string) ([]ledger.Backfill, string, error) {
	op := func(err error) error { return fmt.Errorf("list backfills of job %s: %w", job, err) }
	if err := ledger.CheckJobName(job); err != nil {
		return nil, "", op(err)
	}
	if limit <= 0 {
		limit = ledger.DefaultListLimit
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
		Limit:                  aws.Int32(int32(min(limit, ledger.MaxListLimit))), ExclusiveStartKey: start,
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
	got := map[string]ledger.Backfill{}
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
	list := make([]ledger.Backfill, 0, len(ids))
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
func (s *backfills) UpdateBackfill(ctx context.Context, b ledger.Backfill) (ledger.Backfill, error) {
	op := func(err error) error {
		return fmt.Errorf("update backfill %s from version %d: %w", b.ID, b.Version, err)
	}
	if err := ledger.CheckBackfillID(b.ID); err != nil {
		return ledger.Backfill{}, op(err)
	}
	if err := ledger.CheckBackfillCounts(b); err != nil {
		return ledger.Backfill{}, op(err)
	}
	next := ledger.NextBackfill(b, s.clock(), s.backstop)
	out, err := s.versionedUpdate(ctx, backfillPK(b.ID), skBackfill, backfillStateItem(next), b.Version, nil)
	if err != nil {
		return ledger.Backfill{}, op(err)
	}
	size := itemSize(backfillItem(next).present())
	s.report("update_backfill", false, []int{size}, timerIndexWrites(backfillItem(b), backfillItem(next)), consumed(out.ConsumedCapacity))
	return next, nil
}

// TakenSlots reports which of a job's slots hold a run (a slot item: a
// schedule, catch-up or backfill run claimed it, or a manual run with
// that logical time marked it), in the order of slots. Each slot is read
// on its shard and at JOB#<job>, where it was claimed before the sharding:
// one BatchGetItem per 50 slots.
func (s *backfills) TakenSlots(ctx context.Context, job string, slots []time.Time) ([]bool, error) {
	op := func(err error) error { return fmt.Errorf("read %d slots of job %s: %w", len(slots), job, err) }
	if err := ledger.CheckJobName(job); err != nil {
		return nil, op(err)
	}
	keys := make([]map[string]types.AttributeValue, 0, 2*len(slots))
	for _, t := range slots {
		keys = append(keys, keyOf(slotPK(job, t), slotSK(t)), keyOf(jobPK(job), slotSK(t)))
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
