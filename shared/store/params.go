package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

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
