package main

import (
	"context"
	"encoding/json"
	"math"
	"regexp"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/tableschema"
)

// heatTrace attributes every DynamoDB call of the stack to the partition
// key values it lands on, in the table and in each index, with the units
// it costs there by DynamoDB's rules and the store's size accounting
// (store.ItemSize):
//
//   - a write costs store.WriteUnits of the item (twice in a transaction;
//     a ConditionCheck costs what a write of its item does) on the item's
//     partition, and on each index whose entry it puts, changes or removes,
//     1 WCU per started KB of the entry (the projected attributes), on the
//     entry's partition: a removal on the old entry's, a moved key on both;
//   - a read costs 1 RCU per started 4 KB (half when eventually
//     consistent), a Query's and GetItem's as the endpoint reports it.
//
// An index entry is known from the item after the write (UpdateItem is
// asked for ALL_NEW) and the trace's shadow of the item before it, which
// holds every item the trace saw written. An update inside a transaction
// (a slot mark) is counted at its shadow's size, or 1 KB.
type heatTrace struct {
	mu      sync.Mutex
	indexes []tableschema.Index
	shadow  map[string]shadowItem
	loads   []partitionLoad
	// txItems lists every item a TransactWriteItems named (a put, update,
	// delete or condition check), once per transaction: DynamoDB lets an
	// item be in one transaction at a time, so an item many runs name is a
	// bound of its own (heatmodel.go, conflictBound).
	txItems []txItem
}

// txItem is one item named in one transaction.
type txItem struct{ PK, SK string }

type shadowItem struct {
	size    int
	entries map[string]indexEntry // by index name
}

type indexEntry struct {
	pk, sk string
	size   int
	sig    string // the projected attributes, to tell an unchanged entry
}

func newHeatTrace() *heatTrace {
	return &heatTrace{indexes: tableschema.Table().Indexes, shadow: map[string]shadowItem{}}
}

// take returns the loads and transaction items gathered since the last
// take and forgets them.
func (h *heatTrace) take() ([]partitionLoad, []txItem) {
	h.mu.Lock()
	defer h.mu.Unlock()
	loads, tx := h.loads, h.txItems
	h.loads, h.txItems = nil, nil
	return loads, tx
}

// dynamoOption is a DynamoDB client option that traces every call.
func (h *heatTrace) dynamoOption(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("rlbenchHeat",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if u, ok := in.Parameters.(*dynamodb.UpdateItemInput); ok && (u.ReturnValues == "" || u.ReturnValues == types.ReturnValueNone) {
					u.ReturnValues = types.ReturnValueAllNew // the store reads no Attributes it did not ask for
				}
				out, md, err := next.HandleInitialize(ctx, in)
				if err == nil {
					h.mu.Lock()
					h.record(in.Parameters, out.Result)
					h.mu.Unlock()
				}
				return out, md, err
			}), middleware.After)
	})
}

func (h *heatTrace) record(params, result any) {
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		h.write(in.Item, in.Item, 1)
	case *dynamodb.UpdateItemInput:
		out := result.(*dynamodb.UpdateItemOutput)
		h.write(in.Key, out.Attributes, 1)
	case *dynamodb.DeleteItemInput:
		h.write(in.Key, nil, 1)
	case *dynamodb.BatchWriteItemInput:
		for _, reqs := range in.RequestItems {
			for _, r := range reqs {
				if r.PutRequest != nil {
					h.write(r.PutRequest.Item, r.PutRequest.Item, 1)
				} else if r.DeleteRequest != nil {
					h.write(r.DeleteRequest.Key, nil, 1)
				}
			}
		}
	case *dynamodb.TransactWriteItemsInput:
		for _, a := range in.TransactItems {
			h.txItems = append(h.txItems, txItemOf(a))
			switch {
			case a.Put != nil:
				h.write(a.Put.Item, a.Put.Item, 2)
			case a.Delete != nil:
				h.write(a.Delete.Key, nil, 2)
			case a.Update != nil, a.ConditionCheck != nil:
				var key map[string]types.AttributeValue
				if a.Update != nil {
					key = a.Update.Key
				} else {
					key = a.ConditionCheck.Key
				}
				size := h.shadow[itemID(key)].size
				h.add("table", pkOf(key), 2*store.WriteUnits(size), 0)
			}
		}
	case *dynamodb.GetItemInput:
		out := result.(*dynamodb.GetItemOutput)
		h.add("table", pkOf(in.Key), 0, readUnits(out.ConsumedCapacity, store.ItemSize(out.Item), in.ConsistentRead))
	case *dynamodb.BatchGetItemInput:
		out := result.(*dynamodb.BatchGetItemOutput)
		for table, ka := range in.RequestItems {
			got := map[string]int{}
			for _, it := range out.Responses[table] {
				got[itemID(it)] = store.ItemSize(it)
			}
			for _, k := range ka.Keys {
				h.add("table", pkOf(k), 0, readUnits(nil, got[itemID(k)], ka.ConsistentRead))
			}
		}
	case *dynamodb.QueryInput:
		out := result.(*dynamodb.QueryOutput)
		index, pkAttr := "table", tableschema.PK
		if in.IndexName != nil {
			index = *in.IndexName
			for _, ix := range h.indexes {
				if ix.Name == index {
					pkAttr = ix.PartitionKey.Name
				}
			}
		}
		size := 0
		for _, it := range out.Items {
			size += store.ItemSize(it)
		}
		h.add(index, queryKey(in, pkAttr), 0, readUnits(out.ConsumedCapacity, size, in.ConsistentRead))
	}
}

// write counts a write of the item at key whose image after it is next
// (nil: deleted), per = 2 in a transaction.
func (h *heatTrace) write(key, next map[string]types.AttributeValue, per float64) {
	id := itemID(key)
	old := h.shadow[id]
	size := store.ItemSize(next)
	if next == nil {
		size = old.size
	}
	h.add("table", pkOf(key), per*store.WriteUnits(size), 0)
	entries := map[string]indexEntry{}
	if next != nil {
		for _, ix := range h.indexes {
			if e, ok := indexEntryOf(ix, next); ok {
				entries[ix.Name] = e
			}
		}
	}
	for _, ix := range h.indexes {
		o, hadOld := old.entries[ix.Name]
		n, hasNew := entries[ix.Name]
		switch {
		case hadOld && hasNew && o.pk == n.pk && o.sk == n.sk:
			if o.sig != n.sig {
				h.add(ix.Name, n.pk, store.WriteUnits(n.size), 0)
			}
		default:
			if hadOld {
				h.add(ix.Name, o.pk, store.WriteUnits(o.size), 0)
			}
			if hasNew {
				h.add(ix.Name, n.pk, store.WriteUnits(n.size), 0)
			}
		}
	}
	if next == nil {
		delete(h.shadow, id)
		return
	}
	h.shadow[id] = shadowItem{size: size, entries: entries}
}

// txItemOf is the item a transaction's action names.
func txItemOf(a types.TransactWriteItem) txItem {
	var key map[string]types.AttributeValue
	switch {
	case a.Put != nil:
		key = a.Put.Item
	case a.Delete != nil:
		key = a.Delete.Key
	case a.Update != nil:
		key = a.Update.Key
	case a.ConditionCheck != nil:
		key = a.ConditionCheck.Key
	}
	return txItem{PK: stringOf(key[tableschema.PK]), SK: stringOf(key[tableschema.SK])}
}

// indexEntryOf is the item's entry in ix: its keys and projected
// attributes.
func indexEntryOf(ix tableschema.Index, it map[string]types.AttributeValue) (indexEntry, bool) {
	pk, ok1 := it[ix.PartitionKey.Name]
	sk, ok2 := it[ix.SortKey.Name]
	if !ok1 || !ok2 {
		return indexEntry{}, false
	}
	proj := it
	if ix.Projection != tableschema.ProjectAll {
		proj = map[string]types.AttributeValue{}
		for _, a := range append([]string{tableschema.PK, tableschema.SK, ix.PartitionKey.Name, ix.SortKey.Name}, ix.NonKeyAttributes...) {
			if v, ok := it[a]; ok {
				proj[a] = v
			}
		}
	}
	sig, _ := json.Marshal(plainMap(proj))
	return indexEntry{pk: stringOf(pk), sk: stringOf(sk), size: store.ItemSize(proj), sig: string(sig)}, true
}

func (h *heatTrace) add(index, key string, wcu, rcu float64) {
	h.loads = append(h.loads, partitionLoad{Index: index, Key: key, WCU: wcu, RCU: rcu})
}

// readUnits is the endpoint's figure when it sent one, else 1 per started
// 4 KB (at least 1), half when eventually consistent.
func readUnits(cc *types.ConsumedCapacity, size int, consistent *bool) float64 {
	if cc != nil && cc.CapacityUnits != nil {
		return *cc.CapacityUnits
	}
	u := max(1, math.Ceil(float64(size)/4096))
	if consistent == nil || !*consistent {
		u /= 2
	}
	return u
}

var keyEquals = regexp.MustCompile(`(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)`)

// queryKey is the partition key value a Query's key condition names.
func queryKey(in *dynamodb.QueryInput, pkAttr string) string {
	if in.KeyConditionExpression == nil {
		return "?"
	}
	for _, m := range keyEquals.FindAllStringSubmatch(*in.KeyConditionExpression, -1) {
		name := m[1]
		if n, ok := in.ExpressionAttributeNames[name]; ok {
			name = n
		}
		if name == pkAttr {
			return stringOf(in.ExpressionAttributeValues[m[2]])
		}
	}
	return "?"
}

func pkOf(key map[string]types.AttributeValue) string { return stringOf(key[tableschema.PK]) }

func itemID(key map[string]types.AttributeValue) string {
	return stringOf(key[tableschema.PK]) + "\x00" + stringOf(key[tableschema.SK])
}

func stringOf(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return "?"
}

// plainMap turns an item into plain values that encoding/json writes
// deterministically (map keys sorted), to compare two images.
func plainMap(m map[string]types.AttributeValue) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = plain(v)
	}
	return out
}

func plain(v types.AttributeValue) any {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return "S" + v.Value
	case *types.AttributeValueMemberN:
		return "N" + v.Value
	case *types.AttributeValueMemberB:
		return v.Value
	case *types.AttributeValueMemberBOOL:
		return v.Value
	case *types.AttributeValueMemberNULL:
		return nil
	case *types.AttributeValueMemberM:
		return plainMap(v.Value)
	case *types.AttributeValueMemberL:
		l := make([]any, len(v.Value))
		for i, e := range v.Value {
			l[i] = plain(e)
		}
		return l
	case *types.AttributeValueMemberSS:
		return v.Value
	case *types.AttributeValueMemberNS:
		return v.Value
	case *types.AttributeValueMemberBS:
		return v.Value
	}
	return nil
}
