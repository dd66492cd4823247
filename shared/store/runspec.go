package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

// A run's job spec lives apart from the run item, once per distinct spec
// of a job, in an immutable item named by the spec's content:
//
//	run spec  JOB#<job>  SPEC#<sha-256 of the spec, 32 hex digits>  spec
//
// The run item holds only that name (spec_ref), so the run item's writes
// (its creation, its start, its end, and the live index entry each puts)
// cost its states, not the job's tasks. Runs stored before keep their spec
// inline (attribute spec), and a read takes it from there.
//
// The item is written once per process and spec (ensureRunSpec, a PutItem
// before the run's transaction: an identical item rewritten, never a
// conflict), and read once per process and spec (runSpecs): both go
// through the store's cache, which the content name makes safe to keep.
// Nothing deletes a run spec item: a deleted job's runs still read theirs,
// and a job of the same name created later reuses or adds its own.
const (
	prefixRunSpec = "SPEC#"
	kindRunSpec   = "run_spec"
	attrSpecRef   = "spec_ref"
)

// runSpecRef names spec by its content; "" for no spec.
func runSpecRef(spec []byte) string {
	if len(spec) == 0 {
		return ""
	}
	sum := sha256.Sum256(spec)
	return hex.EncodeToString(sum[:16])
}

func runSpecSK(ref string) string { return prefixRunSpec + ref }

func runSpecItem(job, ref string, spec []byte) item {
	return item{
		tableschema.PK: str(jobPK(job)), tableschema.SK: str(runSpecSK(ref)),
		attrKind: str(kindRunSpec), attrJob: str(job), attrSpecRef: str(ref), attrSpec: bin(spec),
	}
}

// specCacheBytes bounds the specs a store keeps in memory; past it the
// cache starts again empty.
const specCacheBytes = 32 << 20

// specCache holds the run specs this process wrote or read, by job and
// content name. A spec in it exists in the table.
type specCache struct {
	mu    sync.Mutex
	bytes int
	specs map[string][]byte
	// writing serialises the first write of specs, so that a burst of
	// runs of a job new to this process writes its spec once.
	writing sync.Mutex
}

func specKey(job, ref string) string { return job + "\x00" + ref }

// get answers a copy: a caller may change the spec of the run it holds.
func (c *specCache) get(job, ref string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	spec, ok := c.specs[specKey(job, ref)]
	return slices.Clone(spec), ok
}

func (c *specCache) put(job, ref string, spec []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.specs == nil || c.bytes+len(spec) > specCacheBytes {
		c.specs, c.bytes = map[string][]byte{}, 0
	}
	if _, ok := c.specs[specKey(job, ref)]; !ok {
		c.specs[specKey(job, ref)] = slices.Clone(spec)
		c.bytes += len(spec)
	}
}

// ensureRunSpec makes sure the run spec item of (job, spec) exists: a
// PutItem unless this process wrote or read it before. A run whose
// transaction then fails leaves the item behind, harmless: it is what the
// next run of that spec needs.
func (s *base) ensureRunSpec(ctx context.Context, job string, spec []byte) error {
	ref := runSpecRef(spec)
	if ref == "" {
		return nil
	}
	if _, ok := s.specs.get(job, ref); ok {
		return nil
	}
	s.specs.writing.Lock()
	defer s.specs.writing.Unlock()
	if _, ok := s.specs.get(job, ref); ok {
		return nil
	}
	m := runSpecItem(job, ref, spec).present()
	n, err := checkSize("run spec "+ref, m)
	if err != nil {
		return err
	}
	out, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.table), Item: m, ReturnConsumedCapacity: s.returnCapacity(),
	})
	if err != nil {
		return fmt.Errorf("write the spec %s of job %s: %w", ref, job, translate(err))
	}
	s.report("put_run_spec", false, []int{n}, nil, consumed(out.ConsumedCapacity))
	s.specs.put(job, ref, spec)
	return nil
}

// runSpecs fills the Spec of runs read without one: refs[i] is the
// content name run i's item holds ("" when the item carried its spec
// inline, or had none). Specs this process knows come from its cache, the
// others from one GetItem (one spec) or one BatchGetItem per 100.
func (s *base) runSpecs(ctx context.Context, runs []ledger.Run, refs []string) error {
	var keys []map[string]types.AttributeValue
	asked := map[string]bool{}
	for i, ref := range refs {
		if ref == "" {
			continue
		}
		if spec, ok := s.specs.get(runs[i].Job, ref); ok {
			runs[i].Spec = spec
			continue
		}
		if k := specKey(runs[i].Job, ref); !asked[k] {
			asked[k] = true
			keys = append(keys, keyOf(jobPK(runs[i].Job), runSpecSK(ref)))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	keep := func(it map[string]types.AttributeValue) {
		r := &reader{it: it}
		s.specs.put(r.str(attrJob), r.str(attrSpecRef), r.bytes(attrSpec))
	}
	var err error
	if len(keys) == 1 {
		// One spec: a GetItem, the call every reader of one run makes.
		var out *dynamodb.GetItemOutput
		out, err = s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: keys[0], ConsistentRead: aws.Bool(true)})
		if err == nil && out.Item != nil {
			keep(out.Item)
		}
		err = translate(err)
	} else {
		err = s.batchGet(ctx, keys, keep)
	}
	if err != nil {
		return fmt.Errorf("read run specs: %w", err)
	}
	for i, ref := range refs {
		if ref == "" || runs[i].Spec != nil {
			continue
		}
		spec, ok := s.specs.get(runs[i].Job, ref)
		if !ok {
			return fmt.Errorf("%w: run %s names spec %s of job %s, which is missing", ledger.ErrCorruptItem, runs[i].ID, ref, runs[i].Job)
		}
		runs[i].Spec = spec
	}
	return nil
}

// runSpec is runSpecs of one run.
func (s *base) runSpec(ctx context.Context, run *ledger.Run, ref string) error {
	runs := []ledger.Run{*run}
	err := s.runSpecs(ctx, runs, []string{ref})
	*run = runs[0]
	return err
}

// specRefOf is the content name a run item holds, "" when it carries its
// spec inline (a run stored before specs moved out) or has none.
func specRefOf(m map[string]types.AttributeValue) string {
	if _, inline := m[attrSpec]; inline {
		return ""
	}
	return (&reader{it: m}).str(attrSpecRef)
}
