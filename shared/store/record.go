package store

import (
	"fmt"
	"reflect"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/statemodel"
)

// The compact encodings of what an instance item and its history items
// nest: history records, attempt records and the policy. Each lives under
// an attribute of its own (attrRecs, attrInlineAttempts, attrPolicyC), so a
// reader knows an item's format by the attribute it finds; the long-named
// encodings of codec.go stay readable under their former attributes, and
// an instance's next write replaces them. Short names, times as epoch
// nanoseconds (a number of about 11 bytes, exact, so a replay of the
// records still equals the snapshot to the nanosecond), event ids as
// statemodel.EventDigest, and zero fields absent: a record of a task's
// happy path is about 60 to 130 bytes.
const (
	attrRecs           = "h"  // an instance's inline records, compact
	attrSpilledRecs    = "rs" // a history item's records, compact
	attrInlineAttempts = "as" // the snapshot's attempt records, compact
	attrPolicyC        = "pc" // the policy, compact (instances written before attrPolicyD)
	attrPolicyD        = "pd" // the policy's fields that differ from the default, compact
	attrRetryAtC       = "ra" // the snapshot's times, epoch nanoseconds
	attrDeadlineC      = "dl"
	attrCreatedAtC     = "ca"
	attrScheduledAtC   = "sa"

	// record fields
	cSeq        = "q"
	cFrom       = "f" // absent when it is the previous record's To
	cTo         = "t"
	cEvent      = "e"
	cEventID    = "i"
	cActor      = "a"
	cAttempt    = "n"
	cEventTime  = "et" // absent when equal to the observed time, 0 when zero
	cObservedAt = "o"
	cEvidence   = "ev"
	cReason     = "r"
	cOperator   = "op"
	cScope      = "sc"
	cAttemptRec = "ar"
	cLeaseBeat  = "lh"
	cLeaseExp   = "lx"
	cRetryAt    = "ra"
	cDeadline   = "d"
	cCancelReq  = "c"
	cPausedFrom = "p"
	cSpent      = "s"
	cResubmits  = "rb"
	cFreeNext   = "fn"

	// attempt record fields
	cN            = "n"
	cTokenHash    = "th"
	cExecutorID   = "x"
	cExecutor     = "xe"
	cWorkerID     = "w"
	cSpendsBudget = "b"
	cQueuedAt     = "qa"
	cStartedAt    = "sa"
	cEndedAt      = "ea"
	cLastBeat     = "hb"
	cExitCode     = "ec"
	cErrCategory  = "ek"
	cOutcome      = "oc"
	cOutputRef    = "or"
	cClaimEventID = "ci"
	cOutput       = "ou"
	cDelta        = "+" // the fields that changed since the list's previous record of the attempt
)

// nanos is a time as epoch nanoseconds, absent for the zero time.
func nanos(t time.Time) types.AttributeValue {
	if t.IsZero() {
		return nil
	}
	return num(t.UnixNano())
}

// nanos reads a time stored by nanos.
func (r *reader) nanos(name string) time.Time {
	if _, ok := r.it[name]; !ok {
		return time.Time{}
	}
	return time.Unix(0, r.int(name)).UTC()
}

// compactRecords encodes records, oldest first. What a record shares with
// the one before it in the same list is left out, so the first record of
// every list is whole and a list decodes alone: its From where it is the
// previous record's To, and of its attempt record (every record of an
// attempt carries the attempt as it stands) the fields the previous
// record of the same attempt already holds (attemptDelta).
func compactRecords(trs []statemodel.Transition) types.AttributeValue {
	if len(trs) == 0 {
		return nil
	}
	l := make([]types.AttributeValue, len(trs))
	var prev *statemodel.AttemptRecord
	for i, tr := range trs {
		it := compactRecord(tr)
		if i > 0 && trs[i-1].To == tr.From && tr.From != "" {
			it[cFrom] = nil
		}
		if a := tr.AttemptRecord; a != nil {
			if prev != nil && prev.N == a.N {
				it[cAttemptRec] = &types.AttributeValueMemberM{Value: attemptDelta(*prev, *a).present()}
			}
			prev = a
		}
		l[i] = &types.AttributeValueMemberM{Value: it.present()}
	}
	return &types.AttributeValueMemberL{Value: l}
}

// attemptDelta encodes attempt record a as the fields it does not share
// with prev, a record of the same attempt, marked cDelta; whole when a
// field prev holds became zero (a delta cannot say so).
func attemptDelta(prev, a statemodel.AttemptRecord) item {
	was, now := compactAttempt(prev).present(), compactAttempt(a).present()
	out := item{cDelta: boolean(true)}
	for k, v := range was {
		w, ok := now[k]
		if !ok {
			return compactAttempt(a)
		}
		if !reflect.DeepEqual(v, w) {
			out[k] = w
		}
	}
	for k, v := range now {
		if _, ok := was[k]; !ok {
			out[k] = v
		}
	}
	return out
}

func compactRecord(tr statemodel.Transition) item {
	var rec types.AttributeValue
	if tr.AttemptRecord != nil {
		rec = &types.AttributeValueMemberM{Value: compactAttempt(*tr.AttemptRecord).present()}
	}
	var eventTime types.AttributeValue
	switch {
	case tr.EventTime.Equal(tr.ObservedAt):
	case tr.EventTime.IsZero():
		eventTime = num(0)
	default:
		eventTime = num(tr.EventTime.UnixNano())
	}
	var evidence types.AttributeValue
	if len(tr.Evidence) > 0 {
		evidence = strMap(tr.Evidence)
	}
	return item{
		cSeq:        num(tr.Seq),
		cFrom:       optStr(string(tr.From)),
		cTo:         str(string(tr.To)),
		cEvent:      str(string(tr.Event)),
		cEventID:    optStr(statemodel.EventDigest(tr.EventID)),
		cActor:      optStr(string(tr.Actor)),
		cAttempt:    optNum(int64(tr.Attempt)),
		cEventTime:  eventTime,
		cObservedAt: nanos(tr.ObservedAt),
		cEvidence:   evidence,
		cReason:     optStr(tr.Reason),
		cOperator:   optStr(tr.Operator),
		cScope:      optStr(tr.Scope),
		cAttemptRec: rec,
		cLeaseBeat:  nanos(tr.Lease.LastHeartbeatAt),
		cLeaseExp:   nanos(tr.Lease.ExpiresAt),
		cRetryAt:    nanos(tr.RetryAt),
		cDeadline:   nanos(tr.Deadline),
		cCancelReq:  optBool(tr.CancelRequested),
		cPausedFrom: optStr(string(tr.PausedFrom)),
		cSpent:      optNum(int64(tr.Spent)),
		cResubmits:  optNum(int64(tr.Resubmits)),
		cFreeNext:   optBool(tr.FreeNext),
	}
}

// readCompactRecords decodes a list compactRecords wrote.
func readCompactRecords(r *reader, attr string) []statemodel.Transition {
	ms := r.maps(attr)
	if len(ms) == 0 {
		return nil
	}
	out := make([]statemodel.Transition, 0, len(ms))
	var prev *statemodel.AttemptRecord
	for i, m := range ms {
		sub := &reader{it: m}
		tr := readCompactRecord(sub, prev)
		if _, ok := m[cFrom]; !ok && i > 0 {
			tr.From = out[i-1].To
		}
		if tr.AttemptRecord != nil {
			prev = tr.AttemptRecord
		}
		out = append(out, tr)
		if sub.err != nil && r.err == nil {
			r.err = sub.err
		}
	}
	return out
}

// readCompactRecord decodes one record; prev is the attempt record of the
// list's record before it that carried one, which a delta applies to.
func readCompactRecord(r *reader, prev *statemodel.AttemptRecord) statemodel.Transition {
	tr := statemodel.Transition{
		Seq:             r.int(cSeq),
		From:            statemodel.InstanceState(r.str(cFrom)),
		To:              statemodel.InstanceState(r.str(cTo)),
		Event:           statemodel.EventType(r.str(cEvent)),
		EventID:         r.str(cEventID),
		Actor:           statemodel.Actor(r.str(cActor)),
		Attempt:         int(r.int(cAttempt)),
		ObservedAt:      r.nanos(cObservedAt),
		Evidence:        r.strMap(cEvidence),
		Reason:          r.str(cReason),
		Operator:        r.str(cOperator),
		Scope:           r.str(cScope),
		Lease:           statemodel.Lease{LastHeartbeatAt: r.nanos(cLeaseBeat), ExpiresAt: r.nanos(cLeaseExp)},
		RetryAt:         r.nanos(cRetryAt),
		Deadline:        r.nanos(cDeadline),
		CancelRequested: r.bool(cCancelReq),
		PausedFrom:      statemodel.InstanceState(r.str(cPausedFrom)),
		Spent:           int(r.int(cSpent)),
		Resubmits:       int(r.int(cResubmits)),
		FreeNext:        r.bool(cFreeNext),
	}
	tr.EventTime = tr.ObservedAt
	if _, ok := r.it[cEventTime]; ok {
		tr.EventTime = time.Time{}
		if n := r.int(cEventTime); n != 0 {
			tr.EventTime = time.Unix(0, n).UTC()
		}
	}
	if m := r.sub(cAttemptRec); m != nil {
		if (&reader{it: m}).bool(cDelta) {
			if prev == nil {
				r.fail(cAttemptRec, "a whole attempt record (a delta opens the list)")
				return tr
			}
			whole := compactAttempt(*prev).present()
			for k, v := range m {
				whole[k] = v
			}
			m = whole
		}
		sub := &reader{it: m}
		a := readCompactAttempt(sub)
		tr.AttemptRecord = &a
		if sub.err != nil && r.err == nil {
			r.err = sub.err
		}
	}
	return tr
}

// compactAttempts encodes the snapshot's attempt records.
func compactAttempts(as []statemodel.AttemptRecord) types.AttributeValue {
	if len(as) == 0 {
		return nil
	}
	l := make([]types.AttributeValue, len(as))
	for i, a := range as {
		l[i] = &types.AttributeValueMemberM{Value: compactAttempt(a).present()}
	}
	return &types.AttributeValueMemberL{Value: l}
}

func compactAttempt(a statemodel.AttemptRecord) item {
	var exit types.AttributeValue
	if a.ExitCode != nil {
		exit = num(int64(*a.ExitCode))
	}
	return item{
		cN:            num(int64(a.N)),
		cTokenHash:    optStr(a.TokenHash),
		cExecutorID:   optStr(a.ExecutorID),
		cExecutor:     optStr(a.Executor),
		cWorkerID:     optStr(a.WorkerID),
		cSpendsBudget: optBool(a.SpendsBudget),
		cQueuedAt:     nanos(a.QueuedAt),
		cStartedAt:    nanos(a.StartedAt),
		cEndedAt:      nanos(a.EndedAt),
		cLastBeat:     nanos(a.LastHeartbeatAt),
		cExitCode:     exit,
		cErrCategory:  optStr(a.ErrorCategory),
		cOutcome:      optStr(string(a.Outcome)),
		cOutputRef:    optStr(a.OutputRef),
		cClaimEventID: optStr(a.ClaimEventID),
		cOutput:       optStr(string(a.Output)),
	}
}

func readCompactAttempt(r *reader) statemodel.AttemptRecord {
	return statemodel.AttemptRecord{
		N:               int(r.int(cN)),
		TokenHash:       r.str(cTokenHash),
		ExecutorID:      r.str(cExecutorID),
		Executor:        r.str(cExecutor),
		WorkerID:        r.str(cWorkerID),
		SpendsBudget:    r.bool(cSpendsBudget),
		QueuedAt:        r.nanos(cQueuedAt),
		StartedAt:       r.nanos(cStartedAt),
		EndedAt:         r.nanos(cEndedAt),
		LastHeartbeatAt: r.nanos(cLastBeat),
		ExitCode:        r.optInt(cExitCode),
		ErrorCategory:   r.str(cErrCategory),
		Outcome:         statemodel.AttemptOutcome(r.str(cOutcome)),
		OutputRef:       r.str(cOutputRef),
		ClaimEventID:    r.str(cClaimEventID),
		Output:          optBytes(r.str(cOutput)),
	}
}

// compactPolicy stores a statemodel.Policy under two-letter names, zero
// fields absent; durations are nanoseconds (a round duration's trailing
// zeros cost nothing in a DynamoDB number).
// compactPolicyNames are the compact encoding's names of a policy's fields.
func compactPolicyNames() policyNames {
	return policyNames{
		maxAttempts: "ma", initial: "ii", coef: "bc", maxInterval: "mi", jitter: "jt", intervals: "iv",
		queue: "qt", run: "rt", heartbeat: "ht", cancel: "ct", evidence: "ew", resubmits: "mr", deps: "dr",
	}
}

func compactPolicy(p statemodel.Policy) types.AttributeValue {
	return policyItem(p, compactPolicyNames(), true)
}

// policyDelta stores p as the fields of its compact encoding that differ
// from statemodel.DefaultPolicy's (a field p leaves zero where the default
// has a value is NULL), absent when p is the default: most tasks take the
// default, and their instance items carry no policy bytes at all, which
// keeps a single-task run's instance within one write unit without a spill.
func policyDelta(p statemodel.Policy) types.AttributeValue {
	own, def := compactPolicyFields(p), compactPolicyFields(statemodel.DefaultPolicy())
	delta := item{}
	for k, v := range own {
		if !sameScalar(v, def[k]) {
			delta[k] = v
		}
	}
	for k := range def {
		if _, ok := own[k]; !ok {
			delta[k] = &types.AttributeValueMemberNULL{Value: true}
		}
	}
	if len(delta) == 0 {
		return nil
	}
	return &types.AttributeValueMemberM{Value: delta}
}

// readPolicyDelta reads policyDelta's encoding: the default's fields with
// the stored ones over them.
func readPolicyDelta(r *reader) statemodel.Policy {
	fields := compactPolicyFields(statemodel.DefaultPolicy())
	for k, v := range r.sub(attrPolicyD) {
		if _, null := v.(*types.AttributeValueMemberNULL); null {
			delete(fields, k)
			continue
		}
		fields[k] = v
	}
	whole := &reader{it: item{attrPolicyC: &types.AttributeValueMemberM{Value: fields}}}
	p := readPolicy(whole, attrPolicyC, compactPolicyNames())
	if whole.err != nil && r.err == nil {
		r.err = fmt.Errorf("%s: %w", attrPolicyD, whole.err)
	}
	return p
}

func compactPolicyFields(p statemodel.Policy) map[string]types.AttributeValue {
	return compactPolicy(p).(*types.AttributeValueMemberM).Value
}

// sameScalar reports whether a and b are the same number or string.
func sameScalar(a, b types.AttributeValue) bool {
	switch a := a.(type) {
	case *types.AttributeValueMemberN:
		b, ok := b.(*types.AttributeValueMemberN)
		return ok && a.Value == b.Value
	case *types.AttributeValueMemberS:
		b, ok := b.(*types.AttributeValueMemberS)
		return ok && a.Value == b.Value
	}
	return false
}
