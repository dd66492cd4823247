package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

// A map's children and their counts are spread over partitions of their
// own (docs/store.md, "Indexes and their partitions"): under the run's
// one partition key a map took at most 1,000 WCU a second, about 50
// children a second at ~19 WCU a child. Child i lives in partition i % parts,
//
//	RUN#<run>#M#<task>#nn  child i's instance, attempts and history (the
//	                       same sort keys as in the run's partition), and
//	                       the end counts of the partition's children
//
// and the map item records parts (`child_parts`). A map item without it
// was written before: its children and count shards are in the run's
// partition, and stay there.
const (
	// mapChildParts is the partitions of a map created now: at 1,000
	// children a second and ~19 WCU a child, each takes ~300 WCU a second,
	// under half of a partition's 1,000. With the map item, its shards
	// are read in one BatchGetItem (at most 100 keys).
	mapChildParts  = tableschema.MapChildShards
	attrChildParts = "child_parts"
	childPartInfix = "#M#"
)

func childPartPK(run, task string, p int) string {
	return fmt.Sprintf("%s%s%s%s#%02d", prefixRun, run, childPartInfix, task, p)
}

// mapLayouts remembers each map's parts: written once with the map item
// and never changed, so a process reads it once per map. Bounded: cleared
// when full (a cleared map is read again).
type mapLayouts struct {
	fresh int // the parts of a map created now

	mu    sync.Mutex
	parts map[string]int
}

const mapLayoutsMax = 10000

func (c *mapLayouts) get(run, task string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.parts[run+ledger.KeySep+task]
	return p, ok
}

func (c *mapLayouts) put(run, task string, parts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.parts == nil || len(c.parts) >= mapLayoutsMax {
		c.parts = map[string]int{}
	}
	c.parts[run+ledger.KeySep+task] = parts
}

// mapParts answers a map's parts (0: the run's partition), from the
// cache or the map item (GetItem). A map not written yet answers 0
// uncached: it has no children to find.
func (b *base) mapParts(ctx context.Context, run, task string) (int, error) {
	if p, ok := b.layouts.get(run, task); ok {
		return p, nil
	}
	e := newExpr()
	out, err := b.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(b.table), Key: keyOf(runPK(run), mapSK(task)), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String(e.n(attrChildParts)), ExpressionAttributeNames: e.nameMap(),
	})
	if err != nil {
		return 0, fmt.Errorf("read layout of map %s/%s: %w", run, task, translate(err))
	}
	if out.Item == nil {
		return 0, nil
	}
	r := &reader{it: out.Item}
	p := int(r.int(attrChildParts))
	if r.err != nil {
		return 0, r.err
	}
	b.layouts.put(run, task, p)
	return p, nil
}

// instancePK is the partition key of an instance and its attempts and
// history: the run's, or a map child's partition.
func (b *base) instancePK(ctx context.Context, key ledger.InstanceKey) (string, error) {
	parent, i, ok := ledger.ParseChild(key.Task)
	if !ok {
		return runPK(key.Run), nil
	}
	parts, err := b.mapParts(ctx, key.Run, parent)
	if err != nil {
		return "", err
	}
	return childPK(key.Run, parent, i, parts), nil
}

// childPK is child i's partition key in a map of parts partitions.
func childPK(run, task string, i, parts int) string {
	if parts <= 0 {
		return runPK(run)
	}
	return childPartPK(run, task, i%parts)
}

// countShardKey is the key of the item counting child i's end.
func countShardKey(run, task string, i, parts int) map[string]types.AttributeValue {
	if parts <= 0 {
		return keyOf(runPK(run), mapShardSK(task, i))
	}
	return keyOf(childPartPK(run, task, i%parts), mapShardSK(task, i%parts))
}

// readMapParted reads a partitioned map: its item (when withItem) and its
// count shards, in one strongly consistent BatchGetItem, added to maps.
func (b *base) readMapParted(ctx context.Context, run, task string, parts int, withItem bool, maps map[string]ledger.MapState) error {
	keys := make([]map[string]types.AttributeValue, 0, parts+1)
	if withItem {
		keys = append(keys, keyOf(runPK(run), mapSK(task)))
	}
	for p := range parts {
		keys = append(keys, countShardKey(run, task, p, parts))
	}
	var item map[string]types.AttributeValue
	var shards []map[string]types.AttributeValue
	err := b.batchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		if (&reader{it: it}).str(attrKind) == kindMap {
			item = it
		} else {
			shards = append(shards, it)
		}
	})
	if err != nil {
		return err
	}
	// The map item first: a shard adds to the map it finds.
	if item != nil {
		if err := addMapItem(maps, item); err != nil {
			return err
		}
	}
	for _, it := range shards {
		if err := addMapItem(maps, it); err != nil {
			return err
		}
	}
	return nil
}

// childPartsOf answers the parts a map item records (0: none).
func childPartsOf(it map[string]types.AttributeValue) int {
	if _, ok := it[attrChildParts]; !ok {
		return 0
	}
	r := &reader{it: it}
	return int(r.int(attrChildParts))
}

// instanceOfKey answers the run and task of an instance's key: a task's
// (RUN#<run>, TASK#<task>) or a map child's (RUN#<run> or its map's
// partition, MAP#<task>#C#nnnnn); ok false for any other key.
func instanceOfKey(pk, sk string) (run, task string, ok bool) {
	run, ok = strings.CutPrefix(pk, prefixRun)
	if !ok {
		return "", "", false
	}
	run, _, _ = strings.Cut(run, childPartInfix)
	if t, ok := strings.CutPrefix(sk, prefixTask); ok {
		return run, t, true
	}
	rest, ok := strings.CutPrefix(sk, prefixMap)
	if !ok {
		return "", "", false
	}
	parent, digits, ok := strings.Cut(rest, "#C#")
	if !ok {
		return "", "", false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 {
		return "", "", false
	}
	return run, ledger.ChildTask(parent, n), true
}
