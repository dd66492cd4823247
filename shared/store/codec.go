package store

import (
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// Attribute names shared by several item kinds. Key and index attributes
// come from tableschema.
const (
	attrKind    = "kind"
	attrJob     = tableschema.JobName
	attrRun     = "run"
	attrTask    = "task"
	attrRunID   = tableschema.RunID
	attrVersion = "version"
	attrStatus  = "status"
	attrExec    = "execution_state"
	attrPub     = "publication_state"

	attrState          = "state"
	attrSeq            = "seq"
	attrAttempt        = "attempt"
	attrAttempts       = "attempts"
	attrSpent          = "spent"
	attrResubmits      = "resubmits"
	attrFreeNext       = "free_next"
	attrRetryAt        = "retry_at"
	attrDeadline       = "deadline"
	attrCancelReq      = "cancel_requested"
	attrPausedFrom     = "paused_from"
	attrLeaseBeat      = "lease_heartbeat_at"
	attrLeaseExpires   = "lease_expires_at"
	attrRecent         = "recent"
	attrCreatedAt      = "created_at"
	attrScheduledAt    = "scheduled_at"
	attrTimerKind      = tableschema.TimerKind
	attrLateEvents     = "late_events"
	attrLateEventIDs   = "late_event_ids"
	attrLateDropped    = "late_events_dropped"
	attrEventID        = "event_id"
	attrTo             = "to"
	attrAttemptRecord  = "attempt_record"
	attrPool           = "pool"
	attrPayload        = "payload"
	attrPolicy         = "policy"
	attrDependsOn      = "depends_on"
	attrTriggerRule    = "trigger_rule"
	attrPublish        = "publish"
	attrLogicalTime    = tableschema.LogicalTime
	attrParams         = "params"
	attrSpec           = "spec"
	attrEndedAt        = "ended_at"
	attrDeadlineAt     = "deadline_at"
	attrDeadlineMissed = "deadline_missed_at"
	attrDepsTimeoutAt  = "dependency_timeout_at"
	attrUpdatedAt      = "updated_at"
	attrPaused         = "paused"
	attrNextFireAt     = "next_fire_at"
	attrCatchupNext    = "catchup_next"
	attrCatchupLast    = "catchup_last"
	attrMissedSlots    = "missed_slots"
	attrBodyHash       = "body_hash"
	attrTokenHash      = "token_hash"
	attrWorkerID       = "worker_id"
	attrExecutorID     = "executor_id"
	attrExecutor       = "executor"
	attrExecutorSpec   = "executor_spec"
	attrSecret         = "secret"
	attrSpendsBudget   = "spends_budget"
	attrQueuedAt       = "queued_at"
	attrStartedAt      = "started_at"
	attrLastHeartbeat  = "last_heartbeat_at"
	attrExitCode       = "exit_code"
	attrErrorCategory  = "error_category"
	attrOutcome        = "outcome"
	attrOutputRef      = "output_ref"
	attrOutput         = "output"
	attrClaimEventID   = "claim_event_id"
	attrN              = "n"
	attrID             = "id"
	attrType           = "type"
	attrActor          = "actor"
	attrEventTime      = "event_time"
	attrObservedAt     = "observed_at"
	attrDetail         = "detail"
	attrFrom           = "from"
	attrEvent          = "event"
	attrEvidence       = "evidence"
	attrReason         = "reason"
	attrOperator       = "operator"
	attrScope          = "scope"
	attrLease          = "lease"
	attrLeaseHeartbeat = "heartbeat_at"
	attrLeaseExpiry    = "expires_at"
	attrUpstream       = "upstream"
	attrHistory        = "history"
	attrRecords        = "records"
	attrTrigger        = tableschema.Trigger
	attrBackfill       = "backfill_id"
)

// Item kinds, stored in attrKind and returned by ListDueTimers.
const (
	kindJob        = "job"
	kindSlot       = "slot"
	kindIdem       = "idempotency"
	kindPointer    = "run_pointer"
	kindGate       = "job_gate"
	kindRun        = "run"
	kindInstance   = "instance"
	kindAttempt    = "attempt"
	kindTransition = "transition" // a record of the former layout, one per item
	kindHistory    = "history"    // spilled records, many per item
	kindDependency = "dependency"
)

// snapshotItem holds every statemodel.Snapshot field of an instance item.
// Its times are epoch nanoseconds under short names, but for the lease's:
// a heartbeat writes those, and lease.expired's condition compares the
// stored expiry as a time string, so they keep that form.
// Zero fields are absent (nil), so an update removes what became zero. The
// attempt records are compact (record.go), and the recent event ids are
// not stored: they are the inline records' (recentOf). Both former
// attributes are nil, so an instance's first write in this format removes
// them.
func snapshotItem(s statemodel.Snapshot) item {
	return item{
		attrState:          str(string(s.State)),
		attrVersion:        num(s.Version),
		attrSeq:            num(s.Seq),
		attrAttempt:        num(int64(s.Attempt)),
		attrInlineAttempts: compactAttempts(s.Attempts),
		attrAttempts:       nil,
		attrSpent:          num(int64(s.Spent)),
		attrResubmits:      num(int64(s.Resubmits)),
		attrFreeNext:       optBool(s.FreeNext),
		attrRetryAtC:       nanos(s.RetryAt),
		attrDeadlineC:      nanos(s.Deadline),
		attrRetryAt:        nil,
		attrDeadline:       nil,
		attrCancelReq:      optBool(s.CancelRequested),
		attrPausedFrom:     optStr(string(s.PausedFrom)),
		attrLeaseBeat:      tm(s.Lease.LastHeartbeatAt),
		attrLeaseExpires:   tm(s.Lease.ExpiresAt),
		attrRecent:         nil,
		attrCreatedAtC:     nanos(s.CreatedAt),
		attrScheduledAtC:   nanos(s.ScheduledAt),
		attrCreatedAt:      nil,
		attrScheduledAt:    nil,
	}
}

// snapshotTime reads a snapshot time stored compact (epoch nanoseconds,
// under name) or, in an item written before, as a time string (under
// former).
func (r *reader) snapshotTime(name, former string) time.Time {
	if _, ok := r.it[name]; ok {
		return r.nanos(name)
	}
	return r.time(former)
}

func readSnapshot(r *reader) statemodel.Snapshot {
	s := statemodel.Snapshot{
		State:           statemodel.InstanceState(r.str(attrState)),
		Version:         r.int(attrVersion),
		Seq:             r.int(attrSeq),
		Attempt:         int(r.int(attrAttempt)),
		Spent:           int(r.int(attrSpent)),
		Resubmits:       int(r.int(attrResubmits)),
		FreeNext:        r.bool(attrFreeNext),
		RetryAt:         r.snapshotTime(attrRetryAtC, attrRetryAt),
		Deadline:        r.snapshotTime(attrDeadlineC, attrDeadline),
		CancelRequested: r.bool(attrCancelReq),
		PausedFrom:      statemodel.InstanceState(r.str(attrPausedFrom)),
		Lease:           statemodel.Lease{LastHeartbeatAt: r.time(attrLeaseBeat), ExpiresAt: r.time(attrLeaseExpires)},
		CreatedAt:       r.snapshotTime(attrCreatedAtC, attrCreatedAt),
		ScheduledAt:     r.snapshotTime(attrScheduledAtC, attrScheduledAt),
	}
	for _, m := range r.maps(attrInlineAttempts) {
		sub := &reader{it: m}
		s.Attempts = append(s.Attempts, readCompactAttempt(sub))
		if sub.err != nil && r.err == nil {
			r.err = sub.err
		}
	}
	// An item of the former format: long-named attempt records and the
	// recent ids stored.
	for _, m := range r.maps(attrAttempts) {
		sub := &reader{it: m}
		s.Attempts = append(s.Attempts, readAttemptRecord(sub))
		if sub.err != nil && r.err == nil {
			r.err = sub.err
		}
	}
	for _, m := range r.maps(attrRecent) {
		sub := &reader{it: m}
		s.Recent = append(s.Recent, statemodel.SeenEvent{
			ID: sub.str(attrID), Seq: sub.int(attrSeq), To: statemodel.InstanceState(sub.str(attrTo)),
		})
		if sub.err != nil && r.err == nil {
			r.err = sub.err
		}
	}
	return s
}

// attemptRecordItem holds the fields of an attempt record; the attempt item
// stores them at the top level, the instance and transition items nest them.
func attemptRecordItem(a statemodel.AttemptRecord) item {
	var exit types.AttributeValue
	if a.ExitCode != nil {
		exit = num(int64(*a.ExitCode))
	}
	return item{
		attrN:             num(int64(a.N)),
		attrTokenHash:     optStr(a.TokenHash),
		attrExecutorID:    optStr(a.ExecutorID),
		attrExecutor:      optStr(a.Executor),
		attrWorkerID:      optStr(a.WorkerID),
		attrSpendsBudget:  optBool(a.SpendsBudget),
		attrQueuedAt:      tm(a.QueuedAt),
		attrStartedAt:     tm(a.StartedAt),
		attrEndedAt:       tm(a.EndedAt),
		attrLastHeartbeat: tm(a.LastHeartbeatAt),
		attrExitCode:      exit,
		attrErrorCategory: optStr(a.ErrorCategory),
		attrOutcome:       optStr(string(a.Outcome)),
		attrOutputRef:     optStr(a.OutputRef),
		attrClaimEventID:  optStr(a.ClaimEventID),
		attrOutput:        optStr(string(a.Output)),
	}
}

func readAttemptRecord(r *reader) statemodel.AttemptRecord {
	return statemodel.AttemptRecord{
		N:               int(r.int(attrN)),
		TokenHash:       r.str(attrTokenHash),
		ExecutorID:      r.str(attrExecutorID),
		Executor:        r.str(attrExecutor),
		WorkerID:        r.str(attrWorkerID),
		SpendsBudget:    r.bool(attrSpendsBudget),
		QueuedAt:        r.time(attrQueuedAt),
		StartedAt:       r.time(attrStartedAt),
		EndedAt:         r.time(attrEndedAt),
		LastHeartbeatAt: r.time(attrLastHeartbeat),
		ExitCode:        r.optInt(attrExitCode),
		ErrorCategory:   r.str(attrErrorCategory),
		Outcome:         statemodel.AttemptOutcome(r.str(attrOutcome)),
		OutputRef:       r.str(attrOutputRef),
		ClaimEventID:    r.str(attrClaimEventID),
		Output:          optBytes(r.str(attrOutput)),
	}
}

// optBytes is nil for the empty string.
func optBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func lateEventItem(l statemodel.LateEvent) item {
	return item{
		attrAttempt:    num(int64(l.Attempt)),
		attrID:         str(l.EventID),
		attrType:       str(string(l.Type)),
		attrActor:      str(string(l.Actor)),
		attrEventTime:  tm(l.EventTime),
		attrObservedAt: tm(l.ObservedAt),
		attrOutcome:    optStr(string(l.Outcome)),
		attrDetail:     optStr(l.Detail),
	}
}

func readLateEvent(r *reader) statemodel.LateEvent {
	return statemodel.LateEvent{
		Attempt:    int(r.int(attrAttempt)),
		EventID:    r.str(attrID),
		Type:       statemodel.EventType(r.str(attrType)),
		Actor:      statemodel.Actor(r.str(attrActor)),
		EventTime:  r.time(attrEventTime),
		ObservedAt: r.time(attrObservedAt),
		Outcome:    statemodel.AttemptOutcome(r.str(attrOutcome)),
		Detail:     r.str(attrDetail),
	}
}

// transitionFields holds a transition record's own fields in the former,
// long-named encoding (keys, kind and TTL are added by the caller): the
// store reads it in items written before compact records (record.go) and
// writes it no more (tests write it to build such items).
func transitionFields(tr statemodel.Transition) item {
	var rec types.AttributeValue
	if tr.AttemptRecord != nil {
		rec = &types.AttributeValueMemberM{Value: attemptRecordItem(*tr.AttemptRecord).present()}
	}
	var lease types.AttributeValue
	if l := (item{attrLeaseHeartbeat: tm(tr.Lease.LastHeartbeatAt), attrLeaseExpiry: tm(tr.Lease.ExpiresAt)}).present(); len(l) > 0 {
		lease = &types.AttributeValueMemberM{Value: l}
	}
	return item{
		attrSeq:           num(tr.Seq),
		attrFrom:          optStr(string(tr.From)),
		attrTo:            str(string(tr.To)),
		attrEvent:         str(string(tr.Event)),
		attrEventID:       str(tr.EventID),
		attrActor:         str(string(tr.Actor)),
		attrAttempt:       num(int64(tr.Attempt)),
		attrEventTime:     tm(tr.EventTime),
		attrObservedAt:    tm(tr.ObservedAt),
		attrEvidence:      strMap(tr.Evidence),
		attrReason:        optStr(tr.Reason),
		attrOperator:      optStr(tr.Operator),
		attrScope:         optStr(tr.Scope),
		attrAttemptRecord: rec,
		attrLease:         lease,
		attrRetryAt:       tm(tr.RetryAt),
		attrDeadline:      tm(tr.Deadline),
		attrCancelReq:     optBool(tr.CancelRequested),
		attrPausedFrom:    optStr(string(tr.PausedFrom)),
		attrSpent:         num(int64(tr.Spent)),
		attrResubmits:     num(int64(tr.Resubmits)),
		attrFreeNext:      optBool(tr.FreeNext),
	}
}

func readTransition(r *reader) statemodel.Transition {
	tr := statemodel.Transition{
		Seq:             r.int(attrSeq),
		From:            statemodel.InstanceState(r.str(attrFrom)),
		To:              statemodel.InstanceState(r.str(attrTo)),
		Event:           statemodel.EventType(r.str(attrEvent)),
		EventID:         r.str(attrEventID),
		Actor:           statemodel.Actor(r.str(attrActor)),
		Attempt:         int(r.int(attrAttempt)),
		EventTime:       r.time(attrEventTime),
		ObservedAt:      r.time(attrObservedAt),
		Evidence:        r.strMap(attrEvidence),
		Reason:          r.str(attrReason),
		Operator:        r.str(attrOperator),
		Scope:           r.str(attrScope),
		RetryAt:         r.time(attrRetryAt),
		Deadline:        r.time(attrDeadline),
		CancelRequested: r.bool(attrCancelReq),
		PausedFrom:      statemodel.InstanceState(r.str(attrPausedFrom)),
		Spent:           int(r.int(attrSpent)),
		Resubmits:       int(r.int(attrResubmits)),
		FreeNext:        r.bool(attrFreeNext),
	}
	if m := r.sub(attrAttemptRecord); m != nil {
		sub := &reader{it: m}
		a := readAttemptRecord(sub)
		tr.AttemptRecord = &a
		if sub.err != nil && r.err == nil {
			r.err = sub.err
		}
	}
	if m := r.sub(attrLease); m != nil {
		sub := &reader{it: m}
		tr.Lease = statemodel.Lease{LastHeartbeatAt: sub.time(attrLeaseHeartbeat), ExpiresAt: sub.time(attrLeaseExpiry)}
		if sub.err != nil && r.err == nil {
			r.err = sub.err
		}
	}
	return tr
}

// policyItem is the former, long-named encoding of a statemodel.Policy
// (without Random, a function: the caller supplies jitter at decision
// time; durations are nanoseconds). Instances written before compactPolicy
// hold it and keep it; the store writes it no more (tests do, to build
// such items).
// policyNames are the attribute names of a policy's fields in one of its
// two encodings: the long names the instance item stored first (read
// only now) and the compact ones (record.go).
type policyNames struct {
	maxAttempts, initial, coef, maxInterval, jitter, intervals string
	queue, run, heartbeat, cancel, evidence, resubmits, deps   string
}

// longPolicy are the names the instance item stored its policy under first.
func longPolicy() policyNames {
	return policyNames{
		maxAttempts: "max_attempts", initial: "initial_interval", coef: "backoff_coefficient", maxInterval: "max_interval", jitter: "jitter",
		intervals: "intervals",
		queue:     "queue_timeout", run: "run_timeout", heartbeat: "heartbeat_timeout", cancel: "cancel_timeout",
		evidence: "evidence_window", resubmits: "max_resubmits", deps: "deps_recheck",
	}
}

// policyItem encodes p under names: every field, or (sparse) only the
// fields that are not zero.
func policyItem(p statemodel.Policy, n policyNames, sparse bool) types.AttributeValue {
	i := func(v int64) types.AttributeValue {
		if sparse {
			return optNum(v)
		}
		return num(v)
	}
	d := func(v time.Duration) types.AttributeValue { return i(int64(v)) }
	var coef types.AttributeValue
	if !sparse || p.Retry.BackoffCoefficient != 0 {
		coef = &types.AttributeValueMemberN{Value: strconv.FormatFloat(p.Retry.BackoffCoefficient, 'g', -1, 64)}
	}
	return &types.AttributeValueMemberM{Value: item{
		n.maxAttempts: i(int64(p.Retry.MaxAttempts)),
		n.initial:     d(p.Retry.InitialInterval),
		n.coef:        coef,
		n.maxInterval: d(p.Retry.MaxInterval),
		n.jitter:      optStr(string(p.Retry.Jitter)),
		n.intervals:   durationList(p.Retry.Intervals),
		n.queue:       d(p.Timeouts.Queue),
		n.run:         d(p.Timeouts.Run),
		n.heartbeat:   d(p.Timeouts.Heartbeat),
		n.cancel:      d(p.Timeouts.Cancel),
		n.evidence:    d(p.EvidenceWindow),
		n.resubmits:   i(int64(p.MaxResubmits)),
		n.deps:        d(p.DepsRecheck),
	}.present()}
}

// durationList stores durations in order as a list of nanoseconds; none
// is absent.
func durationList(ds []time.Duration) types.AttributeValue {
	if len(ds) == 0 {
		return nil
	}
	l := make([]types.AttributeValue, len(ds))
	for i, d := range ds {
		l[i] = num(int64(d))
	}
	return &types.AttributeValueMemberL{Value: l}
}

// readPolicy decodes the policy r holds at attr under names (absent: the
// zero policy).
func readPolicy(r *reader, attr string, n policyNames) statemodel.Policy {
	m := r.sub(attr)
	if m == nil {
		return statemodel.Policy{}
	}
	sub := &reader{it: m}
	d := func(name string) time.Duration { return time.Duration(sub.int(name)) }
	var coef float64
	if v, ok := m[n.coef].(*types.AttributeValueMemberN); ok {
		f, err := strconv.ParseFloat(v.Value, 64)
		if err != nil {
			sub.fail(n.coef, "a number")
		}
		coef = f
	}
	p := statemodel.Policy{
		Retry: statemodel.RetryPolicy{
			MaxAttempts:        int(sub.int(n.maxAttempts)),
			InitialInterval:    d(n.initial),
			BackoffCoefficient: coef,
			MaxInterval:        d(n.maxInterval),
			Jitter:             statemodel.Jitter(sub.str(n.jitter)),
			Intervals:          sub.durations(n.intervals),
		},
		Timeouts: statemodel.Timeouts{
			Queue: d(n.queue), Run: d(n.run), Heartbeat: d(n.heartbeat), Cancel: d(n.cancel),
		},
		EvidenceWindow: d(n.evidence),
		MaxResubmits:   int(sub.int(n.resubmits)),
		DepsRecheck:    d(n.deps),
	}
	if sub.err != nil && r.err == nil {
		r.err = sub.err
	}
	return p
}
