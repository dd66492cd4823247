package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/tableschema"
)

// TestRunsListingSpreadsOverShardsAndKeepsUnshardedRuns: new runs' listing
// entries land on several list_pk shards (RUNS#nn), and a run listed before
// the sharding (list_pk RUNS) is still listed, in its place newest first.
func TestRunsListingSpreadsOverShardsAndKeepsUnshardedRuns(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	var want []string
	shards := map[string]bool{}
	for range 12 {
		v := ts.MustCreate(t, ledgertest.NewRun("shards", "main"))
		want = append(want, v.Run.ID)
		lp := getItem(t, ts.table, "RUN#"+v.Run.ID, "RUN")[tableschema.ListPK].(*types.AttributeValueMemberS).Value
		if !strings.HasPrefix(lp, "RUNS#") {
			t.Fatalf("run %s listed under %q, want a RUNS# shard", v.Run.ID, lp)
		}
		shards[lp] = true
	}
	if len(shards) < 3 {
		t.Fatalf("12 runs on %d listing shards %v, want them spread", len(shards), shards)
	}
	// One run as written before the sharding.
	legacy := want[5]
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(ts.table),
		Key: map[string]types.AttributeValue{
			tableschema.PK: &types.AttributeValueMemberS{Value: "RUN#" + legacy}, tableschema.SK: &types.AttributeValueMemberS{Value: "RUN"},
		},
		UpdateExpression:          aws.String("SET #lp = :runs"),
		ExpressionAttributeNames:  map[string]string{"#lp": tableschema.ListPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":runs": &types.AttributeValueMemberS{Value: "RUNS"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(want, func(a, b string) int { return strings.Compare(b, a) })
	var got []string
	token := ""
	for {
		page, next, err := ts.ListRuns(ctx, ledger.RunFilter{Limit: 4, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			got = append(got, r.ID)
		}
		if token = next; token == "" {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
}

// TestLiveIndexSpreadsAJobOverShardsAndKeepsUnshardedEntries: one job's
// unfinished runs carry live_pk on several of its shards (JOB#<job>#nn),
// a run item written before the sharding (live_pk JOB#<job>) still counts,
// and ListUnfinishedRuns answers them all once, oldest first.
func TestLiveIndexSpreadsAJobOverShardsAndKeepsUnshardedEntries(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	var want []string
	shards := map[string]bool{}
	for range 10 {
		v := ts.MustCreate(t, ledgertest.NewRun("spread", "main"))
		want = append(want, v.Run.ID)
		lp := getItem(t, ts.table, "RUN#"+v.Run.ID, "RUN")[tableschema.LivePK].(*types.AttributeValueMemberS).Value
		if !strings.HasPrefix(lp, "JOB#spread#") {
			t.Fatalf("run %s live under %q, want a JOB#spread# shard", v.Run.ID, lp)
		}
		shards[lp] = true
	}
	if len(shards) < 3 {
		t.Fatalf("10 runs on %d live shards %v, want them spread", len(shards), shards)
	}
	legacy := want[3]
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(ts.table),
		Key: map[string]types.AttributeValue{
			tableschema.PK: &types.AttributeValueMemberS{Value: "RUN#" + legacy}, tableschema.SK: &types.AttributeValueMemberS{Value: "RUN"},
		},
		UpdateExpression:          aws.String("SET #lp = :job"),
		ExpressionAttributeNames:  map[string]string{"#lp": tableschema.LivePK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":job": &types.AttributeValueMemberS{Value: "JOB#spread"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	live, err := ts.ListUnfinishedRuns(ctx, "spread")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range live {
		got = append(got, r.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("unfinished runs %v, want %v", got, want)
	}
}

// TestJobGatesCloseOnDeleteAndOpenOnCreate: a job's runs check the gate of
// their pointer's shard; a delete closes every gate, so no run of the
// deleted job passes on any shard, and a new job of the name opens them. A
// job written before the gates (none) still takes runs.
func TestJobGatesCloseOnDeleteAndOpenOnCreate(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	ofJob := func() ledger.NewRun {
		nr := ledgertest.NewRun("gated", "main")
		nr.OfLiveJob = true
		return nr
	}
	if _, err := ts.CreateJob(ctx, ledger.Job{Name: "gated"}); err != nil {
		t.Fatal(err)
	}
	if err := ts.DeleteJobIfIdle(ctx, "gated"); err != nil {
		t.Fatal(err)
	}
	ts.Clock.Advance(2 * time.Minute) // past the deletion mark's life: the gates stay closed
	for range 20 {                    // runs of many shards: every one is refused
		if _, err := ts.CreateRun(ctx, ofJob(), ts.Clock.Now()); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a run of the deleted job: %v, want ErrNotFound", err)
		}
	}
	if _, err := ts.CreateJob(ctx, ledger.Job{Name: "gated"}); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := ts.CreateRun(ctx, ofJob(), ts.Clock.Now()); err != nil {
			t.Fatalf("a run of the job created again: %v", err)
		}
	}

	// A job as written before the gates: no gate items.
	if _, err := ts.CreateJob(ctx, ledger.Job{Name: "older"}); err != nil {
		t.Fatal(err)
	}
	for n := range tableschema.JobShards {
		_, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(ts.table), Key: map[string]types.AttributeValue{
			tableschema.PK: &types.AttributeValueMemberS{Value: fmt.Sprintf("JOB#older#%02d", n)}, tableschema.SK: &types.AttributeValueMemberS{Value: "GATE"},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	nr := ledgertest.NewRun("older", "main")
	nr.OfLiveJob = true
	if _, err := ts.CreateRun(ctx, nr, ts.Clock.Now()); err != nil {
		t.Fatalf("a run of a job without gates: %v", err)
	}
}
