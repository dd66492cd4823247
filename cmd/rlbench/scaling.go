package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/oklog/ulid/v2"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// Scaling scenario sizes.
const (
	scalePasses    = 15 // measured passes of each kind on each table, after scaleWarmup
	scaleWarmup    = 3
	scaleTemplates = 20 // real runs whose items are cloned
	scaleWriters   = 8  // BatchWriteItem calls in flight while loading
)

// scaling measures one ticker pass (Service.Tick) and one reconciler pass
// (Service.Reconcile) on a table holding n finished single-task runs and on
// one holding none, and reports the ratios of the median pass times. The
// two tables get their passes in turn, after the load, so that the
// emulator's warm-up and the machine's load weigh on both alike.
//
// The finished runs are clones of real runs: scaleTemplates runs go through
// the stack and the worker, and their items (run, per-job pointer,
// instance, which holds the history) are copied under new run ids with BatchWriteItem. Finished items carry no
// timer attributes; rlbench checks that before cloning.
func (b *bench) scaling(ctx context.Context, n int) error {
	// The stacks' own tickers and reconcilers fire at start and then
	// hourly, so the passes measured here are the only ones running.
	full, err := b.startStack(ctx, devstack.Options{TickInterval: time.Hour})
	if err != nil {
		return err
	}
	defer full.Stop(context.Background())
	empty, err := b.startStack(ctx, devstack.Options{TickInterval: time.Hour})
	if err != nil {
		return err
	}
	defer empty.Stop(context.Background())
	stopWorker, err := benchWorker(full, "scaling", 16, failFirst)
	if err != nil {
		return err
	}
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(stopWorker) }
	defer stop()
	api := newAPIClient(full.Info.APIURL, full.Info.APIKey)
	// cancel_previous: the fire measured below cancels the previous fire's
	// run. The rate's first fire is an hour away: only the bench fires it.
	job := map[string]any{"name": "scale", "pool": pool, "overlap": "cancel_previous", "schedule": map[string]any{"rate": "1h"}}
	if err := api.createJob(ctx, job); err != nil {
		return err
	}
	if err := newAPIClient(empty.Info.APIURL, empty.Info.APIKey).createJob(ctx, job); err != nil {
		return err
	}

	ids, err := api.triggerMany(ctx, "scale", scaleTemplates, 4, func(int) map[string]any { return nil })
	if err != nil {
		return err
	}
	runs, err := waitRuns(ctx, full.Store, ids, 2*time.Minute)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if r := runs[id]; r.ExecutionState != statemodel.RunSucceeded {
			return fmt.Errorf("scaling template run %s ended %s", id, r.ExecutionState)
		}
	}
	// From here on runs stay QUEUED until cancelled: the fires and finishes
	// measured below find an unfinished run to cancel.
	stop()
	db := b.env.DynamoDBClient()
	table := full.Info.Table
	templates, err := readTemplates(ctx, db, table, "scale", ids)
	if err != nil {
		return err
	}
	perRun := len(templates[0].items)
	loadStart := time.Now()
	if err := cloneRuns(ctx, db, table, templates, n); err != nil {
		return err
	}
	load := time.Since(loadStart)
	listed, err := countPointers(ctx, db, table, "scale")
	if err != nil {
		return err
	}

	var emptyTick, emptyRec, fullTick, fullRec []float64
	for i := range scaleWarmup + scalePasses {
		et, er, err := pass(ctx, empty.Service)
		if err != nil {
			return err
		}
		ft, fr, err := pass(ctx, full.Service)
		if err != nil {
			return err
		}
		if i >= scaleWarmup {
			emptyTick, emptyRec = append(emptyTick, et), append(emptyRec, er)
			fullTick, fullRec = append(fullTick, ft), append(fullRec, fr)
		}
	}
	tickRatio, recRatio := median(fullTick)/median(emptyTick), median(fullRec)/median(emptyRec)
	b.rep.figure("scaling_tick_empty_ms", median(emptyTick), "ms")
	b.rep.figure("scaling_tick_full_ms", median(fullTick), "ms")
	b.rep.figure("scaling_tick_ratio", tickRatio, "ratio")
	b.rep.figure("scaling_reconcile_empty_ms", median(emptyRec), "ms")
	b.rep.figure("scaling_reconcile_full_ms", median(fullRec), "ms")
	b.rep.figure("scaling_reconcile_ratio", recRatio, "ratio")
	if err := b.growth(ctx, full, empty, n); err != nil {
		return err
	}
	what := "run, pointer, instance with its history"
	b.rep.note("scaling: %d finished runs cloned from %d real ones (%d items each: %s; %d items written in %.0f s = %.0f items/s; the job lists %d runs):\n"+
		"  median of %d passes, no finished runs -> %d: tick %.1f -> %.1f ms (x%.2f), reconcile %.1f -> %.1f ms (x%.2f) (target <= 1.2)",
		n, scaleTemplates, perRun, what, n*perRun, load.Seconds(), float64(n*perRun)/load.Seconds(), listed,
		scalePasses, n, median(emptyTick), median(fullTick), tickRatio, median(emptyRec), median(fullRec), recRatio)
	return nil
}

// pass times one ticker pass and one reconciler pass of svc.
func pass(ctx context.Context, svc *scheduler.Service) (tick, rec float64, err error) {
	t, err := svc.Tick(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("tick: %w", err)
	}
	r, err := svc.Reconcile(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("reconcile: %w", err)
	}
	return ms(t.Duration), ms(r.Duration), nil
}

// runItems is every item of one finished run: its partition and its
// pointer under the job.
type runItems struct {
	id    string
	items []map[string]types.AttributeValue
}

// readTemplates reads the items of finished runs and checks that none
// waits on a time.
func readTemplates(ctx context.Context, db *dynamodb.Client, table, job string, ids []string) ([]runItems, error) {
	var out []runItems
	for _, id := range ids {
		ri := runItems{id: id}
		in := &dynamodb.QueryInput{
			TableName:                 aws.String(table),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  map[string]string{"#pk": tableschema.PK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "RUN#" + id}},
			ConsistentRead:            aws.Bool(true),
		}
		for {
			page, err := db.Query(ctx, in)
			if err != nil {
				return nil, fmt.Errorf("read run %s: %w", id, err)
			}
			for _, it := range page.Items {
				ri.items = append(ri.items, it)
			}
			if page.LastEvaluatedKey == nil {
				break
			}
			in.ExclusiveStartKey = page.LastEvaluatedKey
		}
		ptr, err := db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{
				tableschema.PK: &types.AttributeValueMemberS{Value: store.RunPointerPK(job, id)},
				tableschema.SK: &types.AttributeValueMemberS{Value: "RUN#" + id},
			},
		})
		if err != nil || ptr.Item == nil {
			return nil, fmt.Errorf("read pointer of run %s: %v", id, err)
		}
		ri.items = append(ri.items, ptr.Item)
		for _, it := range ri.items {
			if _, ok := it[tableschema.TimerShard]; ok {
				return nil, fmt.Errorf("finished run %s: item %v still has %s", id, it[tableschema.SK], tableschema.TimerShard)
			}
			if _, ok := it[tableschema.TimerAt]; ok {
				return nil, fmt.Errorf("finished run %s: item %v still has %s", id, it[tableschema.SK], tableschema.TimerAt)
			}
			if _, ok := it[tableschema.LivePK]; ok {
				return nil, fmt.Errorf("finished run %s: item %v still has %s", id, it[tableschema.SK], tableschema.LivePK)
			}
		}
		out = append(out, ri)
	}
	return out, nil
}

// cloneRuns writes n copies of the templates, each under a new run id
// (every string holding the template's id holds the new one), with
// BatchWriteItem, scaleWriters requests in flight.
func cloneRuns(ctx context.Context, db *dynamodb.Client, table string, templates []runItems, n int) error {
	batches := make(chan []types.WriteRequest, scaleWriters)
	var firstErr error
	var errOnce sync.Once
	var written atomic.Int64
	var wg sync.WaitGroup
	for range scaleWriters {
		wg.Go(func() {
			for batch := range batches {
				if err := batchWrite(ctx, db, table, batch); err != nil {
					errOnce.Do(func() { firstErr = err })
				}
				written.Add(int64(len(batch)))
			}
		})
	}
	entropy := ulid.Monotonic(rand.Reader, 0)
	var batch []types.WriteRequest
	for i := 0; i < n && ctx.Err() == nil && firstErr == nil; i++ {
		t := templates[i%len(templates)]
		newID := ulid.MustNew(ulid.Now(), entropy).String()
		for _, it := range t.items {
			batch = append(batch, types.WriteRequest{PutRequest: &types.PutRequest{Item: renameItem(it, t.id, newID)}})
			if len(batch) == 25 {
				batches <- batch
				batch = nil
			}
		}
	}
	if len(batch) > 0 {
		batches <- batch
	}
	close(batches)
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("clone runs: %w", firstErr)
	}
	return ctx.Err()
}

// batchWrite writes one batch, resending unprocessed items.
func batchWrite(ctx context.Context, db *dynamodb.Client, table string, batch []types.WriteRequest) error {
	req := map[string][]types.WriteRequest{table: batch}
	for try := 0; len(req) > 0; try++ {
		out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: req})
		if err != nil {
			return err
		}
		req = out.UnprocessedItems
		if len(req) > 0 {
			if try >= 10 {
				return errors.New("unprocessed items after 10 tries")
			}
			time.Sleep(time.Duration(10<<try) * time.Millisecond) // pacing a throttled endpoint
		}
	}
	return nil
}

// renameItem copies an item with every occurrence of from in its strings
// (keys, attributes, nested values) replaced by to.
func renameItem(it map[string]types.AttributeValue, from, to string) map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(it))
	for k, v := range it {
		out[k] = renameValue(v, from, to)
	}
	return out
}

func renameValue(v types.AttributeValue, from, to string) types.AttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		if strings.Contains(v.Value, from) {
			return &types.AttributeValueMemberS{Value: strings.ReplaceAll(v.Value, from, to)}
		}
	case *types.AttributeValueMemberM:
		return &types.AttributeValueMemberM{Value: renameItem(v.Value, from, to)}
	case *types.AttributeValueMemberL:
		l := make([]types.AttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = renameValue(e, from, to)
		}
		return &types.AttributeValueMemberL{Value: l}
	case *types.AttributeValueMemberSS:
		ss := make([]string, len(v.Value))
		for i, s := range v.Value {
			ss[i] = strings.ReplaceAll(s, from, to)
		}
		return &types.AttributeValueMemberSS{Value: ss}
	}
	return v
}

// countPointers counts the job's run pointers over their partitions: the
// runs the job lists.
func countPointers(ctx context.Context, db *dynamodb.Client, table, job string) (int, error) {
	total := 0
	for _, pk := range store.RunPointerPartitions(job) {
		in := &dynamodb.QueryInput{
			TableName:              aws.String(table),
			KeyConditionExpression: aws.String("#pk = :pk AND begins_with(#sk, :run)"),
			ExpressionAttributeNames: map[string]string{
				"#pk": tableschema.PK, "#sk": tableschema.SK,
			},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": &types.AttributeValueMemberS{Value: pk}, ":run": &types.AttributeValueMemberS{Value: "RUN#"},
			},
			Select: types.SelectCount,
		}
		for {
			out, err := db.Query(ctx, in)
			if err != nil {
				return 0, fmt.Errorf("count runs of %s: %w", job, err)
			}
			total += int(out.Count)
			if out.LastEvaluatedKey == nil {
				break
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	}
	return total, nil
}
