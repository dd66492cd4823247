package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// CreateRun creates a run atomically in ONE TransactWriteItems (two items
// per run and one per task: 52 actions for MaxTasksPerRun tasks):
//
//	run          Put  RUN#<run>/RUN            attribute_not_exists(#pk)
//	pointer      Put  JOB#<job>/RUN#<run>      attribute_not_exists(#pk)
//	             either failing: the run id exists (ErrAlreadyExists).
//	slot         Put  JOB#<job>#nn/SLOT#<time>    attribute_not_exists(#pk)
//	             fails: the slot has a run (ErrSlotTaken, *ExistingRunError).
//	slot mark    Update JOB#<job>#nn/SLOT#<time>  no condition: SET run_id = if_not_exists(run_id, :run)
//	             (MarkSlot: a manual run of an explicit logical time; never fails)
//	backfill     Update BACKFILL#<id>/BACKFILL  #version = :expected_version
//	             (Release: the oldest pending slot becomes an active run)
//	             fails: the backfill changed since it was read (ErrVersionConflict,
//	             reported before any other failed condition).
//	idempotency  Put  JOB#<job>#nn/IDEM#<key>     attribute_not_exists(#pk) OR #expires_at < :now
//	             fails: the key holds a run (ErrIdempotentReplay for the same
//	             body hash, ErrIdempotencyMismatch for another; *ExistingRunError).
//	job          ConditionCheck JOB#<job>/JOB  attribute_exists(#pk) AND no live deleting mark
//	             (OfLiveJob) fails: the job is gone or being deleted (ErrNotFound).
//	per task     Put  RUN#<run>/TASK#<task>    attribute_not_exists(#pk)
//	             the instance in CREATED with its instance.created record
//	             inline, or, for a task marked Scheduled, in SCHEDULED with
//	             its deps.met record too (decided by statemodel.Apply at now).
//
// Before it, the run's job spec is written to its run spec item
// (JOB#<job>/SPEC#<hash>, runspec.go) unless this process wrote or read it
// already: one PutItem per process and distinct spec, whatever happens to
// the transaction after.
//
// The slot and the key sit on one of the job's shards (slotPK, idemPK).
// One stored before the sharding, at JOB#<job>, is read before the
// transaction (legacyClaims) and answers as a taken one would.
//
// Nothing is written unless everything is. More than MaxTasksPerRun tasks is
// ErrTooManyTasks; items over 400 KB, invalid keys and invalid policies or
// graphs are refused before any write.
func (s *runs) CreateRun(ctx context.Context, nr ledger.NewRun, now time.Time) (ledger.RunView, error) {
	op := func(err error) error { return fmt.Errorf("create run %s of job %s: %w", nr.ID, nr.Job, err) }
	nodes, released, err := ledger.CheckNewRun(nr)
	if err != nil {
		return ledger.RunView{}, op(err)
	}
	stamp := s.clock()
	run := ledger.NewRunRecord(nr, nodes, now, stamp, s.backstop)
	ledger.Retain(&run, nr, s.retention, stamp)

	var actions []types.TransactWriteItem
	var sizes []int
	var labels []string
	pkName := map[string]string{"#pk": tableschema.PK}
	put := func(label string, it item, cond string, names map[string]string, values map[string]types.AttributeValue, old bool) error {
		m := it.present()
		n, err := checkSize(label, m)
		if err != nil {
			return err
		}
		p := &types.Put{
			TableName: aws.String(s.table), Item: m, ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		}
		if old {
			p.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
		}
		actions = append(actions, types.TransactWriteItem{Put: p})
		sizes = append(sizes, n)
		labels = append(labels, label)
		return nil
	}
	const notExists = "attribute_not_exists(#pk)"

	if err := put("run "+nr.ID, runItem(run), notExists, pkName, nil, false); err != nil {
		return ledger.RunView{}, op(err)
	}
	if err := put("run pointer "+nr.ID, pointerItem(run), notExists, pkName, nil, false); err != nil {
		return ledger.RunView{}, op(err)
	}
	legacy, err := s.legacyClaims(ctx, nr, stamp)
	if err != nil {
		return ledger.RunView{}, op(err)
	}
	if legacy.taken != nil {
		return ledger.RunView{}, op(legacy.taken)
	}
	slotAt, idemAt, releaseAt := -1, -1, -1
	if nr.MarkSlot && !legacy.slotHeld {
		// No condition: the mark never refuses a run; if_not_exists keeps
		// the run that took the slot first.
		e := newExpr()
		upd := "SET " + e.n(attrKind) + " = " + e.v("kind", str(kindSlot)) +
			", " + e.n(attrJob) + " = " + e.v("job", str(nr.Job)) +
			", " + e.n(attrLogicalTime) + " = " + e.v("logical_time", tm(nr.LogicalTime)) +
			", " + e.n(attrRunID) + " = if_not_exists(" + e.n(attrRunID) + ", " + e.v("run", str(nr.ID)) + ")" +
			", " + e.n(attrCreatedAt) + " = if_not_exists(" + e.n(attrCreatedAt) + ", " + e.v("now", tm(now)) + ")"
		actions = append(actions, types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(s.table), Key: keyOf(slotPK(nr.Job, nr.LogicalTime), slotSK(nr.LogicalTime)),
			UpdateExpression: aws.String(upd), ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		}})
		sizes = append(sizes, itemSize(item{
			tableschema.PK: str(slotPK(nr.Job, nr.LogicalTime)), tableschema.SK: str(slotSK(nr.LogicalTime)),
			attrKind: str(kindSlot), attrJob: str(nr.Job), attrRunID: str(nr.ID),
			attrLogicalTime: tm(nr.LogicalTime), attrCreatedAt: tm(now),
		}.present()))
		labels = append(labels, "slot mark "+ledger.FormatTime(nr.LogicalTime))
	}
	if nr.Release != nil {
		// The backfill's release, conditioned on the version held: a
		// release decided from a stale copy (another release, a settle, a
		// cancel) fails whole, so max_active holds and a slot leaves
		// Pending once.
		releaseAt = len(actions)
		next := ledger.NextBackfill(released, stamp, s.backstop)
		e := newExpr()
		actions = append(actions, types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(s.table), Key: keyOf(backfillPK(released.ID), skBackfill),
			UpdateExpression:         aws.String(e.update(backfillStateItem(next))),
			ConditionExpression:      aws.String(e.n(attrVersion) + " = " + e.v("expected_version", num(nr.Release.Version))),
			ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		}})
		n := itemSize(backfillItem(next).present())
		sizes = append(sizes, n)
		labels = append(labels, "backfill "+released.ID)
	}
	if nr.ClaimSlot {
		slotAt = len(actions)
		it := item{
			tableschema.PK: str(slotPK(nr.Job, nr.LogicalTime)), tableschema.SK: str(slotSK(nr.LogicalTime)),
			attrKind: str(kindSlot), attrJob: str(nr.Job), attrRunID: str(nr.ID),
			attrLogicalTime: tm(nr.LogicalTime), attrCreatedAt: tm(now),
		}
		if err := put("slot "+ledger.FormatTime(nr.LogicalTime), it, notExists, pkName, nil, true); err != nil {
			return ledger.RunView{}, op(err)
		}
	}
	if ik := nr.Idempotency; ik != nil {
		idemAt = len(actions)
		it := item{
			tableschema.PK: str(idemPK(nr.Job, ik.Key)), tableschema.SK: str(idemSK(ik.Key)),
			attrKind: str(kindIdem), attrJob: str(nr.Job), attrRunID: str(nr.ID),
			attrBodyHash: optStr(ik.BodyHash), attrCreatedAt: tm(now),
			tableschema.TTL: epoch(stamp.Add(ledger.IdempotencyTTL)),
		}
		// An expired key that TTL has not deleted yet is free again.
		cond := "attribute_not_exists(#pk) OR #expires_at < :now"
		names := map[string]string{"#pk": tableschema.PK, "#expires_at": tableschema.TTL}
		values := map[string]types.AttributeValue{":now": epoch(stamp)}
		if err := put("idempotency key", it, cond, names, values, true); err != nil {
			return ledger.RunView{}, op(err)
		}
	}

	jobAt := -1
	if nr.OfLiveJob {
		jobAt = len(actions)
		actions = append(actions, jobGateCheck(s.table, nr.Job, nr.ID, stamp))
		sizes = append(sizes, 0)
		labels = append(labels, "job "+nr.Job)
	}

	view := ledger.RunView{Run: run}
	for _, t := range nr.Tasks {
		inst, err := ledger.NewInstance(nr, t, now)
		if err != nil {
			return ledger.RunView{}, op(err)
		}
		inst.TimerAt, inst.TimerKind = ledger.IndexedTimer(inst.Key, inst.Snapshot, now, s.horizon)
		inst.ExpiresAt = run.ExpiresAt
		if err := put("instance "+inst.Key.String(), instanceItem(runPK(inst.Key.Run), inst), notExists, pkName, nil, false); err != nil {
			return ledger.RunView{}, op(err)
		}
		view.Tasks = append(view.Tasks, ledger.TaskView{Instance: inst})
	}
	slices.SortFunc(view.Tasks, func(a, b ledger.TaskView) int { return strings.Compare(a.Instance.Key.Task, b.Instance.Key.Task) })
	if err := checkTransaction("create run "+nr.ID, sizes); err != nil {
		return ledger.RunView{}, op(err)
	}

	// Index entries: the run's listing entry (its keys) and live entry
	// (its keys and the few attributes the index projects), its backstop
	// timer, and each instance's timer.
	index := append([]int{listingEntrySize(runItem(run))}, liveIndexWrites(nil, runItem(run))...)
	index = append(index, timerIndexWrites(nil, runItem(run))...)
	for _, t := range view.Tasks {
		index = append(index, timerIndexWrites(nil, instanceItem(runPK(t.Instance.Key.Run), t.Instance))...)
	}
	if err := s.ensureRunSpec(ctx, nr.Job, run.Spec); err != nil {
		return ledger.RunView{}, op(err)
	}
	if err := s.putParams(ctx, run); err != nil {
		return ledger.RunView{}, op(err)
	}
	err = s.transact(ctx, "create_run", actions, sizes, index)
	if err == nil {
		return view, nil
	}
	reasons := cancellation(err)
	if reasons == nil {
		return ledger.RunView{}, op(translate(err))
	}
	if conditionFailed(reasons, jobAt) {
		return ledger.RunView{}, op(fmt.Errorf("%w: job %s does not exist or is being deleted", ledger.ErrNotFound, nr.Job))
	}
	if conditionFailed(reasons, releaseAt) {
		return ledger.RunView{}, op(fmt.Errorf("%w: backfill %s changed since version %d", ledger.ErrVersionConflict, nr.Release.ID, nr.Release.Version))
	}
	if conditionFailed(reasons, idemAt) {
		ex, err := s.existingRun(ctx, nr.Job, keyOf(idemPK(nr.Job, nr.Idempotency.Key), idemSK(nr.Idempotency.Key)), reasons[idemAt].Item)
		if err != nil {
			return ledger.RunView{}, op(err)
		}
		ex.Err = ledger.ErrIdempotentReplay
		if ex.BodyHash != nr.Idempotency.BodyHash {
			ex.Err = ledger.ErrIdempotencyMismatch
		}
		return ledger.RunView{}, op(ex)
	}
	if conditionFailed(reasons, slotAt) {
		ex, err := s.existingRun(ctx, nr.Job, keyOf(slotPK(nr.Job, nr.LogicalTime), slotSK(nr.LogicalTime)), reasons[slotAt].Item)
		if err != nil {
			return ledger.RunView{}, op(err)
		}
		ex.Err = ledger.ErrSlotTaken
		return ledger.RunView{}, op(ex)
	}
	for i := range reasons {
		if conditionFailed(reasons, i) {
			return ledger.RunView{}, op(fmt.Errorf("%w: %s", ledger.ErrAlreadyExists, labels[i]))
		}
	}
	return ledger.RunView{}, op(cancelError(err, reasons))
}

// existingRun reads the run id held by a slot or idempotency item (key):
// from the failed put's ALL_OLD image, or with a read when the endpoint
// sent none.
func (s *runs) existingRun(ctx context.Context, job string, key, old map[string]types.AttributeValue) (*ledger.ExistingRunError, error) {
	if len(old) == 0 {
		out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(s.table), Key: key, ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return nil, translate(err)
		}
		if out.Item == nil { // deleted since (TTL): the caller may try again
			return nil, fmt.Errorf("%w: %s was taken and is gone", ledger.ErrConflict, (&reader{it: key}).str(tableschema.SK))
		}
		old = out.Item
	}
	return existingRunOf(job, old)
}

func existingRunOf(job string, it map[string]types.AttributeValue) (*ledger.ExistingRunError, error) {
	r := &reader{it: it}
	ex := &ledger.ExistingRunError{Job: job, RunID: r.str(attrRunID), BodyHash: r.str(attrBodyHash)}
	return ex, r.err
}

func runItem(r ledger.Run) item {
	it := item{
		tableschema.PK: str(runPK(r.ID)), tableschema.SK: str(skRun),
		attrKind: str(kindRun), attrRunID: str(r.ID), attrJob: str(r.Job),
		attrLogicalTime: tm(r.LogicalTime), attrSpecRef: optStr(runSpecRef(r.Spec)),
		attrCreatedAt: tm(r.CreatedAt), tableschema.ListPK: str(runListShard(r.ID)), tableschema.ListSK: str(r.ID),
		attrTrigger: optStr(string(r.Trigger)), attrBackfill: optStr(r.BackfillID),
		attrDeadlineAt: tm(r.DeadlineAt), attrDeadlineMissed: tm(r.DeadlineMissedAt),
		attrDepsTimeoutAt: tm(r.DependencyTimeoutAt),
		attrRunEvent:      eventAttr(r.Event),
		attrPriority:      optNum(int64(r.Priority)),
		attrAdmittedAt:    tm(r.AdmittedAt), attrAdmittedIn: optStr(r.AdmittedIn), attrWaitingIn: optStr(r.WaitingIn),
		attrRetention: optNum(int64(r.Retention / time.Second)),
		attrTraceID:   traceAttr(r.TraceID),
	}
	if paramsApart(r.Params) {
		it[attrParamsRef] = str(paramsRef(r.Params))
	} else {
		it[attrParams] = bin(r.Params)
	}
	for k, v := range runStateItem(r) {
		it[k] = v
	}
	return it
}

// runStateItem holds the fields UpdateRunState changes.
func runStateItem(r ledger.Run) item {
	it := item{
		attrExec: str(string(r.ExecutionState)), attrPub: str(string(r.PublicationState)),
		attrStatus: str(string(r.Status)), attrEndedAt: tm(r.EndedAt), attrVersion: num(r.Version),
		tableschema.TimerShard: nil, tableschema.TimerAt: nil, attrTimerKind: nil,
	}
	if !r.ExpiresAt.IsZero() {
		// Set only, never removed: a copy of the run that lacks it (read
		// before it was pushed, or built by hand) keeps the stored one.
		it[tableschema.TTL] = expiry(r.ExpiresAt)
	}
	if !r.ExecutionState.Terminal() && !r.TimerAt.IsZero() {
		it[tableschema.TimerShard] = str(timerShard(runPK(r.ID), skRun))
		it[tableschema.TimerAt] = str(ledger.FormatTime(r.TimerAt))
		it[attrTimerKind] = str(ledger.TimerKindRunBackstop)
	}
	// An unfinished run is in the live index (live_pk = one of its job's
	// live shards, live_sk = its id); a finished one leaves it in the write
	// that finishes it.
	it[tableschema.LivePK], it[tableschema.LiveSK] = nil, nil
	if !r.ExecutionState.Terminal() {
		it[tableschema.LivePK] = str(liveShard(r.Job, r.ID))
		it[tableschema.LiveSK] = str(r.ID)
	}
	return it
}

func pointerItem(r ledger.Run) item {
	return item{
		tableschema.PK: str(jobShard(r.Job, r.ID)), tableschema.SK: str(pointerSK(r.ID)),
		attrKind: str(kindPointer), attrRunID: str(r.ID), attrCreatedAt: tm(r.CreatedAt),
		attrLogicalTime: tm(r.LogicalTime), tableschema.TTL: expiry(r.ExpiresAt),
	}
}

func decodeRun(m map[string]types.AttributeValue) (ledger.Run, error) {
	r := &reader{it: m}
	run := ledger.Run{
		ID: r.str(attrRunID), Job: r.str(attrJob), LogicalTime: r.time(attrLogicalTime),
		Params: r.bytes(attrParams), Spec: r.bytes(attrSpec),
		ExecutionState:   statemodel.RunState(r.str(attrExec)),
		PublicationState: statemodel.PublicationState(r.str(attrPub)),
		Status:           statemodel.Status(r.str(attrStatus)),
		CreatedAt:        r.time(attrCreatedAt), EndedAt: r.time(attrEndedAt),
		Version: r.int(attrVersion), TimerAt: r.time(tableschema.TimerAt),
		Trigger: statemodel.Trigger(r.str(attrTrigger)), BackfillID: r.str(attrBackfill),
		DeadlineAt: r.time(attrDeadlineAt), DeadlineMissedAt: r.time(attrDeadlineMissed),
		DependencyTimeoutAt: r.time(attrDepsTimeoutAt),
		Event:               r.runEvent(),
		Priority:            int(r.int(attrPriority)),
		AdmittedAt:          r.time(attrAdmittedAt), AdmittedIn: r.str(attrAdmittedIn), WaitingIn: r.str(attrWaitingIn),
		ExpiresAt: r.expiry(), Retention: time.Duration(r.int(attrRetention)) * time.Second,
		TraceID: hex.EncodeToString(r.bytes(attrTraceID)),
	}
	return run, r.err
}

// GetRun reads a run item with its params (strongly consistent), in ONE
// Query of
//
//	pk = RUN#<run> AND sk BETWEEN "PARAMS#" AND "RUN"
//
// which meets the run item and, for a run whose params are stored apart,
// their item (below, "A run's params"): nothing else of a run sorts between them, so a
// run with params inline reads what a GetItem of its item would.
func (s *runs) GetRun(ctx context.Context, id string) (ledger.Run, error) {
	if err := ledger.CheckRunID(id); err != nil {
		return ledger.Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	run, err := s.getRunWithParams(ctx, id)
	if err == nil {
		err = s.legacyTrigger(ctx, &run)
	}
	if err != nil {
		return ledger.Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	return run, nil
}

// getRunWithParams is GetRun's Query, its spec and params filled.
func (s *runs) getRunWithParams(ctx context.Context, id string) (ledger.Run, error) {
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table),
		KeyConditionExpression: aws.String(e.n(tableschema.PK) + " = " + e.v("pk", str(runPK(id))) +
			" AND " + e.n(tableschema.SK) + " BETWEEN " + e.v("first", str(prefixParams)) + " AND " + e.v("last", str(skRun))),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		ConsistentRead: aws.Bool(true),
	}
	var run ledger.Run
	found, specRef, pRef := false, "", ""
	params := map[string]map[string]types.AttributeValue{}
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return ledger.Run{}, translate(err)
		}
		for _, it := range out.Items {
			r := &reader{it: it}
			if r.str(attrKind) == kindParams {
				params[r.str(tableschema.SK)] = it
				continue
			}
			if run, err = decodeRun(it); err != nil {
				return ledger.Run{}, err
			}
			found, specRef, pRef = true, specRefOf(it), paramsRefOf(it)
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	if !found || ledger.Expired(run.ExpiresAt, s.clock()) {
		// An expired run not deleted yet is gone all the same (and its
		// params item may be deleted before it).
		return ledger.Run{}, ledger.ErrNotFound
	}
	if err := s.runSpec(ctx, &run, specRef); err != nil {
		return ledger.Run{}, err
	}
	return run, s.runParams(ctx, &run, pRef, params)
}

// ReadRun reads a whole run (the run, its params when stored apart, its
// instances, their attempts with late events) with ONE strongly
// consistent Query, paged only when the run exceeds DynamoDB's 1 MB page:
//
//	pk = RUN#<run> AND sk BETWEEN "PARAMS#" AND "TASK#\uffff"
//
// History items (TR#) sort outside that range, so they are excluded by the
// key design, not by a filter. TaskView.Attempts lists every attempt, from
// the instance's records and the attempt items.
func (s *runs) ReadRun(ctx context.Context, id string) (ledger.RunView, error) {
	op := func(err error) error { return fmt.Errorf("read run %s: %w", id, err) }
	if err := ledger.CheckRunID(id); err != nil {
		return ledger.RunView{}, op(err)
	}
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table),
		KeyConditionExpression: aws.String(e.n(tableschema.PK) + " = " + e.v("pk", str(runPK(id))) +
			" AND " + e.n(tableschema.SK) + " BETWEEN " + e.v("first", str(prefixParams)) + " AND " + e.v("last", str(prefixTask+"\uffff"))),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		ConsistentRead: aws.Bool(true),
	}
	var view ledger.RunView
	found, ref, pRef := false, "", ""
	params := map[string]map[string]types.AttributeValue{}
	byTask := map[string]int{}
	attempts := map[string][]ledger.Attempt{}
	parted := map[string]int{} // maps whose count shards are in their own partitions
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return ledger.RunView{}, op(translate(err))
		}
		for _, it := range out.Items {
			r := &reader{it: it}
			switch kind := r.str(attrKind); kind {
			case kindRun:
				run, err := decodeRun(it)
				if err != nil {
					return ledger.RunView{}, op(err)
				}
				view.Run, found, ref, pRef = run, true, specRefOf(it), paramsRefOf(it)
			case kindParams:
				params[r.str(tableschema.SK)] = it
			case kindInstance:
				inst, err := decodeInstance(it)
				if err != nil {
					return ledger.RunView{}, op(err)
				}
				byTask[inst.Key.Task] = len(view.Tasks)
				view.Tasks = append(view.Tasks, ledger.TaskView{Instance: inst})
			case kindAttempt:
				task := r.str(attrTask)
				a := decodeAttempt(r)
				if r.err != nil {
					return ledger.RunView{}, op(r.err)
				}
				attempts[task] = append(attempts[task], a)
			case kindMap, kindMapShard:
				if view.Maps == nil {
					view.Maps = map[string]ledger.MapState{}
				}
				if kind == kindMap {
					task, parts := r.str(attrTask), childPartsOf(it)
					s.layouts.put(id, task, parts)
					if parts > 0 {
						parted[task] = parts
					}
				}
				if err := addMapItem(view.Maps, it); err != nil {
					return ledger.RunView{}, op(err)
				}
			default:
				return ledger.RunView{}, op(fmt.Errorf("%w: unexpected item kind %q in a run", ledger.ErrCorruptItem, kind))
			}
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	if !found || ledger.Expired(view.Run.ExpiresAt, s.clock()) {
		// An expired run not deleted yet is gone all the same.
		return ledger.RunView{}, op(ledger.ErrNotFound)
	}
	for task, parts := range parted {
		if err := s.readMapParted(ctx, id, task, parts, false, view.Maps); err != nil {
			return ledger.RunView{}, op(translate(err))
		}
	}
	for task, m := range view.Maps {
		view.Maps[task] = finishMapState(m)
	}
	if err := s.runSpec(ctx, &view.Run, ref); err != nil {
		return ledger.RunView{}, op(err)
	}
	if err := s.runParams(ctx, &view.Run, pRef, params); err != nil {
		return ledger.RunView{}, op(err)
	}
	if err := s.legacyTrigger(ctx, &view.Run); err != nil {
		return ledger.RunView{}, op(err)
	}
	for task := range attempts {
		if _, ok := byTask[task]; !ok {
			return ledger.RunView{}, op(fmt.Errorf("%w: attempts of unknown task %s", ledger.ErrCorruptItem, task))
		}
	}
	for i := range view.Tasks {
		t := &view.Tasks[i]
		t.Attempts = ledger.MergeAttempts(attempts[t.Instance.Key.Task], t.Instance.Snapshot.Attempts)
	}
	view.Run = ledger.ShownRun(view.Run, view.Nodes())
	return view, nil
}

func decodeAttempt(r *reader) ledger.Attempt {
	a := ledger.Attempt{AttemptRecord: readAttemptRecord(r), LateDropped: int(r.int(attrLateDropped))}
	for _, m := range r.maps(attrLateEvents) {
		sub := &reader{it: m}
		a.Late = append(a.Late, readLateEvent(sub))
		if sub.err != nil && r.err == nil {
			r.err = sub.err
		}
	}
	return a
}

// ListRuns lists runs newest first (run ids are ULIDs). Without a job it
// merges the listing index's run shards (listAllRuns, eventually
// consistent); with a job it reads the job's run pointers (strongly
// consistent). Either way the runs themselves are then read with
// BatchGetItem.
//
// The status filter is applied after paging, to the runs read: a page may
// hold fewer than Limit runs, even none, while a next token remains.
// Callers page on until the token is "".
func (s *runs) ListRuns(ctx context.Context, f ledger.RunFilter) ([]ledger.Run, string, error) {
	op := func(err error) error { return fmt.Errorf("list runs (job %q, status %q): %w", f.Job, f.Status, err) }
	limit := f.Limit
	if limit <= 0 {
		limit = ledger.DefaultListLimit
	}
	limit = min(limit, ledger.MaxListLimit)
	if f.Job == "" {
		runs, next, err := s.list.listAllRuns(ctx, f, limit)
		if err != nil {
			return nil, "", op(err)
		}
		return runs, next, nil
	}
	if err := ledger.CheckJobName(f.Job); err != nil {
		return nil, "", op(err)
	}
	// The job's pointers, merged over its shards; the token is the last
	// run id of the page, opaque to callers.
	start, err := decodeToken(f.Token, map[string]string{tableschema.PK: jobPK(f.Job), tableschema.SK: ""})
	if err != nil {
		return nil, "", op(err)
	}
	before := ""
	if start != nil {
		before = strings.TrimPrefix(start[tableschema.SK].(*types.AttributeValueMemberS).Value, prefixRun)
	}
	ids, more, err := s.list.newestPointerIDs(ctx, f.Job, before, limit)
	if err != nil {
		return nil, "", op(err)
	}
	next := ""
	if more && len(ids) > 0 {
		next = encodeToken(map[string]types.AttributeValue{tableschema.PK: str(jobPK(f.Job)), tableschema.SK: str(pointerSK(ids[len(ids)-1]))})
	}
	runs, err := s.getRuns(ctx, ids, true)
	if err == nil {
		err = s.showRuns(ctx, runs)
	}
	if err != nil {
		return nil, "", op(err)
	}
	if f.Status != "" {
		// Pointers hold no states: the filter applies to the runs read.
		runs = slices.DeleteFunc(runs, func(r ledger.Run) bool { return r.Status != f.Status })
	}
	return runs, next, nil
}

// showRuns shows each run of a listing page as its readers see it
// (ledger.ShownRun): a run stored QUEUED may have a task that started, so
// its instances are read, one eventually consistent Query of its TASK#
// range each, showQueries at a time. Runs stored in any other state are
// shown as stored and cost nothing more.
func (s *base) showRuns(ctx context.Context, runs []ledger.Run) error {
	sem := make(chan struct{}, showQueries)
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i := range runs {
		if runs[i].ExecutionState != statemodel.RunQueued {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			nodes, err := s.taskNodes(ctx, runs[i].ID)
			if err != nil {
				errs[i] = err
				return
			}
			runs[i] = ledger.ShownRun(runs[i], nodes)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// showQueries bounds the Queries of one listing page's showRuns in flight.
const showQueries = 16

// taskNodes reads run id's instances (not its map's children, which sort
// before them) as the DAG rules see them, eventually consistent: one
// Query of
//
//	pk = RUN#<run> AND sk BETWEEN "TASK#" AND "TASK#\uffff"
//
// which also meets the attempt items, left out.
func (s *base) taskNodes(ctx context.Context, id string) ([]statemodel.TaskNode, error) {
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table),
		KeyConditionExpression: aws.String(e.n(tableschema.PK) + " = " + e.v("pk", str(runPK(id))) +
			" AND " + e.n(tableschema.SK) + " BETWEEN " + e.v("first", str(prefixTask)) + " AND " + e.v("last", str(prefixTask+"\uffff"))),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
	}
	var nodes []statemodel.TaskNode
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, translate(err)
		}
		for _, it := range out.Items {
			if (&reader{it: it}).str(attrKind) != kindInstance {
				continue
			}
			inst, err := decodeInstance(it)
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, inst.Node())
		}
		if out.LastEvaluatedKey == nil {
			return nodes, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// getRuns reads run items by id with BatchGetItem (100 keys per request),
// in the order of ids; runs that vanished, or expired and are not deleted
// yet, are left out. withParams: the params of runs that store them apart
// are read too (one more BatchGetItem, for a listing that answers them);
// without, those runs' Params are nil.
func (s *base) getRuns(ctx context.Context, ids []string, withParams bool) ([]ledger.Run, error) {
	keys := make([]map[string]types.AttributeValue, len(ids))
	for i, id := range ids {
		keys[i] = keyOf(runPK(id), skRun)
	}
	got := make(map[string]ledger.Run, len(ids))
	refs := make(map[string]string, len(ids))
	pRefs := make(map[string]string, len(ids))
	var derr error
	err := s.batchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		run, err := decodeRun(it)
		if err != nil && derr == nil {
			derr = err
		}
		got[run.ID], refs[run.ID], pRefs[run.ID] = run, specRefOf(it), paramsRefOf(it)
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, err
	}
	runs := make([]ledger.Run, 0, len(ids))
	var specRefs, paramsRefs []string
	now := s.clock()
	for _, id := range ids {
		if r, ok := got[id]; ok && !ledger.Expired(r.ExpiresAt, now) {
			runs = append(runs, r)
			specRefs, paramsRefs = append(specRefs, refs[id]), append(paramsRefs, pRefs[id])
		}
	}
	if err := s.runSpecs(ctx, runs, specRefs); err != nil {
		return nil, err
	}
	if withParams {
		if err := s.runsParams(ctx, runs, paramsRefs); err != nil {
			return nil, err
		}
	}
	return runs, s.legacyTriggers(ctx, runs)
}

// batchGet reads items by key with strongly consistent BatchGetItems (100
// keys per request), retrying unprocessed keys a bounded number of times,
// and passes each item found to each, in no particular order.
func (s *base) batchGet(ctx context.Context, keys []map[string]types.AttributeValue, each func(map[string]types.AttributeValue)) error {
	return s.batchGetItems(ctx, keys, true, each)
}

// batchGetItems is batchGet, strongly consistent or not: an eventually
// consistent read costs half, and sees all of an item nobody writes.
func (s *base) batchGetItems(ctx context.Context, keys []map[string]types.AttributeValue, consistent bool, each func(map[string]types.AttributeValue)) error {
	for chunk := range slices.Chunk(keys, 100) {
		req := map[string]types.KeysAndAttributes{s.table: {Keys: chunk, ConsistentRead: aws.Bool(consistent)}}
		for try := 0; len(req) > 0; try++ {
			out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return translate(err)
			}
			for _, it := range out.Responses[s.table] {
				each(it)
			}
			req = out.UnprocessedKeys
			if len(req) > 0 {
				if try >= conflictRetries {
					return fmt.Errorf("%w: unprocessed keys after %d tries", ledger.ErrThrottled, try+1)
				}
				if err := backoff(ctx, try); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// legacyTrigger is legacyTriggers of one run.
func (s *base) legacyTrigger(ctx context.Context, run *ledger.Run) error {
	if run.Trigger != "" {
		return nil
	}
	runs := []ledger.Run{*run}
	err := s.legacyTriggers(ctx, runs)
	*run = runs[0]
	return err
}

// legacyTriggers fills in the trigger of runs stored before runs kept one:
// schedule when the job's slot at the run's logical time names the run
// (only schedule runs claimed slots then), manual otherwise. It reads the
// slots of those runs only (one BatchGetItem per 100), so runs written
// since cost nothing; their slots were claimed before the sharding, at
// JOB#<job>.
func (s *base) legacyTriggers(ctx context.Context, runs []ledger.Run) error {
	var keys []map[string]types.AttributeValue
	for i := range runs {
		if runs[i].Trigger == "" {
			runs[i].Trigger = statemodel.TriggerManual
			if !runs[i].LogicalTime.IsZero() {
				keys = append(keys, keyOf(jobPK(runs[i].Job), slotSK(runs[i].LogicalTime)))
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	claimed := map[string]bool{}
	err := s.batchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		claimed[(&reader{it: it}).str(attrRunID)] = true
	})
	if err != nil {
		return fmt.Errorf("read the slots of runs stored without a trigger: %w", err)
	}
	for i := range runs {
		if claimed[runs[i].ID] {
			runs[i].Trigger = statemodel.TriggerSchedule
		}
	}
	return nil
}

// ListUnfinishedRuns lists a job's unfinished runs, oldest first, from the
// sparse live index: only unfinished runs' pointers are in it, so the cost
// follows the job's live runs, never the runs it finished before.
//
//	live_pk = JOB#<job>
//
// The index is eventually consistent: a run that just ended may still be
// listed, and one created a moment ago may be missing. Callers act on a
// listed run through operations that read it again (CancelRun,
// AdvanceRun), and HasUnfinishedRuns covers the newest runs itself.
func (s *runs) ListUnfinishedRuns(ctx context.Context, job string) ([]ledger.UnfinishedRun, error) {
	op := func(err error) error { return fmt.Errorf("list unfinished runs of job %s: %w", job, err) }
	if err := ledger.CheckJobName(job); err != nil {
		return nil, op(err)
	}
	var out []ledger.UnfinishedRun
	err := s.queryLive(ctx, job, 0, func(r *reader) bool {
		out = append(out, ledger.UnfinishedRun{ID: r.str(attrRunID), LogicalTime: r.time(attrLogicalTime), Trigger: statemodel.Trigger(r.str(attrTrigger))})
		return true
	})
	if err != nil {
		return nil, op(err)
	}
	// Oldest first over the shards (run ids are ULIDs); a run listed by
	// two shards (its entry read while it moved) once.
	slices.SortFunc(out, func(a, b ledger.UnfinishedRun) int { return strings.Compare(a.ID, b.ID) })
	out = slices.CompactFunc(out, func(a, b ledger.UnfinishedRun) bool { return a.ID == b.ID })
	return out, nil
}

// queryLive pages through a job's entries of the live index, shard after
// shard (liveShards), limit per page (0: DefaultListLimit), until each
// returns false or the entries end.
func (s *runs) queryLive(ctx context.Context, job string, limit int, each func(*reader) bool) error {
	for _, pk := range liveShards(job) {
		more, err := s.queryLiveShard(ctx, pk, limit, each)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// queryLiveShard is queryLive on one live_pk value; false when each asked
// to stop.
func (s *runs) queryLiveShard(ctx context.Context, livePK string, limit int, each func(*reader) bool) (bool, error) {
	if limit <= 0 {
		limit = ledger.DefaultListLimit
	}
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table), IndexName: aws.String(tableschema.LiveIndex),
		KeyConditionExpression: aws.String(e.n(tableschema.LivePK) + " = " + e.v("live_pk", str(livePK))),
		ProjectionExpression:   aws.String(e.n(tableschema.PK) + ", " + e.n(attrRunID) + ", " + e.n(attrLogicalTime) + ", " + e.n(attrTrigger)),
		Limit:                  aws.Int32(int32(limit)),
	}
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.nameMap(), e.valueMap()
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return false, translate(err)
		}
		for _, it := range out.Items {
			// An entry of a run item is an unfinished run: the write that
			// finishes a run takes its entry out.
			r := &reader{it: it}
			if pk := r.str(tableschema.PK); strings.HasPrefix(pk, prefixJob) {
				// A pointer: the index's entry before the run item took its
				// place. Its run decides, and a finished run's pointer
				// leaves the index.
				finished, err := s.formerEntryFinished(ctx, strings.TrimPrefix(pk, prefixJob), r.str(attrRunID))
				if err != nil {
					return false, err
				}
				if finished {
					continue
				}
			}
			more := each(r)
			if r.err != nil {
				return false, r.err
			}
			if !more {
				return false, nil
			}
		}
		if out.LastEvaluatedKey == nil {
			return true, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// newestPointers is how many of a job's newest run pointers
// HasUnfinishedRuns reads strongly consistent, for runs created too
// recently to be in the live index yet.
const newestPointers = 10

// HasUnfinishedRuns reports whether job has a run whose execution state is
// not terminal (skip policy, which ignores backfill runs; the API refuses
// DELETE of such a job), runs of the ignored triggers left out. Its
// cost follows the job's live runs, not its history:
//
//  1. the job's newest run pointers (a strongly consistent Query, newest
//     first, newestPointers at most) and their runs (one BatchGetItem): a
//     run created a moment ago, which the live index may not list yet, is
//     among them;
//  2. the live index, each entry confirmed by a strongly consistent read
//     of its run (the index may still list a run that just ended).
func (s *runs) HasUnfinishedRuns(ctx context.Context, job string, ignore ...statemodel.Trigger) (bool, error) {
	op := func(err error) error { return fmt.Errorf("unfinished runs of job %s: %w", job, err) }
	if err := ledger.CheckJobName(job); err != nil {
		return false, op(err)
	}
	ids, _, err := s.list.newestPointerIDs(ctx, job, "", newestPointers)
	if err != nil {
		return false, op(err)
	}
	newest, err := s.getRuns(ctx, ids, false)
	if err != nil {
		return false, op(err)
	}
	checked := map[string]bool{}
	for _, r := range newest {
		if !r.ExecutionState.Terminal() && !slices.Contains(ignore, r.Trigger) {
			return true, nil
		}
		checked[r.ID] = true
	}
	found := false
	var cerr error
	err = s.queryLive(ctx, job, newestPointers, func(r *reader) bool {
		id := r.str(attrRunID)
		if checked[id] {
			return true
		}
		run, gerr := s.GetRun(ctx, id)
		switch {
		case errors.Is(gerr, ledger.ErrNotFound):
			return true
		case gerr != nil:
			cerr = gerr
			return false
		}
		found = !run.ExecutionState.Terminal() && !slices.Contains(ignore, run.Trigger)
		return !found
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return false, op(err)
	}
	return found, nil
}

// formerEntryFinished reads the run of a pointer listed in the live index
// and, when it is finished (or gone), takes the pointer out of the index.
func (s *runs) formerEntryFinished(ctx context.Context, job, id string) (bool, error) {
	run, err := s.GetRun(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return true, s.clearFormerLiveEntry(ctx, job, id)
	}
	if err != nil {
		return false, err
	}
	if !run.ExecutionState.Terminal() {
		return false, nil
	}
	return true, s.clearFormerLiveEntry(ctx, job, id)
}

// clearFormerLiveEntry takes a finished run's pointer out of the live
// index. Pointers were the index's entries before the run item took that
// place; one written then keeps its entry until a reader finds its run
// finished (queryLive).
//
//	Update JOB#<job>/RUN#<run>  REMOVE live_pk, live_sk
//	condition  attribute_exists(#pk)
func (s *runs) clearFormerLiveEntry(ctx context.Context, job, run string) error {
	e := newExpr()
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(jobPK(job), pointerSK(run)),
		UpdateExpression:         aws.String("REMOVE " + e.n(tableschema.LivePK) + ", " + e.n(tableschema.LiveSK)),
		ConditionExpression:      aws.String("attribute_exists(" + e.n(tableschema.PK) + ")"),
		ExpressionAttributeNames: e.nameMap(),
		ReturnConsumedCapacity:   s.returnCapacity(),
	})
	if err != nil {
		if _, ok := conditionItem(err); ok {
			return nil // gone: nothing left to clear
		}
		return translate(err)
	}
	size := itemSize(pointerItem(ledger.Run{ID: run, Job: job}).present())
	s.report("clear_former_live_entry", false, []int{size}, []int{size}, consumed(out.ConsumedCapacity))
	return nil
}

// RearmRunBackstop moves a live run's backstop timer to the store's clock
// + its run backstop, when the run's derived state has not changed (a
// change goes through UpdateRunState, which sets the timer itself). The
// states and the version stay as they are.
//
//	Update RUN#<run>/RUN  SET timer_shard, timer_at, timer_kind
//	condition  #version = :expected_version AND #exec = :exec
//	fails: the run was stored since it was read (ErrVersionConflict; that
//	write armed its own timer), or it does not exist (ErrNotFound).
func (s *runs) RearmRunBackstop(ctx context.Context, run ledger.Run) (ledger.Run, error) {
	op := func(err error) error { return fmt.Errorf("re-arm backstop of run %s: %w", run.ID, err) }
	if err := ledger.CheckRunID(run.ID); err != nil {
		return ledger.Run{}, op(err)
	}
	if run.ExecutionState.Terminal() {
		return ledger.Run{}, op(fmt.Errorf("%w: a %s run has no backstop", ledger.ErrInvalidInput, run.ExecutionState))
	}
	now := s.clock()
	next, err := s.retained(ctx, run, now)
	if err != nil {
		return ledger.Run{}, op(err)
	}
	next.TimerAt = ledger.RunTimer(run, now, s.backstop)
	set := runStateItem(next)
	upd := item{
		tableschema.TimerShard: set[tableschema.TimerShard], tableschema.TimerAt: set[tableschema.TimerAt],
		attrTimerKind: set[attrTimerKind],
	}
	if at, ok := set[tableschema.TTL]; ok {
		upd[tableschema.TTL] = at
	}
	sameState := func(e *expr) string { return e.n(attrExec) + " = " + e.v("exec", str(string(run.ExecutionState))) }
	out, err := s.versionedUpdate(ctx, runPK(run.ID), skRun, upd, run.Version, sameState)
	if err != nil {
		return ledger.Run{}, op(err)
	}
	// The timers entry moves: a delete and a put. The live entry stays.
	size := itemSize(runItem(next).present())
	s.report("rearm_run_backstop", false, []int{size}, runIndexWrites(run, next), consumed(out.ConsumedCapacity))
	return next, nil
}

// UpdateRunState stores a run's derived state with a compare-and-set on the
// version read (run.Version), in ONE UpdateItem of the run item:
//
//	run  Update  SET the states, status, ended_at, version = :expected + 1,
//	             the backstop timer and the live index keys (both REMOVEd
//	             when terminal)
//	     condition  #version = :expected_version
//	     fails: another finisher stored first (ErrVersionConflict), or the
//	     run does not exist (ErrNotFound). Re-read, re-derive.
//
// Status is ExecutionState.Status(); it is never passed separately, so the
// two cannot disagree.
func (s *runs) UpdateRunState(ctx context.Context, run ledger.Run, u ledger.RunUpdate) (ledger.Run, error) {
	op := func(err error) error {
		return fmt.Errorf("update run %s from version %d: %w", run.ID, run.Version, err)
	}
	now := s.clock()
	next, err := ledger.NextRun(run, u, now, s.backstop)
	if err != nil {
		return ledger.Run{}, op(err)
	}
	if next.ExecutionState.Terminal() && !run.ExecutionState.Terminal() {
		// The run ends: it is kept at least its retention from now.
		if next, err = s.retained(ctx, next, now); err != nil {
			return ledger.Run{}, op(err)
		}
	}
	out, err := s.versionedUpdate(ctx, runPK(run.ID), skRun, runStateItem(next), run.Version, nil)
	if err != nil {
		return ledger.Run{}, op(err)
	}
	size := itemSize(runItem(next).present())
	s.report("update_run_state", false, []int{size}, runIndexWrites(run, next), consumed(out.ConsumedCapacity))
	return next, nil
}

// runIndexWrites lists the index entries a run item's write from run to
// next puts, changes or removes: its entry in the live index when it
// appears or leaves (liveIndexWrites), its backstop timer's entry. Its
// listing entry holds keys only, which never change: no write.
func runIndexWrites(run, next ledger.Run) []int {
	return append(liveIndexWrites(runItem(run), runItem(next)), timerIndexWrites(runItem(run), runItem(next))...)
}

// MarkDeadlineMissed records that run was found unfinished at its
// deadline, so that run.deadline_missed is signalled once however many
// passes and processes find it: only the caller whose write lands
// signals. The run's timer goes back to its backstop in the same write.
//
//	Update RUN#<run>/RUN  SET deadline_missed_at, timer_shard, timer_at, timer_kind
//	condition  attribute_exists(#pk) AND attribute_not_exists(#missed)
//	           AND #exec IN (:queued, :running)
//	fails: recorded already, or the run finished first (false), or it
//	does not exist (ErrNotFound).
func (s *runs) MarkDeadlineMissed(ctx context.Context, run ledger.Run) (ledger.Run, bool, error) {
	op := func(err error) error { return fmt.Errorf("mark deadline of run %s missed: %w", run.ID, err) }
	if err := ledger.CheckRunID(run.ID); err != nil {
		return ledger.Run{}, false, op(err)
	}
	if run.DeadlineAt.IsZero() {
		return ledger.Run{}, false, op(fmt.Errorf("%w: the run has no deadline", ledger.ErrInvalidInput))
	}
	next := ledger.DeadlineMissed(run, s.clock(), s.backstop)
	set := runStateItem(next)
	upd := item{
		attrDeadlineMissed:     tm(next.DeadlineMissedAt),
		tableschema.TimerShard: set[tableschema.TimerShard], tableschema.TimerAt: set[tableschema.TimerAt],
		attrTimerKind: set[attrTimerKind],
	}
	e := newExpr()
	cond := "attribute_exists(" + e.n(tableschema.PK) + ") AND attribute_not_exists(" + e.n(attrDeadlineMissed) + ") AND " + unfinishedRun(e)
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(runPK(run.ID), skRun),
		UpdateExpression: aws.String(e.update(upd)), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              s.returnCapacity(),
	})
	if err != nil {
		if old, ok := conditionItem(err); ok {
			if len(old) == 0 {
				if _, gerr := s.GetRun(ctx, run.ID); errors.Is(gerr, ledger.ErrNotFound) {
					return ledger.Run{}, false, op(ledger.ErrNotFound)
				}
			}
			return ledger.Run{}, false, nil
		}
		return ledger.Run{}, false, op(translate(err))
	}
	stored, err := decodeRun(out.Attributes)
	if err == nil {
		err = s.runSpec(ctx, &stored, specRefOf(out.Attributes))
	}
	if pRef := paramsRefOf(out.Attributes); err == nil && pRef != "" {
		// The caller's copy holds them unless it was read without.
		stored.Params = run.Params
		if paramsRef(run.Params) != pRef {
			stored.Params = nil
			err = s.runParams(ctx, &stored, pRef, nil)
		}
	}
	if err != nil {
		return ledger.Run{}, false, op(err)
	}
	size := itemSize(out.Attributes)
	s.report("mark_deadline_missed", false, []int{size}, runIndexWrites(run, stored), consumed(out.ConsumedCapacity))
	return stored, true, nil
}

// unfinishedRun is a condition that a run item is there and its execution
// state is not a terminal one.
func unfinishedRun(e *expr) string {
	var in []string
	for _, st := range statemodel.AllRunStates() {
		if !st.Terminal() {
			in = append(in, e.v("unfinished_"+strings.ToLower(string(st)), str(string(st))))
		}
	}
	return e.n(attrExec) + " IN (" + strings.Join(in, ", ") + ")"
}

// A run's params above paramsInline bytes live apart from the run item,
// in an immutable item of the run's partition named by their content:
//
//	params  RUN#<run>  PARAMS#<sha-256 of the params, 32 hex digits>  params
//
// and the run item holds only their marker (params_ref: their size and
// that digest). Every write of the run item (its creation, twice in the
// transaction; its end; each backstop re-arm; each stored state change)
// costs one write unit per started KB of the whole item, so params inline
// cost every one of those writes; apart, they are written once.
//
// The item is put before the run's transaction (one PutItem, not doubled
// by the transaction), only where it is absent: its key is its content,
// so an item found there holds the same bytes (a retried creation, or a
// second creation of the same run id with the same params, whose own
// expiry must not replace the first run's). A creation that fails after
// it (the run id taken, a slot taken) leaves an item no run names, which
// expires with the run's expiry like every item of a run. It sorts before
// the run item ("PARAMS#" < "RUN"), and nothing else of a run sorts
// between them, so the readers of one run read it in the same call:
// GetRun with a Query of PARAMS# .. RUN, ReadRun with its Query started at
// PARAMS#. A claim's BatchGetItem cannot know it is needed before it reads
// the run item, so it reads it after (one GetItem, only for such a run),
// and a listing page reads those of its runs that have one in one
// BatchGetItem. The store's own state reads (a job's unfinished runs) read
// run items alone and never pay for params.
//
// Runs stored before keep their params inline (attribute params) and read
// from there.
const (
	prefixParams  = "PARAMS#"
	kindParams    = "run_params"
	attrParamsRef = "params_ref"
)

// paramsInline is the largest params (encoded JSON bytes) kept in the run
// item. The run item without params is about 510 bytes at its largest
// (docs/store.md), so params up to 512 bytes keep it within one write
// unit, and apart they would add a put (1 WCU) to save nothing. Above it
// every write of the run item pays one more unit per KB of params, and
// the item apart costs one put of about the params' size, once.
const paramsInline = 512

// paramsApart reports whether params are stored in their own item.
func paramsApart(params []byte) bool { return len(params) > paramsInline }

// paramsRef is params' marker: "<size>:<digest>", the digest naming their
// item (32 hex digits of their SHA-256).
func paramsRef(params []byte) string {
	sum := sha256.Sum256(params)
	return strconv.Itoa(len(params)) + ":" + hex.EncodeToString(sum[:16])
}

// paramsSK is the sort key of the params item a marker names.
func paramsSK(ref string) string {
	_, digest, _ := strings.Cut(ref, ":")
	return prefixParams + digest
}

func paramsItem(r ledger.Run) item {
	return item{
		tableschema.PK: str(runPK(r.ID)), tableschema.SK: str(paramsSK(paramsRef(r.Params))),
		attrKind: str(kindParams), attrRunID: str(r.ID), attrParams: bin(r.Params),
		tableschema.TTL: expiry(r.ExpiresAt),
	}
}

// paramsRefOf is the marker a run item holds, "" when its params are
// inline (or it has none).
func paramsRefOf(m map[string]types.AttributeValue) string {
	if _, inline := m[attrParams]; inline {
		return ""
	}
	return (&reader{it: m}).str(attrParamsRef)
}

// putParams writes run's params item, before the run's transaction, when
// its params are stored apart.
//
//	Put RUN#<run>/PARAMS#<digest>  attribute_not_exists(#pk)
//	fails: the same params are there already (the key is the content):
//	nothing to write.
func (s *base) putParams(ctx context.Context, run ledger.Run) error {
	if !paramsApart(run.Params) {
		return nil
	}
	m := paramsItem(run).present()
	n, err := checkSize("params of run "+run.ID, m)
	if err != nil {
		return err
	}
	out, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.table), Item: m, ReturnConsumedCapacity: s.returnCapacity(),
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": tableschema.PK},
	})
	if _, there := conditionItem(err); err != nil && there {
		return nil
	}
	if err != nil {
		return fmt.Errorf("write the params of run %s: %w", run.ID, translate(err))
	}
	s.report("put_run_params", false, []int{n}, nil, consumed(out.ConsumedCapacity))
	return nil
}

// paramsOf checks a params item against the marker that names it and
// returns its params.
func paramsOf(runID, ref string, it map[string]types.AttributeValue) ([]byte, error) {
	r := &reader{it: it}
	p := r.bytes(attrParams)
	if r.err != nil {
		return nil, r.err
	}
	if paramsRef(p) != ref {
		return nil, fmt.Errorf("%w: the params item of run %s does not match its marker %s", ledger.ErrCorruptItem, runID, ref)
	}
	return p, nil
}

// runParams fills the params of a run read without them: ref is the
// marker its item held ("": inline or none, nothing to do), found the
// params items read with it (by sort key; nil: none), and a missing one
// is read with one GetItem.
func (s *base) runParams(ctx context.Context, run *ledger.Run, ref string, found map[string]map[string]types.AttributeValue) error {
	if ref == "" {
		return nil
	}
	it, ok := found[paramsSK(ref)]
	if !ok {
		out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(s.table), Key: keyOf(runPK(run.ID), paramsSK(ref)), ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return fmt.Errorf("read the params of run %s: %w", run.ID, translate(err))
		}
		if out.Item == nil && ledger.Expired(run.ExpiresAt, s.clock()) {
			return fmt.Errorf("read the params of run %s: %w", run.ID, ledger.ErrNotFound) // expired: gone item by item
		}
		if out.Item == nil {
			return fmt.Errorf("%w: run %s names params %s, which are missing", ledger.ErrCorruptItem, run.ID, ref)
		}
		it = out.Item
	}
	p, err := paramsOf(run.ID, ref, it)
	if err != nil {
		return err
	}
	run.Params = p
	return nil
}

// runsParams fills the params of the runs of a listing page that hold a
// marker (refs[i] is run i's), in one strongly consistent BatchGetItem
// per 100 (a run created a moment ago is listed too).
func (s *base) runsParams(ctx context.Context, runs []ledger.Run, refs []string) error {
	var keys []map[string]types.AttributeValue
	for i, ref := range refs {
		if ref != "" {
			keys = append(keys, keyOf(runPK(runs[i].ID), paramsSK(ref)))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	found := map[string]map[string]types.AttributeValue{}
	err := s.batchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		r := &reader{it: it}
		found[r.str(tableschema.PK)+"/"+r.str(tableschema.SK)] = it
	})
	if err != nil {
		return fmt.Errorf("read runs' params: %w", err)
	}
	for i, ref := range refs {
		if ref == "" {
			continue
		}
		it, ok := found[runPK(runs[i].ID)+"/"+paramsSK(ref)]
		if !ok {
			return fmt.Errorf("%w: run %s names params %s, which are missing", ledger.ErrCorruptItem, runs[i].ID, ref)
		}
		if runs[i].Params, err = paramsOf(runs[i].ID, ref, it); err != nil {
			return err
		}
	}
	return nil
}

// attrTraceID holds a run's trace id as its 16 bytes (21 B with the name,
// against 37 B as hex text); a run stored before runs kept one has none.
const attrTraceID = "trace"

// traceAttr is a trace id's attribute, absent for none. The id was
// checked by CheckNewRun.
func traceAttr(id string) types.AttributeValue {
	b, err := hex.DecodeString(id)
	if err != nil {
		return nil
	}
	return bin(b)
}
