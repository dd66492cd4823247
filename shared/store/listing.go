package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

// The runs' listing is sharded: a run's listing entry has list_pk
// RUNS#nn, nn a stable hash of its id over tableschema.RunListShards, so
// the runs of the whole deployment spread their entries over that many
// partitions of the listing index instead of one. The newest-first
// listing merges the shards: a page queries each shard for its newest
// entries below the page's start and keeps the newest of them all. Runs
// created before the sharding carry list_pk RUNS and are read as one more
// shard.

// runListShard is the list_pk of a run's listing entry.
func runListShard(run string) string {
	sum := sha256.Sum256([]byte(run))
	return fmt.Sprintf("%s#%02d", listRuns, binary.BigEndian.Uint32(sum[:4])%tableschema.RunListShards)
}

// runListPartitions are every list_pk value a run's entry may have: the
// shards and the value of the runs listed before the sharding.
func runListPartitions() []string {
	out := make([]string, 0, tableschema.RunListShards+1)
	for n := range tableschema.RunListShards {
		out = append(out, fmt.Sprintf("%s#%02d", listRuns, n))
	}
	return append(out, listRuns)
}

// listAllRuns is ListRuns without a job: the newest limit runs below the
// token's run id over every shard, read whole (BatchGetItem), the status
// filter applied to the runs read. The token is the last run id of the
// page, opaque to callers.
func (s *listings) listAllRuns(ctx context.Context, f ledger.RunFilter, limit int) ([]ledger.Run, string, error) {
	want := map[string]string{tableschema.ListPK: listRuns, tableschema.ListSK: ""}
	start, err := decodeToken(f.Token, want)
	if err != nil {
		return nil, "", err
	}
	before := ""
	if start != nil {
		before = start[tableschema.ListSK].(*types.AttributeValueMemberS).Value
	}
	ids, more, err := s.newestListed(ctx, runListPartitions(), before, limit)
	if err != nil {
		return nil, "", err
	}
	runs, err := s.getRuns(ctx, ids, true)
	if err == nil {
		err = s.showRuns(ctx, runs)
	}
	if err != nil {
		return nil, "", err
	}
	if f.Status != "" {
		runs = slices.DeleteFunc(runs, func(r ledger.Run) bool { return r.Status != f.Status })
	}
	next := ""
	if more {
		next = encodeToken(map[string]types.AttributeValue{
			tableschema.ListPK: str(listRuns), tableschema.ListSK: str(ids[len(ids)-1]),
		})
	}
	return runs, next, nil
}

// newestListed queries the listing index's partitions at once, each for
// its newest limit entries whose list_sk sorts below before ("": from the
// newest), and merges them: the newest limit list_sk values over all of
// them, and whether any entry is left after those.
func (s *listings) newestListed(ctx context.Context, partitions []string, before string, limit int) ([]string, bool, error) {
	return s.newestMerged(ctx, partitions, limit, func(pk string) *dynamodb.QueryInput {
		e := newExpr()
		cond := e.n(tableschema.ListPK) + " = " + e.v("list_pk", str(pk))
		if before != "" {
			cond += " AND " + e.n(tableschema.ListSK) + " < " + e.v("before", str(before))
		}
		return &dynamodb.QueryInput{
			TableName: aws.String(s.table), IndexName: aws.String(tableschema.ListIndex),
			KeyConditionExpression:   aws.String(cond),
			ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
		}
	}, func(it map[string]types.AttributeValue) string { return (&reader{it: it}).str(tableschema.ListSK) }, "")
}

// newestMerged runs query(partition) on every partition at once, newest
// first, limit each, takes key(item) of each item (a run id), leaves out
// exclude (a BETWEEN's inclusive end), and merges: the newest limit ids
// over all of them, and whether any is left after those.
func (s *listings) newestMerged(ctx context.Context, partitions []string, limit int, query func(pk string) *dynamodb.QueryInput, key func(map[string]types.AttributeValue) string, exclude string) ([]string, bool, error) {
	type answer struct {
		keys []string
		more bool
		err  error
	}
	answers := make([]answer, len(partitions))
	var wg sync.WaitGroup
	for i, pk := range partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := query(pk)
			n := limit
			if exclude != "" {
				n++ // the excluded item may be among them
			}
			in.ScanIndexForward, in.Limit = aws.Bool(false), aws.Int32(int32(n))
			out, err := s.db.Query(ctx, in)
			if err != nil {
				answers[i].err = translate(err)
				return
			}
			for _, it := range out.Items {
				if k := key(it); k != exclude {
					answers[i].keys = append(answers[i].keys, k)
				}
			}
			answers[i].more = out.LastEvaluatedKey != nil
		}()
	}
	wg.Wait()
	var all []string
	more := false
	for _, a := range answers {
		if a.err != nil {
			return nil, false, a.err
		}
		all = append(all, a.keys...)
		more = more || a.more
	}
	slices.SortFunc(all, func(a, b string) int { return strings.Compare(b, a) })
	all = slices.Compact(all)
	if len(all) > limit {
		all, more = all[:limit], true
	}
	return all, more, nil
}

// getJobs reads job items by name with BatchGetItem, in the order of
// names; jobs that vanished are left out.
func (s *listings) getJobs(ctx context.Context, names []string) ([]ledger.Job, error) {
	keys := make([]map[string]types.AttributeValue, len(names))
	for i, n := range names {
		keys[i] = keyOf(jobPK(n), skJob)
	}
	got := make(map[string]ledger.Job, len(names))
	var derr error
	err := s.batchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		j, err := decodeJob(it)
		if err != nil && derr == nil {
			derr = err
		}
		got[j.Name] = j
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, err
	}
	jobs := make([]ledger.Job, 0, len(names))
	for _, n := range names {
		if j, ok := got[n]; ok {
			jobs = append(jobs, j)
		}
	}
	return jobs, nil
}

// liveShardCount is tableschema.LiveShards.
const liveShardCount = tableschema.LiveShards

// liveShard is the live_pk of a run's entry in the live index.
func liveShard(job, run string) string {
	sum := sha256.Sum256([]byte(run))
	return fmt.Sprintf("%s#%02d", jobPK(job), binary.BigEndian.Uint32(sum[:4])%liveShardCount)
}

// liveShards lists every live_pk value of a job's entries: its shards and
// the unsharded value of the entries written before the sharding.
func liveShards(job string) []string {
	out := make([]string, 0, liveShardCount+1)
	for n := range liveShardCount {
		out = append(out, fmt.Sprintf("%s#%02d", jobPK(job), n))
	}
	return append(out, jobPK(job))
}

// listingEntrySize is the size of an item's entry in the keys-only listing
// index: the table's keys and the index's.
func listingEntrySize(it item) int {
	return itemSize(item{
		tableschema.PK: it[tableschema.PK], tableschema.SK: it[tableschema.SK],
		tableschema.ListPK: it[tableschema.ListPK], tableschema.ListSK: it[tableschema.ListSK],
	}.present())
}

// A job's run pointers and gates are spread over tableschema.JobShards
// partitions JOB#<job>#nn (the run id's hash picks the shard): a run's
// creating write puts its pointer and checks its shard's gate there, not
// in JOB#<job>, which every run of the job would otherwise write.

// jobShard is the partition of a run's pointer and of the gate its
// creation checks.
func jobShard(job, run string) string {
	sum := sha256.Sum256([]byte(run))
	return jobShardN(job, int(binary.BigEndian.Uint32(sum[:4])%tableschema.JobShards))
}

func jobShardN(job string, n int) string { return fmt.Sprintf("%s#%02d", jobPK(job), n) }

// pointerPartitions lists every partition a job's run pointers may be in:
// its shards and JOB#<job>, where pointers were written before the
// sharding.
func pointerPartitions(job string) []string {
	out := make([]string, 0, tableschema.JobShards+1)
	for n := range tableschema.JobShards {
		out = append(out, jobShardN(job, n))
	}
	return append(out, jobPK(job))
}

// newestPointers reads the run ids of a job's newest pointers below before
// ("": from the newest), limit of them, merged over the pointer
// partitions (strongly consistent), and whether any is left after those.
func (s *listings) newestPointerIDs(ctx context.Context, job, before string, limit int) ([]string, bool, error) {
	return s.newestMerged(ctx, pointerPartitions(job), limit, func(pk string) *dynamodb.QueryInput {
		e := newExpr()
		var cond string
		if before == "" {
			cond = e.prefixKey(pk, prefixRun)
		} else {
			cond = e.n(tableschema.PK) + " = " + e.v("pk", str(pk)) + " AND " +
				e.n(tableschema.SK) + " BETWEEN " + e.v("lo", str(prefixRun)) + " AND " + e.v("hi", str(pointerSK(before)))
		}
		return &dynamodb.QueryInput{
			TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
			KeyConditionExpression:   aws.String(cond),
			ExpressionAttributeNames: e.nameMap(), ExpressionAttributeValues: e.valueMap(),
			ProjectionExpression: aws.String(e.n(attrRunID)),
		}
	}, func(it map[string]types.AttributeValue) string { return (&reader{it: it}).str(attrRunID) }, before)
}

// RunPointerPK is the partition key of a run's pointer (the bench clones
// pointers, the tests read them).
func RunPointerPK(job, run string) string { return jobShard(job, run) }

// RunPointerPartitions lists every partition key a job's run pointers may
// have (the bench counts a job's runs).
func RunPointerPartitions(job string) []string { return pointerPartitions(job) }
