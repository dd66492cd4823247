package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

func jobItem(j ledger.Job) item {
	it := item{
		tableschema.PK: str(jobPK(j.Name)), tableschema.SK: str(skJob),
		attrKind: str(kindJob), attrJob: str(j.Name), attrVersion: num(j.Version),
		attrPaused: boolean(j.Paused), attrSpec: bin(j.Spec), attrNextFireAt: tm(j.NextFireAt),
		attrCatchupNext: tm(j.CatchupNext), attrCatchupLast: tm(j.CatchupLast), attrMissedSlots: optNum(j.MissedSlots),
		attrCreatedAt: tm(j.CreatedAt), attrUpdatedAt: tm(j.UpdatedAt),
		tableschema.ListPK: str(listJobs), tableschema.ListSK: str(j.Name),
		attrUpstream: strList(j.Upstream),
	}
	for k, v := range jobTimer(j) {
		it[k] = v
	}
	return it
}

// jobTimer: a job is in the timers index at TimerAt while it is not paused
// and has pending catch-up runs or a next fire.
func jobTimer(j ledger.Job) item {
	at := j.TimerAt()
	if at.IsZero() {
		return item{tableschema.TimerShard: nil, tableschema.TimerAt: nil, attrTimerKind: nil}
	}
	return item{
		tableschema.TimerShard: str(timerShard(jobPK(j.Name), skJob)),
		tableschema.TimerAt:    str(ledger.FormatTime(at)),
		attrTimerKind:          str(ledger.TimerKindJobFire),
	}
}

// positionItem is the attributes of a schedule position (absent when zero).
func positionItem(p ledger.SchedulePosition) item {
	return item{attrNextFireAt: tm(p.NextFireAt), attrCatchupNext: tm(p.CatchupNext), attrCatchupLast: tm(p.CatchupLast)}
}

func decodeJob(m map[string]types.AttributeValue) (ledger.Job, error) {
	r := &reader{it: m}
	j := ledger.Job{
		Name: r.str(attrJob), Version: r.int(attrVersion), Paused: r.bool(attrPaused),
		Spec: r.bytes(attrSpec), NextFireAt: r.time(attrNextFireAt),
		CatchupNext: r.time(attrCatchupNext), CatchupLast: r.time(attrCatchupLast), MissedSlots: r.int(attrMissedSlots),
		CreatedAt: r.time(attrCreatedAt), UpdatedAt: r.time(attrUpdatedAt),
		Upstream: r.strList(attrUpstream),
	}
	return j, r.err
}

// edgeItem is the dependency edge of job down on job up.
func edgeItem(up, down string) item {
	return item{
		tableschema.PK: str(jobPK(up)), tableschema.SK: str(dependentSK(down)),
		attrKind: str(kindDependency), attrJob: str(down), attrUpstream: str(up),
	}
}

// edgeActions are the writes that move job's edges from the upstream list
// before to after: a Put of each edge in after (idempotent, and it repairs
// a missing edge) and a Delete of each edge only in before.
func (s *jobs) edgeActions(job string, before, after []string) ([]types.TransactWriteItem, []int) {
	var actions []types.TransactWriteItem
	var sizes []int
	for _, up := range after {
		it := edgeItem(up, job).present()
		actions = append(actions, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.table), Item: it}})
		sizes = append(sizes, itemSize(it))
	}
	for _, up := range before {
		if !slices.Contains(after, up) {
			actions = append(actions, types.TransactWriteItem{Delete: &types.Delete{
				TableName: aws.String(s.table), Key: keyOf(jobPK(up), dependentSK(job)),
			}})
			sizes = append(sizes, 0)
		}
	}
	return actions, sizes
}

// ListDependents lists the jobs that depend on job (their depends_on_jobs
// name it), by name: one strongly consistent Query of job's dependency
// edges, however many jobs are defined.
//
//	pk = JOB#<job> AND sk BETWEEN "DEP#" AND "DEP$"
func (s *jobs) ListDependents(ctx context.Context, job string) ([]string, error) {
	op := func(err error) error { return fmt.Errorf("list dependents of job %s: %w", job, err) }
	if err := ledger.CheckJobName(job); err != nil {
		return nil, op(err)
	}
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String(e.prefixKey(jobPK(job), prefixDependent)),
		ProjectionExpression:   aws.String(e.n(attrJob)),
	}
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.nameMap(), e.valueMap()
	var out []string
	for {
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, op(translate(err))
		}
		for _, it := range page.Items {
			r := &reader{it: it}
			out = append(out, r.str(attrJob))
			if r.err != nil {
				return nil, op(r.err)
			}
		}
		if page.LastEvaluatedKey == nil {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// CreateJob stores a new job at version 1, stamped with the store's clock,
// with its dependency edges (one transaction when it has upstream jobs).
//
//	Put JOB#<name>/JOB      condition attribute_not_exists(#pk)
//	                        fails: a job of that name exists (ErrAlreadyExists).
//	Put JOB#<up>/DEP#<name> per upstream job, unconditional
func (s *jobs) CreateJob(ctx context.Context, j ledger.Job) (ledger.Job, error) {
	op := func(err error) error { return fmt.Errorf("create job %s: %w", j.Name, err) }
	if err := ledger.CheckJobName(j.Name); err != nil {
		return ledger.Job{}, op(err)
	}
	if err := ledger.CheckUpstream(&j); err != nil {
		return ledger.Job{}, op(err)
	}
	now := s.clock()
	j.Version, j.CreatedAt, j.UpdatedAt = 1, now, now
	it := jobItem(j).present()
	size, err := checkSize("job "+j.Name, it)
	if err != nil {
		return ledger.Job{}, op(err)
	}
	// One transaction: the job, its gates (open: a job of this name
	// deleted before leaves closed ones) and its dependency edges.
	cond, names := aws.String("attribute_not_exists(#pk)"), map[string]string{"#pk": tableschema.PK}
	edges, edgeSizes := s.edgeActions(j.Name, nil, j.Upstream)
	gates := s.gatePuts(j.Name, nil)
	actions := append([]types.TransactWriteItem{{Put: &types.Put{
		TableName: aws.String(s.table), Item: it, ConditionExpression: cond, ExpressionAttributeNames: names,
	}}}, gates...)
	sizes := append([]int{size}, edgeSizes...)
	for _, g := range gates {
		sizes = append(sizes, itemSize(g.Put.Item))
	}
	err = s.transact(ctx, "create_job", append(actions, edges...), sizes, nil)
	if conditionFailed(cancellation(err), 0) {
		return ledger.Job{}, op(ledger.ErrAlreadyExists)
	}
	if err != nil {
		return ledger.Job{}, op(cancelError(err, cancellation(err)))
	}
	return j, nil
}

func consumed(c *types.ConsumedCapacity) []types.ConsumedCapacity {
	if c == nil {
		return nil
	}
	return []types.ConsumedCapacity{*c}
}

// GetJob reads a job (strongly consistent).
func (s *jobs) GetJob(ctx context.Context, name string) (ledger.Job, error) {
	if err := ledger.CheckJobName(name); err != nil {
		return ledger.Job{}, fmt.Errorf("get job %s: %w", name, err)
	}
	j, err := getItem(ctx, s.base, jobPK(name), skJob, decodeJob)
	if err != nil {
		return ledger.Job{}, fmt.Errorf("get job %s: %w", name, err)
	}
	return j, nil
}

// ListJobs lists jobs by name from the listing index (list_pk "JOBS";
// eventually consistent), limit per page (0: DefaultListLimit), with an
// opaque token for the next page ("" at the end).
func (s *jobs) ListJobs(ctx context.Context, limit int, token string) ([]ledger.Job, string, error) {
	op := func(err error) error { return fmt.Errorf("list jobs: %w", err) }
	if limit <= 0 {
		limit = ledger.DefaultListLimit
	}
	start, err := decodeToken(token, map[string]string{
		tableschema.ListPK: listJobs, tableschema.ListSK: "", tableschema.PK: "", tableschema.SK: skJob,
	})
	if err != nil {
		return nil, "", op(err)
	}
	e := newExpr()
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(s.table), IndexName: aws.String(tableschema.ListIndex),
		KeyConditionExpression:   aws.String(e.n(tableschema.ListPK) + " = " + e.v("list_pk", str(listJobs))),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		Limit: aws.Int32(int32(min(limit, ledger.MaxListLimit))), ExclusiveStartKey: start,
	})
	if err != nil {
		return nil, "", op(translate(err))
	}
	// The index holds the keys only: the jobs are read by name.
	names := make([]string, 0, len(out.Items))
	for _, it := range out.Items {
		r := &reader{it: it}
		names = append(names, r.str(tableschema.ListSK))
	}
	jobs, err := s.list.getJobs(ctx, names)
	if err != nil {
		return nil, "", op(err)
	}
	return jobs, encodeToken(out.LastEvaluatedKey), nil
}

// UpdateJob replaces a job's spec, schedule position (next fire and
// pending catch-up) and upstream jobs with a compare-and-set on its
// version; the result has version expected+1. Paused, MissedSlots and
// CreatedAt are kept as stored (pause has its own operation).
//
//	Update JOB#<name>/JOB  SET spec, next_fire_at, catch-up, updated_at, upstream, version = :expected + 1, timer
//	condition  #version = :expected_version
//	fails: the job changed since it was read (ErrVersionConflict) or does
//	not exist (ErrNotFound), told apart by the ALL_OLD image.
//
// When the upstream jobs change, the same transaction puts the new edges
// and deletes the old ones.
func (s *jobs) UpdateJob(ctx context.Context, j ledger.Job, expected int64) (ledger.Job, error) {
	op := func(err error) error { return fmt.Errorf("update job %s from version %d: %w", j.Name, expected, err) }
	if err := ledger.CheckJobName(j.Name); err != nil {
		return ledger.Job{}, op(err)
	}
	if err := ledger.CheckUpstream(&j); err != nil {
		return ledger.Job{}, op(err)
	}
	// The stored paused flag decides the timer, so the update must know
	// it: it is part of the version-checked state, read with the item.
	cur, err := s.GetJob(ctx, j.Name)
	if err != nil {
		return ledger.Job{}, op(err)
	}
	if cur.Version != expected {
		return ledger.Job{}, op(fmt.Errorf("%w: stored version is %d", ledger.ErrVersionConflict, cur.Version))
	}
	next := cur
	next.Spec, next.NextFireAt, next.CatchupNext, next.CatchupLast, next.Upstream = j.Spec, j.NextFireAt, j.CatchupNext, j.CatchupLast, j.Upstream
	next.Version, next.UpdatedAt = expected+1, s.clock()
	return s.writeJob(ctx, cur, next, "update_job", op)
}

// SetJobPaused pauses or resumes a job: a paused job leaves the timers
// index; a resumed one with a next fire returns to it. The version moves.
// Pausing a paused job changes nothing and succeeds.
//
//	Update JOB#<name>/JOB  SET paused, updated_at, version = :expected + 1, timer
//	condition  #version = :expected_version (the version this call read)
//	fails: a concurrent change; ErrVersionConflict.
func (s *jobs) SetJobPaused(ctx context.Context, name string, paused bool) (ledger.Job, error) {
	op := func(err error) error { return fmt.Errorf("set job %s paused=%t: %w", name, paused, err) }
	cur, err := s.GetJob(ctx, name)
	if err != nil {
		return ledger.Job{}, op(err)
	}
	if cur.Paused == paused {
		return cur, nil
	}
	next := cur
	next.Paused, next.Version, next.UpdatedAt = paused, cur.Version+1, s.clock()
	return s.writeJob(ctx, cur, next, "set_job_paused", op)
}

// MoveSchedule moves a running (not paused) job's schedule from m.From to
// m.To and adds m.Missed to its missed slots, in one conditional write.
// The ticker calls it after deciding a fire or a catch-up from the job at
// m.Version; m.From makes two tickers deciding from the same position
// agree: one move wins, the other meets ErrConflict and its slots are
// claimed already. The version does not move: the position is schedule
// state, not the definition a client edits with If-Match.
//
//	Update JOB#<name>/JOB  SET next_fire_at, catchup_next, catchup_last, timer (REMOVE the zero ones)
//	                       ADD missed_slots :missed
//	condition  #version = :version AND #paused = false
//	           AND next_fire_at, catchup_next, catchup_last as in m.From (absent when zero)
//	fails: another ticker moved it, the job was paused, resumed or updated
//	meanwhile, or it is gone: ErrConflict.
func (s *jobs) MoveSchedule(ctx context.Context, name string, m ledger.ScheduleMove) (ledger.Job, error) {
	op := func(err error) error {
		return fmt.Errorf("move schedule of job %s from %s to %s: %w", name, ledger.FormatTime(m.From.NextFireAt), ledger.FormatTime(m.To.NextFireAt), err)
	}
	if err := ledger.CheckJobName(name); err != nil {
		return ledger.Job{}, op(err)
	}
	j, err := s.writePosition(ctx, name, "move_schedule", m, false, nil)
	if err != nil {
		return ledger.Job{}, op(err)
	}
	return j, nil
}

// ResumeJob resumes a paused job and moves its schedule as m says (the
// catch-up of the slots that fell while it was paused), in one
// conditional write; the version moves to m.Version+1.
//
//	Update JOB#<name>/JOB  SET paused = false, updated_at, version = :version + 1,
//	                       next_fire_at, catchup_next, catchup_last, timer
//	                       ADD missed_slots :missed
//	condition  #version = :version AND #paused = true AND the position as in m.From
//	fails: the job changed since it was read (resumed, updated, moved) or
//	is gone: ErrConflict.
func (s *jobs) ResumeJob(ctx context.Context, name string, m ledger.ScheduleMove) (ledger.Job, error) {
	op := func(err error) error { return fmt.Errorf("resume job %s from version %d: %w", name, m.Version, err) }
	if err := ledger.CheckJobName(name); err != nil {
		return ledger.Job{}, op(err)
	}
	extra := item{attrPaused: boolean(false), attrVersion: num(m.Version + 1), attrUpdatedAt: tm(s.clock())}
	j, err := s.writePosition(ctx, name, "resume_job", m, true, extra)
	if err != nil {
		return ledger.Job{}, op(err)
	}
	return j, nil
}

// writePosition writes m.To over m.From on a job whose paused flag is
// paused, with extra attributes set beside it, and returns the job as
// written.
func (s *jobs) writePosition(ctx context.Context, name, opName string, m ledger.ScheduleMove, paused bool, extra item) (ledger.Job, error) {
	if m.Missed < 0 {
		return ledger.Job{}, fmt.Errorf("%w: %d missed slots", ledger.ErrInvalidInput, m.Missed)
	}
	// The timer follows the position of the job as it will be: not paused.
	set := jobTimer(ledger.Job{Name: name, NextFireAt: m.To.NextFireAt, CatchupNext: m.To.CatchupNext, CatchupLast: m.To.CatchupLast})
	for k, v := range positionItem(m.To) {
		set[k] = v
	}
	for k, v := range extra {
		set[k] = v
	}
	e := newExpr()
	conds := []string{
		e.n(attrVersion) + " = " + e.v("version", num(m.Version)),
		e.n(attrPaused) + " = " + e.v("paused", boolean(paused)),
	}
	for k, v := range positionItem(m.From) {
		if v == nil {
			conds = append(conds, "attribute_not_exists("+e.n(k)+")")
		} else {
			conds = append(conds, e.n(k)+" = "+e.v("from_"+k, v))
		}
	}
	slices.Sort(conds[2:])
	update := e.update(set)
	if m.Missed > 0 {
		update += " ADD " + e.n(attrMissedSlots) + " " + e.v("missed", num(m.Missed))
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(jobPK(name), skJob),
		UpdateExpression: aws.String(update), ConditionExpression: aws.String(strings.Join(conds, " AND ")),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		ReturnValues: types.ReturnValueAllNew, ReturnConsumedCapacity: s.returnCapacity(),
	})
	if err != nil {
		if _, ok := conditionItem(err); ok {
			return ledger.Job{}, ledger.ErrConflict
		}
		return ledger.Job{}, translate(err)
	}
	j, err := decodeJob(out.Attributes)
	if err != nil {
		return ledger.Job{}, err
	}
	s.report(opName, false, []int{itemSize(out.Attributes)}, nil, consumed(out.ConsumedCapacity))
	return j, nil
}

// writeJob writes next over cur with a version compare-and-set, and moves
// the dependency edges in the same transaction when the upstream jobs
// changed.
func (s *jobs) writeJob(ctx context.Context, cur, next ledger.Job, opName string, op func(error) error) (ledger.Job, error) {
	full := jobItem(next)
	size, err := checkSize("job "+next.Name, full.present())
	if err != nil {
		return ledger.Job{}, op(err)
	}
	set := jobTimer(next)
	set[attrSpec] = bin(next.Spec)
	for k, v := range positionItem(next.Position()) {
		set[k] = v
	}
	set[attrPaused] = boolean(next.Paused)
	set[attrUpdatedAt] = tm(next.UpdatedAt)
	set[attrVersion] = num(next.Version)
	set[attrUpstream] = strList(next.Upstream)
	if !slices.Equal(cur.Upstream, next.Upstream) {
		e := newExpr()
		cond := e.n(attrVersion) + " = " + e.v("expected_version", num(cur.Version))
		edges, edgeSizes := s.edgeActions(next.Name, cur.Upstream, next.Upstream)
		actions := append([]types.TransactWriteItem{{Update: &types.Update{
			TableName: aws.String(s.table), Key: keyOf(jobPK(next.Name), skJob),
			UpdateExpression: aws.String(e.update(set)), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		}}}, edges...)
		err := s.transact(ctx, opName, actions, append([]int{size}, edgeSizes...), nil)
		if reasons := cancellation(err); conditionFailed(reasons, 0) || (reasons != nil && transientCancel(reasons)) {
			return ledger.Job{}, op(ledger.ErrVersionConflict)
		} else if err != nil {
			return ledger.Job{}, op(cancelError(err, reasons))
		}
		return next, nil
	}
	out, err := s.versionedUpdate(ctx, jobPK(next.Name), skJob, set, cur.Version, nil)
	if err != nil {
		return ledger.Job{}, op(err)
	}
	s.report(opName, false, []int{size}, nil, consumed(out.ConsumedCapacity))
	return next, nil
}

// deleteJob deletes the job as read (cur) with its edges; retry reports a
// failed condition: the job changed or went since it was read.
func (s *jobs) deleteJob(ctx context.Context, cur ledger.Job, mark int64) (retry bool, err error) {
	e := newExpr()
	// The job is as read and still carries this caller's mark.
	cond := e.n(attrVersion) + " = " + e.v("read_version", num(cur.Version)) +
		" AND " + e.n(attrDeleting) + " = " + e.v("mark", num(mark))
	edges, _ := s.edgeActions(cur.Name, cur.Upstream, nil)
	actions := append([]types.TransactWriteItem{{Delete: &types.Delete{
		TableName: aws.String(s.table), Key: keyOf(jobPK(cur.Name), skJob), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
	}}}, edges...)
	// The gates close for good: no run of the deleted job from now on.
	actions = append(actions, s.gatePuts(cur.Name, item{attrDeleted: &types.AttributeValueMemberBOOL{Value: true}})...)
	err = s.transact(ctx, "delete_job", actions, nil, nil)
	reasons := cancellation(err)
	switch {
	case err == nil:
		return false, nil
	case conditionFailed(reasons, 0):
		return true, nil
	}
	return false, cancelError(err, reasons)
}

// attrDeleting is the job item's deletion mark: the unix milliseconds at
// which DeleteJobIfIdle marked it. A mark older than deletingMarkTTL (a
// deleter that stopped half way) no longer refuses runs.
const attrDeleting = "deleting"

// deletingMarkTTL bounds how long a deletion mark refuses new runs; a
// DeleteJobIfIdle that took longer starts again.
const deletingMarkTTL = time.Minute

// jobGateCheck is CreateRun's condition (NewRun.OfLiveJob) on the gate of
// the run's job shard: the job was not deleted and carries no live
// deletion mark. The gates of a job repeat its deletion state on each of
// its shards, so that one job's runs do not all check one item (a check
// costs a write); a job created before the gates has none, and its runs
// pass until its first deletion attempt writes them.
func jobGateCheck(table, job, run string, now time.Time) types.TransactWriteItem {
	e := newExpr()
	cond := "attribute_not_exists(" + e.n(attrDeleted) + ") AND (attribute_not_exists(" + e.n(attrDeleting) + ") OR " +
		e.n(attrDeleting) + " < " + e.v("stale", num(now.Add(-deletingMarkTTL).UnixMilli())) + ")"
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(table), Key: keyOf(jobShard(job, run), skGate), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
	}}
}

// skGate is the sort key of a job shard's gate item; attrDeleted marks the
// gates of a deleted job (a new job of the name writes fresh gates).
const (
	skGate      = "GATE"
	attrDeleted = "deleted"
)

// gateActions are one action per gate of job, made by action(key).
func gateActions(job string, action func(key map[string]types.AttributeValue) types.TransactWriteItem) []types.TransactWriteItem {
	out := make([]types.TransactWriteItem, 0, tableschema.JobShards)
	for n := range tableschema.JobShards {
		out = append(out, action(keyOf(jobShardN(job, n), skGate)))
	}
	return out
}

// gatePuts puts job's gates anew with extra attributes (none: open).
func (s *jobs) gatePuts(job string, extra item) []types.TransactWriteItem {
	return gateActions(job, func(key map[string]types.AttributeValue) types.TransactWriteItem {
		it := item{tableschema.PK: key[tableschema.PK], tableschema.SK: key[tableschema.SK], attrKind: str(kindGate), attrJob: str(job)}
		for k, v := range extra {
			it[k] = v
		}
		return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.table), Item: it.present()}}
	})
}

// DeleteJobIfIdle deletes a job definition and its dependency edges
// (its runs, pointers, slot claims and idempotency keys stay: past runs
// stay readable) only when it has no unfinished run, as conditional
// writes, so no run is created in between:
//
//	mark    Update JOB#<job>/JOB  SET deleting = :now   #version = :read_version
//	        and each gate JOB#<job>#nn/GATE the same, in one transaction
//	check   the job's live runs (HasUnfinishedRuns, a consistent query)
//	        any: REMOVE deleting, and ErrUnfinishedRuns
//	delete  Delete JOB#<job>/JOB (and its edges)  #version = :read_version AND deleting = :mark
//	        and close each gate (deleted), in one transaction
//
// A run's creating write checks its shard's gate is not closed and carries
// no live mark (NewRun.OfLiveJob, jobGateCheck), so a run created after the mark fails, and one
// created before it is found by the check. A write to the job in between
// fails the delete's condition, and the whole is tried again.
func (s *jobs) DeleteJobIfIdle(ctx context.Context, name string) error {
	op := func(err error) error { return fmt.Errorf("delete job %s: %w", name, err) }
	if err := ledger.CheckJobName(name); err != nil {
		return op(err)
	}
	err := ledger.Update(ctx, ledger.Rounds{Max: conflictRetries + 1},
		func(ctx context.Context, _ int) (ledger.Job, error) { return s.GetJob(ctx, name) },
		func(_ context.Context, cur ledger.Job) (ledger.Job, ledger.Step, error) {
			return cur, ledger.StepWrite, nil
		},
		s.deleteIfIdle)
	if errors.Is(err, ledger.ErrUnsettled) {
		err = ledger.ErrVersionConflict
	}
	if err != nil {
		return op(err)
	}
	return nil
}

// deleteIfIdle deletes cur, the job as read, unless it has unfinished
// runs (ledger.ErrUnfinishedRuns); a write to the job since the read is
// ledger.ErrVersionConflict, to read it again.
func (s *jobs) deleteIfIdle(ctx context.Context, cur ledger.Job) error {
	mark := s.clock().UnixMilli()
	marked, err := s.markJobDeleting(ctx, cur, mark)
	if err != nil {
		return err
	}
	if !marked {
		return ledger.ErrVersionConflict
	}
	busy, err := s.runs.HasUnfinishedRuns(ctx, cur.Name)
	if err != nil || busy {
		s.unmarkJobDeleting(ctx, cur.Name, mark)
		if err == nil {
			err = fmt.Errorf("%w: job %s", ledger.ErrUnfinishedRuns, cur.Name)
		}
		return err
	}
	retry, err := s.deleteJob(ctx, cur, mark)
	if err == nil && retry {
		return ledger.ErrVersionConflict
	}
	return err
}

// markJobDeleting sets the job's deletion mark if the job is still at the
// version read; false when it changed or went.
func (s *jobs) markJobDeleting(ctx context.Context, cur ledger.Job, mark int64) (bool, error) {
	e := newExpr()
	actions := []types.TransactWriteItem{{Update: &types.Update{
		TableName: aws.String(s.table), Key: keyOf(jobPK(cur.Name), skJob),
		UpdateExpression:         aws.String("SET " + e.n(attrDeleting) + " = " + e.v("mark", num(mark))),
		ConditionExpression:      aws.String(e.n(attrVersion) + " = " + e.v("read_version", num(cur.Version))),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
	}}}
	// The same mark on every gate, in the same write: a run whose creation
	// checks its gate after this fails, one before it is found live.
	actions = append(actions, gateActions(cur.Name, func(key map[string]types.AttributeValue) types.TransactWriteItem {
		g := newExpr()
		return types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(s.table), Key: key,
			UpdateExpression: aws.String("SET " + g.n(attrDeleting) + " = " + g.v("mark", num(mark)) +
				", " + g.n(attrKind) + " = " + g.v("kind", str(kindGate)) + ", " + g.n(attrJob) + " = " + g.v("job", str(cur.Name))),
			ExpressionAttributeNames: g.nameMap(), ExpressionAttributeValues: g.valueMap(),
		}}
	})...)
	err := s.transact(ctx, "mark_job_deleting", actions, nil, nil)
	if conditionFailed(cancellation(err), 0) {
		return false, nil
	}
	if err != nil {
		return false, cancelError(err, cancellation(err))
	}
	return true, nil
}

// unmarkJobDeleting removes this caller's deletion mark; a failure leaves
// it to expire (deletingMarkTTL).
func (s *jobs) unmarkJobDeleting(ctx context.Context, name string, mark int64) {
	keys := []map[string]types.AttributeValue{keyOf(jobPK(name), skJob)}
	for n := range tableschema.JobShards {
		keys = append(keys, keyOf(jobShardN(name, n), skGate))
	}
	for _, key := range keys {
		e := newExpr()
		_, _ = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(s.table), Key: key,
			UpdateExpression:         aws.String("REMOVE " + e.n(attrDeleting)),
			ConditionExpression:      aws.String(e.n(attrDeleting) + " = " + e.v("mark", num(mark))),
			ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		})
	}
}
