package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel/limiter"
)

// A limiter's items share one partition key (docs/store.md, "Limiters"):
//
//	LIMITER#<name>/STATE             limit, active, waiting, admits, version (a group's shard: shards, group_limit)
//	LIMITER#<name>/WAIT#<place>      one per waiting run, in admission order
//	LIMITER#<name>/ADMIT#<run>       one per active run
const (
	limiterPrefix   = "LIMITER#"
	skLimiterState  = "STATE"
	prefixLimWait   = "WAIT#"
	prefixLimAdmit  = "ADMIT#"
	attrLimit       = "limit"
	attrWaiting     = "waiting"
	attrAdmits      = "admits"
	attrPriority    = "priority"
	attrAdmittedAt  = "admitted_at"
	attrAdmittedIn  = "admitted_in"
	attrWaitingIn   = "waiting_in"
	attrMarkRun     = "mark_run"
	attrShards      = "shards"
	attrGroupLimit  = "group_limit"
	kindLimiter     = "LIMITER"
	kindLimWaiting  = "LIMITER_WAIT"
	kindLimAdmitted = "LIMITER_ADMIT"
)

func limiterPK(name string) string { return limiterPrefix + name }

// GetLimiter implements ledger.Limiters with one consistent GetItem.
func (s *limiters) GetLimiter(ctx context.Context, name string) (limiter.State, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: keyOf(limiterPK(name), skLimiterState), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return limiter.State{}, fmt.Errorf("get limiter %s: %w", name, translate(err))
	}
	if out.Item == nil {
		return limiter.State{}, nil
	}
	st, err := decodeLimiter(out.Item)
	if err != nil {
		return st, fmt.Errorf("get limiter %s: %w", name, err)
	}
	return st, nil
}

// GetLimiters implements ledger.Limiters with one consistent BatchGetItem
// (more past 100 names), answered in the order of names.
func (s *limiters) GetLimiters(ctx context.Context, names []string) ([]limiter.State, error) {
	keys := make([]map[string]types.AttributeValue, len(names))
	at := make(map[string]int, len(names))
	for i, name := range names {
		if err := ledger.CheckLimiterName(name); err != nil {
			return nil, fmt.Errorf("get limiters: %w", err)
		}
		keys[i], at[limiterPK(name)] = keyOf(limiterPK(name), skLimiterState), i
	}
	out := make([]limiter.State, len(names))
	var derr error
	err := s.batchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		pk := (&reader{it: it}).str(tableschema.PK)
		st, err := decodeLimiter(it)
		if err != nil && derr == nil {
			derr = fmt.Errorf("get limiter %s: %w", strings.TrimPrefix(pk, limiterPrefix), err)
		}
		if i, ok := at[pk]; ok {
			out[i] = st
		}
	})
	if err != nil {
		return nil, fmt.Errorf("get limiters: %w", translate(err))
	}
	if derr != nil {
		return nil, derr
	}
	return out, nil
}

// decodeLimiter reads a limiter item.
func decodeLimiter(it map[string]types.AttributeValue) (limiter.State, error) {
	r := &reader{it: it}
	st := limiter.State{Limit: int(r.int(attrLimit)), Active: int(r.int(attrActive)), Waiting: int(r.int(attrWaiting)), Version: r.int(attrVersion)}
	if n := r.optInt(attrShards); n != nil { // absent: a limiter that is one item, as all were before groups
		st.Shards = *n
	}
	if n := r.optInt(attrGroupLimit); n != nil { // absent: one item, or a shard stored before shards kept it
		st.Group = *n
	}
	for _, t := range r.strList(attrAdmits) {
		at, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return st, fmt.Errorf("%w: admits: %v", ledger.ErrCorruptItem, err)
		}
		st.Admits = append(st.Admits, at)
	}
	return st, r.err
}

// ListWaiting implements ledger.Limiters: a consistent Query of the
// waiting items, whose sort keys are in admission order.
func (s *limiters) ListWaiting(ctx context.Context, name string, limit int) ([]ledger.Waiting, error) {
	var out []ledger.Waiting
	if limit <= 0 {
		return nil, nil
	}
	err := s.queryLimiter(ctx, name, prefixLimWait, limit, func(r *reader) {
		p, err := limiter.ParseSortKey(r.str(tableschema.SK)[len(prefixLimWait):])
		if err != nil && r.err == nil {
			r.err = fmt.Errorf("%w: %v", ledger.ErrCorruptItem, err)
		}
		out = append(out, ledger.Waiting{Place: p, Paused: r.bool(attrPaused), MarkRun: r.bool(attrMarkRun)})
	})
	if err != nil {
		return nil, fmt.Errorf("list waiting of limiter %s: %w", name, err)
	}
	return out, nil
}

// ListAdmitted implements ledger.Limiters.
func (s *limiters) ListAdmitted(ctx context.Context, name string) ([]ledger.Admitted, error) {
	var out []ledger.Admitted
	err := s.queryLimiter(ctx, name, prefixLimAdmit, 0, func(r *reader) {
		out = append(out, ledger.Admitted{RunID: r.str(attrRun), AdmittedAt: r.time(attrAdmittedAt)})
	})
	if err != nil {
		return nil, fmt.Errorf("list admitted of limiter %s: %w", name, err)
	}
	return out, nil
}

// queryLimiter pages through the limiter's items under prefix, at most
// limit of them (0: all).
func (s *limiters) queryLimiter(ctx context.Context, name, prefix string, limit int, each func(*reader)) error {
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String(e.prefixKey(limiterPK(name), prefix)),
	}
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.nameMap(), e.valueMap()
	n := 0
	for {
		if limit > 0 {
			in.Limit = aws.Int32(int32(min(limit-n, 1000)))
		}
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return translate(err)
		}
		for _, it := range out.Items {
			r := &reader{it: it}
			each(r)
			if r.err != nil {
				return r.err
			}
			n++
		}
		if out.LastEvaluatedKey == nil || (limit > 0 && n >= limit) {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// FindRun implements ledger.Limiters with two consistent key reads.
func (s *limiters) FindRun(ctx context.Context, name string, p limiter.Place) (*ledger.Admitted, *ledger.Waiting, error) {
	get := func(sk string) (*reader, error) {
		out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(s.table), Key: keyOf(limiterPK(name), sk), ConsistentRead: aws.Bool(true),
		})
		if err != nil || out.Item == nil {
			return nil, translate(err)
		}
		return &reader{it: out.Item}, nil
	}
	var a *ledger.Admitted
	var w *ledger.Waiting
	r, err := get(prefixLimAdmit + p.RunID)
	if err != nil {
		return nil, nil, fmt.Errorf("find run %s in limiter %s: %w", p.RunID, name, err)
	}
	if r != nil {
		a = &ledger.Admitted{RunID: p.RunID, AdmittedAt: r.time(attrAdmittedAt)}
	}
	if r, err = get(prefixLimWait + p.SortKey()); err != nil {
		return nil, nil, fmt.Errorf("find run %s in limiter %s: %w", p.RunID, name, err)
	}
	if r != nil {
		w = &ledger.Waiting{Place: p, Paused: r.bool(attrPaused), MarkRun: r.bool(attrMarkRun)}
	}
	return a, w, nil
}

// WriteLimiter implements ledger.Limiters in ONE TransactWriteItems:
//
//	limiter   Put     LIMITER#<name>/STATE       version = :expected
//	                                             (attribute_not_exists(pk) for 0)
//	waiting   Put     .../WAIT#<place>           attribute_not_exists(pk)
//	                                             (attribute_exists for a replace)
//	          Delete  .../WAIT#<place>           attribute_exists(pk)
//	admitted  Put     .../ADMIT#<run>            attribute_not_exists(pk)
//	          Delete  .../ADMIT#<run>            attribute_exists(pk)
//
// Any condition failing is ErrVersionConflict: the limiter moved since
// the caller's read, which reads again.
func (s *limiters) WriteLimiter(ctx context.Context, w ledger.LimiterWrite) error {
	op := func(err error) error { return fmt.Errorf("write limiter %s: %w", w.Name, err) }
	if err := ledger.CheckLimiterName(w.Name); err != nil {
		return op(err)
	}
	pk := limiterPK(w.Name)
	names := map[string]string{"#pk": tableschema.PK}
	notExists, exists := aws.String("attribute_not_exists(#pk)"), aws.String("attribute_exists(#pk)")
	state := limiterItem(pk, w.State)
	actions := []types.TransactWriteItem{{Put: s.limiterPut(state, w.Expected)}}
	sizes := []int{itemSize(state)}
	add := func(a types.TransactWriteItem, size int) {
		actions = append(actions, a)
		sizes = append(sizes, size)
	}
	// The items of each run the write changes (w's own, then Also's),
	// and the live checks, by action.
	live := map[int]string{}
	var index []int // the index entries the write changes, by size
	for _, c := range append([]ledger.LimiterWrite{w}, w.Also...) {
		if p := c.DeleteWaiting; p != nil {
			add(types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(s.table), Key: keyOf(pk, prefixLimWait+p.SortKey()),
				ConditionExpression: exists, ExpressionAttributeNames: names}}, 0)
		}
		if p := c.PutWaiting; p != nil {
			it := item{
				tableschema.PK: str(pk), tableschema.SK: str(prefixLimWait + p.SortKey()), attrKind: str(kindLimWaiting),
				attrRun: str(p.RunID), attrPriority: num(int64(p.Priority)), attrCreatedAt: tm(p.CreatedAt), attrPaused: optBool(p.Paused),
				attrMarkRun: optBool(p.MarkRun),
			}.present()
			cond := notExists
			if c.Replace {
				cond = exists
			}
			add(types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.table), Item: it, ConditionExpression: cond, ExpressionAttributeNames: names}}, itemSize(it))
		}
		if id := c.DeleteAdmitted; id != "" {
			add(types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(s.table), Key: keyOf(pk, prefixLimAdmit+id),
				ConditionExpression: exists, ExpressionAttributeNames: names}}, 0)
		}
		if a := c.PutAdmitted; a != nil {
			it := item{
				tableschema.PK: str(pk), tableschema.SK: str(prefixLimAdmit + a.RunID), attrKind: str(kindLimAdmitted),
				attrRun: str(a.RunID), attrAdmittedAt: tm(a.AdmittedAt),
			}.present()
			add(types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.table), Item: it, ConditionExpression: notExists, ExpressionAttributeNames: names}}, itemSize(it))
		}
		if p := c.AbsentWaiting; p != nil {
			add(types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String(s.table), Key: keyOf(pk, prefixLimWait+p.SortKey()),
				ConditionExpression: notExists, ExpressionAttributeNames: names}}, 0)
		}
		if id := c.AbsentAdmitted; id != "" {
			add(types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String(s.table), Key: keyOf(pk, prefixLimAdmit+id),
				ConditionExpression: notExists, ExpressionAttributeNames: names}}, 0)
		}
		if c.Mark != nil && c.LiveRun != "" && c.Mark.RunID != c.LiveRun {
			return op(fmt.Errorf("%w: a write marks run %s and checks run %s", ledger.ErrInvalidInput, c.Mark.RunID, c.LiveRun))
		}
		switch {
		case c.Mark != nil:
			if c.LiveRun != "" {
				live[len(actions)] = c.LiveRun
			}
			add(runMark(s.table, w.Name, *c.Mark, c.LiveRun != ""), runMarkSize)
			// The run is unfinished (it enters or waits): its entry in
			// the live index, which copies the whole item, changes too.
			index = append(index, runMarkSize)
		case c.LiveRun != "":
			live[len(actions)] = c.LiveRun
			add(liveRunCheck(s.table, c.LiveRun), runMarkSize)
		}
	}
	err := s.transact(ctx, "write_limiter", actions, sizes, index)
	if err != nil {
		if reasons := cancellation(err); reasons != nil {
			for i, id := range live {
				if conditionFailed(reasons, i) {
					return op(fmt.Errorf("run %s: %w", id, ledger.ErrConflict))
				}
			}
			for i := range actions {
				if conditionFailed(reasons, i) {
					return op(ledger.ErrVersionConflict)
				}
			}
		}
		return op(translate(err))
	}
	return nil
}

// limiterPut is a transaction's put of a limiter item on condition that
// its version is expected (0: that there is none).
func (s *limiters) limiterPut(state map[string]types.AttributeValue, expected int64) *types.Put {
	if expected == 0 {
		return &types.Put{TableName: aws.String(s.table), Item: state,
			ExpressionAttributeNames: map[string]string{"#pk": tableschema.PK}, ConditionExpression: aws.String("attribute_not_exists(#pk)")}
	}
	return &types.Put{TableName: aws.String(s.table), Item: state, ConditionExpression: aws.String("#v = :v"),
		ExpressionAttributeNames:  map[string]string{"#v": attrVersion},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": num(expected)}}
}

// WriteShares implements ledger.Limiters in ONE TransactWriteItems of
// limiter items (a borrow: two), each a Put conditioned on its version:
//
//	limiter   Put     LIMITER#<shard>/STATE      version = :expected
//	                                             (attribute_not_exists(pk) for 0)
//
// Any condition failing is ErrVersionConflict.
func (s *limiters) WriteShares(ctx context.Context, ws []ledger.ShareWrite) error {
	if err := ledger.CheckShareWrite(ws); err != nil {
		return fmt.Errorf("write shares: %w", err)
	}
	actions := make([]types.TransactWriteItem, len(ws))
	sizes := make([]int, len(ws))
	for i, w := range ws {
		state := limiterItem(limiterPK(w.Name), w.State)
		actions[i], sizes[i] = types.TransactWriteItem{Put: s.limiterPut(state, w.Expected)}, itemSize(state)
	}
	if err := s.transact(ctx, "write_shares", actions, sizes, nil); err != nil {
		if cancellation(err) != nil {
			return fmt.Errorf("write shares of %s: %w", ws[0].Name, ledger.ErrVersionConflict)
		}
		return fmt.Errorf("write shares of %s: %w", ws[0].Name, translate(err))
	}
	return nil
}

// runMarkSize is the size a limiter write's action on a run item is
// counted at: a run item of a job with limits and small params (about
// 500 bytes), under the 1 KB a write unit covers. Its real size is not
// known to the write; a run with params beyond that costs more.
const runMarkSize = 1024

// runMark is a transaction's update of run m.RunID's admission in limiter
// name (ledger.RunMark), on the condition that the run is there and, when
// live, not ended.
func runMark(table, name string, m ledger.RunMark, live bool) types.TransactWriteItem {
	e := newExpr()
	cond := "attribute_exists(" + e.n(tableschema.PK) + ")"
	if live {
		cond += " AND " + unfinishedRun(e)
	}
	upd := item{attrWaitingIn: str(name)}
	if !m.At.IsZero() {
		upd = item{attrAdmittedAt: tm(m.At), attrAdmittedIn: str(name), attrWaitingIn: nil}
	}
	return types.TransactWriteItem{Update: &types.Update{TableName: aws.String(table), Key: keyOf(runPK(m.RunID), skRun),
		UpdateExpression: aws.String(e.update(upd)), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap()}}
}

// liveRunCheck is a transaction's condition that run id is there and not
// ended.
func liveRunCheck(table, id string) types.TransactWriteItem {
	e := newExpr()
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String(table), Key: keyOf(runPK(id), skRun),
		ConditionExpression: aws.String(unfinishedRun(e)), ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap()}}
}

func limiterItem(pk string, st limiter.State) map[string]types.AttributeValue {
	var admits []string
	for _, t := range st.Admits {
		admits = append(admits, t.UTC().Format(time.RFC3339Nano))
	}
	return item{
		tableschema.PK: str(pk), tableschema.SK: str(skLimiterState), attrKind: str(kindLimiter),
		attrLimit: num(int64(st.Limit)), attrActive: num(int64(st.Active)), attrWaiting: num(int64(st.Waiting)),
		attrAdmits: strList(admits), attrVersion: num(st.Version), attrShards: optNum(int64(st.Shards)),
		attrGroupLimit: optNum(int64(st.Group)),
	}.present()
}
