package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// An instance's history lives in two places, so that a transition is one
// conditional write of the instance item and nothing else:
//
//   - inline: the instance item's record list (compact, record.go) holds
//     the newest records; the write that changes the state appends the
//     record in the same UpdateItem, so a state change and its record are
//     one atomic write;
//   - spilled: when the item with the new records would pass
//     instanceBudget (or hold MaxInlineHistory records), the writer first
//     puts the older inline records, all but the new ones, into one
//     history item RUN#<run>/TR#<task>#<seq of the last record in it>, and
//     only then writes the instance without them.
//
// A crash between the two calls leaves the spilled records in both places;
// readers merge by seq, so nothing is lost or doubled. Items of the former
// layouts (one record per TR#<task>#<seq> item; long-named records) read
// the same way: a single-record item is keyed by its own seq, which is
// also its last.
const (
	// instanceBudget is the size an instance item is kept within, so that
	// each of its writes costs one write unit (1 KB), with room left for
	// a TTL attribute: the older inline records are spilled before a write
	// that would pass it.
	instanceBudget = 1024 - 24
)

// readHistoryList decodes the records of a history list attribute.
func readHistoryList(r *reader, attr string) []statemodel.Transition {
	ms := r.maps(attr)
	if len(ms) == 0 {
		return nil
	}
	out := make([]statemodel.Transition, 0, len(ms))
	for _, m := range ms {
		sub := &reader{it: m}
		out = append(out, readTransition(sub))
		if sub.err != nil && r.err == nil {
			r.err = sub.err
		}
	}
	return out
}

// planHistory appends trs to the inline records and says which of them the
// write must spill first (oldest first) and which stay inline. size is the
// instance item's size with the given records inline. The records of trs stay
// inline whatever they weigh: a state change and its record are one write.
// The older ones are spilled all together once the item would pass
// instanceBudget (or hold MaxInlineHistory records), so a spill is rare and
// the next steps have the budget's room again.
func planHistory(size func(keep []statemodel.Transition) int, inline []statemodel.Transition, trs ...statemodel.Transition) (spill, keep []statemodel.Transition) {
	all := append(slices.Clone(inline), trs...)
	if len(all) <= ledger.MaxInlineHistory && size(all) <= instanceBudget {
		return nil, all
	}
	cut := len(inline)
	if cut == 0 {
		return nil, all
	}
	return all[:cut], all[cut:]
}

// putHistory writes spilled records as one history item. It has no
// condition: its records are committed and never change, so writing them
// again (a retry after a crash, with the same or more records) is harmless.
func (s *instances) putHistory(ctx context.Context, inst ledger.Instance, trs []statemodel.Transition) error {
	key := inst.Key
	last := trs[len(trs)-1].Seq
	pk, err := s.instancePK(ctx, key)
	if err != nil {
		return err
	}
	it := item{
		tableschema.PK:  str(pk),
		tableschema.SK:  str(transitionSK(key.Task, last)),
		attrKind:        str(kindHistory),
		attrRun:         str(key.Run),
		attrTask:        str(key.Task),
		attrSpilledRecs: compactRecords(trs),
		tableschema.TTL: expiry(inst.ExpiresAt),
	}.present()
	size, err := checkSize(fmt.Sprintf("history %s up to #%d", key, last), it)
	if err != nil {
		return err
	}
	out, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.table), Item: it, ReturnConsumedCapacity: s.returnCapacity(),
	})
	if err != nil {
		return fmt.Errorf("spill history of %s: %w", key, translate(err))
	}
	s.report("spill_history", false, []int{size}, nil, consumed(out.ConsumedCapacity))
	return nil
}

// putEvictedAttempts writes the records of attempts the new snapshot no
// longer holds (statemodel.MaxInlineAttempts) to their attempt items,
// keeping any late events there. Like putHistory it precedes the instance
// write and is harmless to repeat.
func (s *instances) putEvictedAttempts(ctx context.Context, inst ledger.Instance, to statemodel.Snapshot) error {
	key, from := inst.Key, inst.Snapshot
	pk, err := s.instancePK(ctx, key)
	if err != nil {
		return err
	}
	for _, a := range from.Attempts {
		if len(to.Attempts) == 0 || a.N >= to.Attempts[0].N {
			continue
		}
		rec := attemptRecordItem(a)
		rec[attrKind] = str(kindAttempt)
		rec[attrRun] = str(key.Run)
		rec[attrTask] = str(key.Task)
		if !inst.ExpiresAt.IsZero() {
			rec[tableschema.TTL] = expiry(inst.ExpiresAt)
		}
		size, err := checkSize(fmt.Sprintf("attempt %s#%d", key, a.N), rec.present())
		if err != nil {
			return err
		}
		e := newExpr()
		out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(s.table), Key: keyOf(pk, attemptSK(key.Task, a.N)),
			UpdateExpression:         aws.String(e.update(rec)),
			ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
			ReturnConsumedCapacity: s.returnCapacity(),
		})
		if err != nil {
			return fmt.Errorf("spill attempt %s#%d: %w", key, a.N, translate(err))
		}
		s.report("spill_attempt", false, []int{size}, nil, consumed(out.ConsumedCapacity))
	}
	return nil
}

// spilled reports whether some of inst's records live outside its item:
// the inline list does not start at seq 1.
func spilled(inst ledger.Instance) bool {
	if len(inst.History) == 0 {
		return inst.Snapshot.Seq > 0
	}
	return inst.History[0].Seq > 1
}

// readSpilled reads the spilled records of an instance with seq >= from,
// in seq order, until it holds at least want of them (0: all). One
// strongly consistent Query, paged:
//
//	pk = RUN#<run> AND sk BETWEEN "TR#<task>#<from>" AND "TR#<task>$"
//
// History items are keyed by their last record's seq, so the first item
// the range returns may start before from.
func (s *instances) readSpilled(ctx context.Context, key ledger.InstanceKey, from int64, want int) ([]statemodel.Transition, error) {
	pk, err := s.instancePK(ctx, key)
	if err != nil {
		return nil, err
	}
	e := newExpr()
	upper := []byte(transitionPrefix(key.Task))
	upper[len(upper)-1]++
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String(e.n(tableschema.PK) + " = " + e.v("pk", str(pk)) +
			" AND " + e.n(tableschema.SK) + " BETWEEN " + e.v("from", str(transitionSK(key.Task, from))) +
			" AND " + e.v("to", str(string(upper)))),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
	}
	var out []statemodel.Transition
	for {
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("read history of %s: %w", key, translate(err))
		}
		for _, it := range page.Items {
			r := &reader{it: it}
			var recs []statemodel.Transition
			switch kind := r.str(attrKind); kind {
			case kindHistory:
				// A history item of the former format holds its
				// records long-named under attrRecords.
				recs = append(readHistoryList(r, attrRecords), readCompactRecords(r, attrSpilledRecs)...)
			case kindTransition:
				recs = []statemodel.Transition{readTransition(r)}
			default:
				return nil, fmt.Errorf("read history of %s: %w: unexpected item kind %q", key, ledger.ErrCorruptItem, kind)
			}
			if r.err != nil {
				return nil, fmt.Errorf("read history of %s: %w", key, r.err)
			}
			for _, tr := range recs {
				if tr.Seq >= from {
					out = append(out, tr)
				}
			}
		}
		if page.LastEvaluatedKey == nil || (want > 0 && len(out) >= want) {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// mergeHistory merges record lists into one in seq order, each seq once.
func mergeHistory(lists ...[]statemodel.Transition) []statemodel.Transition {
	var all []statemodel.Transition
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.SortStableFunc(all, func(a, b statemodel.Transition) int { return int(a.Seq - b.Seq) })
	return slices.CompactFunc(all, func(a, b statemodel.Transition) bool { return a.Seq == b.Seq })
}

// SeenBefore looks an event id up in the whole history of inst: its inline
// records first, then, when some were spilled, the history items. It
// replaces a guard item per event: the history already records every
// applied event's id, and this read is paid only by an event the snapshot's
// recent ids do not know (a rejected or stale one, or any event on an
// instance with more than statemodel.RecentEvents transitions).
func (s *instances) SeenBefore(ctx context.Context, inst ledger.Instance, id string) (statemodel.SeenEvent, bool, error) {
	find := func(trs []statemodel.Transition) (statemodel.SeenEvent, bool) {
		for _, tr := range trs {
			if statemodel.SameEvent(tr.EventID, id) {
				return statemodel.SeenEvent{ID: id, Seq: tr.Seq, To: tr.To}, true
			}
		}
		return statemodel.SeenEvent{}, false
	}
	if seen, ok := inst.Snapshot.Seen(id); ok {
		return seen, true, nil
	}
	if seen, ok := find(inst.History); ok {
		return seen, true, nil
	}
	if !spilled(inst) {
		return statemodel.SeenEvent{}, false, nil
	}
	older, err := s.readSpilled(ctx, inst.Key, 1, 0)
	if err != nil {
		return statemodel.SeenEvent{}, false, err
	}
	seen, ok := find(older)
	return seen, ok, nil
}

// History returns an instance's transition records in seq order, at most
// limit (0: all) per call, and the token of the next page ("" at the end).
// One GetItem of the instance, whose item holds the newest records, and,
// when the page starts before them, one Query of the spilled ones
// (readSpilled).
func (s *instances) History(ctx context.Context, key ledger.InstanceKey, limit int, token string) ([]statemodel.Transition, string, error) {
	op := func(err error) error { return fmt.Errorf("history %s: %w", key, err) }
	if err := ledger.CheckInstanceKey(key); err != nil {
		return nil, "", op(err)
	}
	from, err := decodeHistoryToken(key, token)
	if err != nil {
		return nil, "", op(err)
	}
	inst, err := s.GetInstance(ctx, key)
	if err != nil {
		return nil, "", op(err)
	}
	firstInline := inst.Snapshot.Seq + 1
	if len(inst.History) > 0 {
		firstInline = inst.History[0].Seq
	}
	var older []statemodel.Transition
	if from < firstInline {
		want := 0
		if limit > 0 {
			want = limit + 1
		}
		if older, err = s.readSpilled(ctx, key, from, want); err != nil {
			return nil, "", op(err)
		}
	}
	all := mergeHistory(older, inst.History)
	start := slices.IndexFunc(all, func(tr statemodel.Transition) bool { return tr.Seq >= from })
	if start < 0 {
		return []statemodel.Transition{}, "", nil
	}
	all = all[start:]
	if limit > 0 && len(all) > limit {
		return all[:limit], encodeHistoryToken(key, all[limit].Seq), nil
	}
	return all, "", nil
}

// historyToken is a History page token: the instance and the seq the next
// page starts at, base64url JSON, opaque to callers.
type historyToken struct {
	Run  string `json:"run"`
	Task string `json:"task"`
	Seq  string `json:"seq"`
}

func encodeHistoryToken(key ledger.InstanceKey, seq int64) string {
	b, _ := json.Marshal(historyToken{Run: key.Run, Task: key.Task, Seq: strconv.FormatInt(seq, 10)})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeHistoryToken(key ledger.InstanceKey, tok string) (int64, error) {
	if tok == "" {
		return 1, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, ledger.ErrInvalidPageToken
	}
	var t historyToken
	if err := json.Unmarshal(b, &t); err != nil || t.Run != key.Run || t.Task != key.Task {
		return 0, ledger.ErrInvalidPageToken
	}
	seq, err := strconv.ParseInt(t.Seq, 10, 64)
	if err != nil || seq < 1 {
		return 0, ledger.ErrInvalidPageToken
	}
	return seq, nil
}
