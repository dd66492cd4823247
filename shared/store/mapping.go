package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

// Map items (docs/store.md), in the run's partition:
//
//	RUN#MAP#<task>        the map item (ledger.MapState), read with the
//	                      run (ReadRun's range, RUN .. TASK#\uffff)
//	MAP#<task>#I#nnn      chunk nnn of its rendered elements
//	MAP#<task>#O          the map's output, once it ended
//
// and in child i's partition (mapparts.go: RUN#<run>#M#<task>#nn, nn =
// i % parts; the run's partition for a map written before, whose count
// shards are i % 32):
//
//	RUN#MAP#<task>#S#nn   the end counts of the partition's children
//	MAP#<task>#C#nnnnn    child nnnnn's instance (its attempts: ...#ATT#nnn)
//
// MAP# sorts before RUN, so ReadRun reads none of the children.
const (
	prefixMap    = "MAP#"
	kindMap      = "map"
	kindMapItems = "map_items"
	kindMapShard = "map_shard"
	attrMapItem  = "map_item"
	attrMapSpec  = "map_spec"
	attrItems    = "items"
	attrTotal    = "total"
	attrNext     = "next"
	attrRunning  = "running"
	attrMaxPar   = "max_parallel"
	attrTolerate = "tolerated"
)

func mapSK(task string) string { return "RUN#" + prefixMap + task }

// mapShards spreads a map's end counts over shard items (child i counts
// in shard i % mapShards), so children ending together do not contend
// for one item in their transactions.
const mapShards = 32

func mapShardSK(task string, i int) string { return fmt.Sprintf("%s#S#%02d", mapSK(task), i%mapShards) }
func mapOutputSK(task string) string       { return prefixMap + task + "#O" }
func mapChunkSK(task string, c int) string { return fmt.Sprintf("%s%s#I#%03d", prefixMap, task, c) }
func childSK(task string, i int) string    { return fmt.Sprintf("%s%s#C#%05d", prefixMap, task, i) }
func childPrefix(task string) string       { return prefixMap + task + "#C#" }

func mapItem(m ledger.MapState, parts int) item {
	it := item{
		tableschema.PK: str(runPK(m.Run)), tableschema.SK: str(mapSK(m.Task)),
		attrKind: str(kindMap), attrRun: str(m.Run), attrTask: str(m.Task),
		attrTotal: num(int64(m.Total)), attrNext: num(int64(m.Next)), attrRunning: num(int64(m.Running)),
		attrSucceeded: num(int64(m.Succeeded)), attrFailed: num(int64(m.Failed)), attrCancelledN: num(int64(m.Cancelled)),
		attrMaxPar: num(int64(m.MaxParallel)), attrTolerate: num(int64(m.Tolerated)),
		tableschema.TTL: expiry(m.ExpiresAt),
	}
	if parts > 0 {
		it[attrChildParts] = num(int64(parts))
	}
	return it
}

// addMapItem adds a map item or one of its count shards (which sort
// after it) to maps, by task.
func addMapItem(maps map[string]ledger.MapState, it map[string]types.AttributeValue) error {
	r := &reader{it: it}
	switch r.str(attrKind) {
	case kindMap:
		m, err := decodeMap(it)
		if err != nil {
			return err
		}
		maps[m.Task] = m
	case kindMapShard:
		m, ok := maps[r.str(attrTask)]
		if !ok {
			return nil // a shard written before its map item is read: nothing to add to
		}
		m.Succeeded += int(r.int(attrSucceeded))
		m.Failed += int(r.int(attrFailed))
		m.Cancelled += int(r.int(attrCancelledN))
		maps[m.Task] = m
		return r.err
	}
	return nil
}

// finishMapState derives Running: the released children not ended.
func finishMapState(m ledger.MapState) ledger.MapState {
	// A partitioned map's counts are read after its item: children
	// released and ended in between count as ended and not as released,
	// so the difference may fall below 0. None runs then that the read
	// saw released; a release decided on such a read is conditioned on
	// the `next` it read, which has moved, so it is refused and decided
	// again.
	m.Running = max(m.Next-m.Succeeded-m.Failed-m.Cancelled, 0)
	return m
}

func decodeMap(it map[string]types.AttributeValue) (ledger.MapState, error) {
	r := &reader{it: it}
	m := ledger.MapState{
		Run: r.str(attrRun), Task: r.str(attrTask),
		Total: int(r.int(attrTotal)), Next: int(r.int(attrNext)), Running: int(r.int(attrRunning)),
		Succeeded: int(r.int(attrSucceeded)), Failed: int(r.int(attrFailed)), Cancelled: int(r.int(attrCancelledN)),
		MaxParallel: int(r.int(attrMaxPar)), Tolerated: int(r.int(attrTolerate)),
		ExpiresAt: r.expiry(),
	}
	return m, r.err
}

// CreateMap writes the map item and its element chunks in one
// TransactWriteItems, the map item conditioned on not existing.
func (s *maps) CreateMap(ctx context.Context, m ledger.MapState, items [][]byte) error {
	op := func(err error) error { return fmt.Errorf("create map %s/%s: %w", m.Run, m.Task, err) }
	if err := ledger.CheckMapKey(m.Run, m.Task); err != nil {
		return op(err)
	}
	e := newExpr()
	actions := []types.TransactWriteItem{{Put: &types.Put{
		TableName: aws.String(s.table), Item: mapItem(m, s.layouts.fresh).present(),
		ConditionExpression:      aws.String("attribute_not_exists(" + e.n(tableschema.PK) + ")"),
		ExpressionAttributeNames: e.nameMap(),
	}}}
	for c := 0; c*ledger.MapItemsPerChunk < len(items); c++ {
		chunk := items[c*ledger.MapItemsPerChunk : min(len(items), (c+1)*ledger.MapItemsPerChunk)]
		l := make([]types.AttributeValue, len(chunk))
		for i, b := range chunk {
			l[i] = &types.AttributeValueMemberB{Value: b}
		}
		it := item{
			tableschema.PK: str(runPK(m.Run)), tableschema.SK: str(mapChunkSK(m.Task, c)),
			attrKind: str(kindMapItems), attrItems: &types.AttributeValueMemberL{Value: l},
			tableschema.TTL: expiry(m.ExpiresAt),
		}
		actions = append(actions, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.table), Item: it.present()}})
	}
	err := s.transact(ctx, "create_map", actions, nil, nil)
	if reasons := cancellation(err); conditionFailed(reasons, 0) {
		return op(ledger.ErrConflict)
	} else if err != nil {
		return op(cancelError(err, reasons))
	}
	s.layouts.put(m.Run, m.Task, s.layouts.fresh)
	return nil
}

// GetMap reads a map item and its count shards: one strongly consistent
// Query of the run's partition for a map whose shards are there, one
// BatchGetItem for a map whose parts the process knows (the first read
// of such a map reads its shards after the Query).
func (s *maps) GetMap(ctx context.Context, run, task string) (ledger.MapState, error) {
	if err := ledger.CheckMapKey(run, task); err != nil {
		return ledger.MapState{}, err
	}
	op := func(err error) error { return fmt.Errorf("get map %s/%s: %w", run, task, err) }
	maps := map[string]ledger.MapState{}
	if parts, ok := s.layouts.get(run, task); ok && parts > 0 {
		if err := s.readMapParted(ctx, run, task, parts, true, maps); err != nil {
			return ledger.MapState{}, op(translate(err))
		}
		return foundMap(maps, task, op)
	}
	e := newExpr()
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(s.table),
		KeyConditionExpression: aws.String(e.n(tableschema.PK) + " = " + e.v("pk", str(runPK(run))) + " AND " + e.n(tableschema.SK) +
			" BETWEEN " + e.v("first", str(mapSK(task))) + " AND " + e.v("last", str(mapSK(task)+"#\uffff"))),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return ledger.MapState{}, op(translate(err))
	}
	parts := 0
	for _, it := range out.Items {
		if (&reader{it: it}).str(attrKind) == kindMap {
			parts = childPartsOf(it)
			s.layouts.put(run, task, parts)
		}
		if err := addMapItem(maps, it); err != nil {
			return ledger.MapState{}, op(err)
		}
	}
	if _, ok := maps[task]; ok && parts > 0 {
		if err := s.readMapParted(ctx, run, task, parts, false, maps); err != nil {
			return ledger.MapState{}, op(translate(err))
		}
	}
	return foundMap(maps, task, op)
}

// foundMap answers task's map of maps, ErrNotFound when it is not there.
func foundMap(maps map[string]ledger.MapState, task string, op func(error) error) (ledger.MapState, error) {
	m, ok := maps[task]
	if !ok {
		return ledger.MapState{}, op(ledger.ErrNotFound)
	}
	return finishMapState(m), nil
}

// MapItems reads one chunk of a map's elements (GetItem).
func (s *maps) MapItems(ctx context.Context, run, task string, c int) ([][]byte, error) {
	if err := ledger.CheckMapKey(run, task); err != nil {
		return nil, err
	}
	items, err := getItem(ctx, s.base, runPK(run), mapChunkSK(task, c), func(it map[string]types.AttributeValue) ([][]byte, error) {
		l, ok := it[attrItems].(*types.AttributeValueMemberL)
		if !ok {
			return nil, errors.New("a map chunk without items")
		}
		out := make([][]byte, len(l.Value))
		for i, v := range l.Value {
			if b, ok := v.(*types.AttributeValueMemberB); ok {
				out[i] = b.Value
			}
		}
		return out, nil
	})
	if err != nil {
		return nil, fmt.Errorf("map items %s/%s#%d: %w", run, task, c, err)
	}
	return items, nil
}

// ReleaseChildren is one conditional UpdateItem of the map item.
func (s *maps) ReleaseChildren(ctx context.Context, m ledger.MapState, k int) (ledger.MapState, error) {
	if err := ledger.CheckMapKey(m.Run, m.Task); err != nil {
		return m, err
	}
	if err := ledger.CheckMapRelease(m, k); err != nil {
		return m, err
	}
	e := newExpr()
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(runPK(m.Run), mapSK(m.Task)),
		UpdateExpression:         aws.String("ADD " + e.n(attrNext) + " " + e.v("k", num(int64(k)))),
		ConditionExpression:      aws.String(e.n(attrNext) + " = " + e.v("next", num(int64(m.Next)))),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		// A refused release answers the mark it met, so the caller can
		// try again from it with no read.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		if old, ok := conditionItem(err); ok {
			if len(old) > 0 {
				m.Next = int((&reader{it: old}).int(attrNext))
			}
			return m, ledger.ErrVersionConflict
		}
		return m, fmt.Errorf("release children of %s/%s: %w", m.Run, m.Task, translate(err))
	}
	m.Next += k
	m.Running += k
	return m, nil
}

// CreateChildren writes children's instances, up to 100 in one
// TransactWriteItems, each conditioned on not existing; a batch that
// meets an existing child is written one by one, skipping those.
func (s *maps) CreateChildren(ctx context.Context, insts []ledger.Instance) error {
	put := func(pk string, inst ledger.Instance) types.TransactWriteItem {
		e := newExpr()
		return types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(s.table), Item: instanceItem(pk, inst).present(),
			ConditionExpression:      aws.String("attribute_not_exists(" + e.n(tableschema.PK) + ")"),
			ExpressionAttributeNames: e.nameMap(),
		}}
	}
	for start := 0; start < len(insts); start += 100 {
		batch := insts[start:min(len(insts), start+100)]
		actions := make([]types.TransactWriteItem, len(batch))
		pks := make([]string, len(batch))
		for i, inst := range batch {
			if err := ledger.CheckInstanceKey(inst.Key); err != nil {
				return err
			}
			pk, err := s.instancePK(ctx, inst.Key)
			if err != nil {
				return fmt.Errorf("create child %s: %w", inst.Key, err)
			}
			pks[i], actions[i] = pk, put(pk, inst)
		}
		err := s.transact(ctx, "create_children", actions, nil, nil)
		if err == nil {
			continue
		}
		if reasons := cancellation(err); reasons == nil || transientCancel(reasons) {
			return fmt.Errorf("create children: %w", translate(err))
		}
		for i, inst := range batch {
			if err := s.transact(ctx, "create_children", []types.TransactWriteItem{put(pks[i], inst)}, nil, nil); err != nil {
				if reasons := cancellation(err); conditionFailed(reasons, 0) {
					continue
				}
				return fmt.Errorf("create child %s: %w", inst.Key, translate(err))
			}
		}
	}
	return nil
}

// ListChildren queries a map's children in index order.
func (s *maps) ListChildren(ctx context.Context, run, task string, limit int, token string) ([]ledger.Instance, string, error) {
	op := func(err error) error { return fmt.Errorf("list children of %s/%s: %w", run, task, err) }
	if err := ledger.CheckMapKey(run, task); err != nil {
		return nil, "", op(err)
	}
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	parts, err := s.mapParts(ctx, run, task)
	if err != nil {
		return nil, "", op(err)
	}
	if parts > 0 {
		out, next, err := s.listPartedChildren(ctx, run, task, parts, limit, token)
		if err != nil {
			return nil, "", op(err)
		}
		return out, next, nil
	}
	start, err := decodeToken(token, map[string]string{tableschema.PK: runPK(run), tableschema.SK: ""})
	if err != nil {
		return nil, "", op(err)
	}
	if start != nil {
		if sk, _ := start[tableschema.SK].(*types.AttributeValueMemberS); sk == nil || !strings.HasPrefix(sk.Value, childPrefix(task)) {
			return nil, "", op(ledger.ErrInvalidPageToken)
		}
	}
	var out []ledger.Instance
	for len(out) < limit {
		e := newExpr()
		// Attempt items of children sort among them; a page is read past
		// them.
		res, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: aws.String(s.table), KeyConditionExpression: aws.String(e.prefixKey(runPK(run), childPrefix(task))),
			ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
			ConsistentRead: aws.Bool(true), ExclusiveStartKey: start, Limit: aws.Int32(int32(limit - len(out))),
		})
		if err != nil {
			return nil, "", op(translate(err))
		}
		for _, it := range res.Items {
			if (&reader{it: it}).str(attrKind) != kindInstance {
				continue
			}
			inst, err := decodeInstance(it)
			if err != nil {
				return nil, "", op(err)
			}
			out = append(out, inst)
		}
		start = res.LastEvaluatedKey
		if len(start) == 0 {
			return out, "", nil
		}
	}
	return out, encodeToken(start), nil
}

// writeChildEnd writes a map child's transition (update, conditioned as
// any instance write) and ADDs change to its map's counts, in one
// TransactWriteItems: the counts move exactly when the child's state
// does. A failed condition on the child is a *ledger.ConflictError with
// the child as found, as for any instance write.
func (s *maps) writeChildEnd(ctx context.Context, child ledger.Instance, update *types.Update, change map[string]int) error {
	key := child.Key
	parent, i, _ := ledger.ParseChild(key.Task)
	parts, err := s.mapParts(ctx, key.Run, parent)
	if err != nil {
		return err
	}
	e := newExpr()
	var adds []string
	for _, name := range []string{attrSucceeded, attrFailed, attrCancelledN} {
		if n := change[name]; n != 0 {
			adds = append(adds, e.n(name)+" "+e.v("add_"+name, num(int64(n))))
		}
	}
	if len(adds) == 0 {
		adds = append(adds, e.n(attrSucceeded)+" "+e.v("zero", num(0)))
	}
	set := "SET " + e.n(attrKind) + " = " + e.v("kind", str(kindMapShard)) + ", " + e.n(attrRun) + " = " + e.v("run", str(key.Run)) +
		", " + e.n(attrTask) + " = " + e.v("task", str(parent))
	if !child.ExpiresAt.IsZero() {
		set += ", " + e.n(tableschema.TTL) + " = " + e.v("expires_at", expiry(child.ExpiresAt))
	}
	counts := &types.Update{
		TableName: aws.String(s.table), Key: countShardKey(key.Run, parent, i, parts),
		UpdateExpression:         aws.String(set + " ADD " + strings.Join(adds, ", ")),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
	}
	err = s.transact(ctx, "child_end", []types.TransactWriteItem{{Update: update}, {Update: counts}}, nil, nil)
	if err == nil {
		return nil
	}
	reasons := cancellation(err)
	if conditionFailed(reasons, 0) {
		conflict := &ledger.ConflictError{Key: key}
		if old := reasons[0].Item; len(old) > 0 {
			if found, derr := decodeInstance(old); derr == nil {
				conflict.Current = &found
			}
		}
		return conflict
	}
	return cancelError(err, reasons)
}

// SetMapOutput writes a map's output item (PutItem; the same output
// again changes nothing).
func (s *maps) SetMapOutput(ctx context.Context, run, task string, out []byte, truncated bool) error {
	if err := ledger.CheckMapKey(run, task); err != nil {
		return err
	}
	// The output takes its run's expiry from the map item (once a map).
	expires, err := s.expiryOf(ctx, runPK(run), mapSK(task))
	if err != nil {
		return fmt.Errorf("set map output %s/%s: %w", run, task, err)
	}
	it := item{
		tableschema.PK: str(runPK(run)), tableschema.SK: str(mapOutputSK(task)),
		attrKind: str("map_output"), attrOutput: optStr(string(out)), "output_truncated": optBool(truncated),
		tableschema.TTL: expiry(expires),
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: it.present()}); err != nil {
		return fmt.Errorf("set map output %s/%s: %w", run, task, translate(err))
	}
	return nil
}

// GetMapOutput reads a map's output item: ErrNotFound before it ended.
func (s *maps) GetMapOutput(ctx context.Context, run, task string) ([]byte, bool, error) {
	if err := ledger.CheckMapKey(run, task); err != nil {
		return nil, false, err
	}
	type got struct {
		out       []byte
		truncated bool
	}
	g, err := getItem(ctx, s.base, runPK(run), mapOutputSK(task), func(it map[string]types.AttributeValue) (got, error) {
		r := &reader{it: it}
		return got{optBytes(r.str(attrOutput)), r.bool("output_truncated")}, r.err
	})
	if err != nil {
		return nil, false, fmt.Errorf("get map output %s/%s: %w", run, task, err)
	}
	return g.out, g.truncated, nil
}

// CloseMap is one conditional UpdateItem of the map item.
func (s *maps) CloseMap(ctx context.Context, m ledger.MapState) (ledger.MapState, error) {
	if err := ledger.CheckMapKey(m.Run, m.Task); err != nil {
		return m, err
	}
	pending := m.Total - m.Next
	if pending <= 0 {
		return m, nil
	}
	e := newExpr()
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: keyOf(runPK(m.Run), mapSK(m.Task)),
		UpdateExpression:         aws.String("ADD " + e.n(attrNext) + " " + e.v("p", num(int64(pending))) + ", " + e.n(attrCancelledN) + " " + e.v("p2", num(int64(pending)))),
		ConditionExpression:      aws.String(e.n(attrNext) + " = " + e.v("next", num(int64(m.Next)))),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
	})
	if err != nil {
		if _, ok := conditionItem(err); ok {
			return m, ledger.ErrVersionConflict
		}
		return m, fmt.Errorf("close map %s/%s: %w", m.Run, m.Task, translate(err))
	}
	m.Next += pending
	m.Cancelled += pending
	return m, nil
}

// listPartedChildren reads a page of a partitioned map's children: those
// of indexes from .. from+limit-1 (the token's from, 0 first), each
// partition that holds one of them queried at once, merged in index
// order. Released children are indexes 0 .. next-1 (the map item, read
// first), so the page's token is its end while that is below next. A page
// holds fewer than limit children where some released child was never
// written (a release whose process stopped; the backstop writes it).
func (s *maps) listPartedChildren(ctx context.Context, run, task string, parts, limit int, token string) ([]ledger.Instance, string, error) {
	from := 0
	if token != "" {
		tok, err := decodeToken(token, map[string]string{attrChildFrom: ""})
		if err != nil {
			return nil, "", err
		}
		v, _ := tok[attrChildFrom].(*types.AttributeValueMemberS)
		if from, err = strconv.Atoi(v.Value); err != nil || from < 0 {
			return nil, "", ledger.ErrInvalidPageToken
		}
	}
	m, err := getItem(ctx, s.base, runPK(run), mapSK(task), decodeMap)
	if err != nil {
		return nil, "", err
	}
	end := min(from+limit, m.Next)
	if from >= end {
		return nil, "", nil
	}
	pages := make([][]ledger.Instance, min(parts, end-from))
	errs := make([]error, len(pages))
	var wg sync.WaitGroup
	for k := range pages {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pages[k], errs[k] = s.partChildren(ctx, childPK(run, task, from+k, parts), task, from, end)
		}()
	}
	wg.Wait()
	var out []ledger.Instance
	for k := range pages {
		if errs[k] != nil {
			return nil, "", errs[k]
		}
		out = append(out, pages[k]...)
	}
	slices.SortFunc(out, func(a, b ledger.Instance) int { return cmp.Compare(childIndex(a), childIndex(b)) })
	next := ""
	if end < m.Next {
		next = encodeToken(map[string]types.AttributeValue{attrChildFrom: str(strconv.Itoa(end))})
	}
	return out, next, nil
}

// attrChildFrom names the first index of the next page in a partitioned
// map's children token.
const attrChildFrom = "from"

func childIndex(inst ledger.Instance) int {
	_, i, _ := ledger.ParseChild(inst.Key.Task)
	return i
}

// partChildren reads the children of one partition with indexes from ..
// end-1: one strongly consistent Query, paged past their attempt items.
func (s *maps) partChildren(ctx context.Context, pk, task string, from, end int) ([]ledger.Instance, error) {
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String(e.n(tableschema.PK) + " = " + e.v("pk", str(pk)) + " AND " + e.n(tableschema.SK) +
			" BETWEEN " + e.v("first", str(childSK(task, from))) + " AND " + e.v("last", str(childSK(task, end-1)+"#\uffff"))),
		ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
	}
	var out []ledger.Instance
	for {
		res, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, translate(err)
		}
		for _, it := range res.Items {
			if (&reader{it: it}).str(attrKind) != kindInstance {
				continue
			}
			inst, err := decodeInstance(it)
			if err != nil {
				return nil, err
			}
			out = append(out, inst)
		}
		if len(res.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}
