package store_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/statemodel"
)

// runPartition is every item of run id's partition, by sort key.
func runPartition(t *testing.T, table, id string) map[string]map[string]types.AttributeValue {
	t.Helper()
	out := map[string]map[string]types.AttributeValue{}
	for _, it := range scanAll(t, table) {
		if it["pk"].(*types.AttributeValueMemberS).Value == "RUN#"+id {
			out[it["sk"].(*types.AttributeValueMemberS).Value] = it
		}
	}
	return out
}

func bigParams(n int) []byte { return []byte(`{"pad":"` + strings.Repeat("y", n-10) + `"}`) }

// TestRunParamsApart: params over 512 bytes are stored once in their own
// item of the run's partition, with the run's expiry, and the run item
// keeps their marker only (so it stays under 1 KB); params of 512 bytes
// or less stay in the run item and add no item.
func TestRunParamsApart(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	large := ledgertest.NewRun("params", "main")
	large.Params = bigParams(4096)
	ts.MustCreate(t, large)
	small := ledgertest.NewRun("params", "main")
	small.Params = bigParams(512)
	ts.MustCreate(t, small)

	items := runPartition(t, ts.table, large.ID)
	run := items["RUN"]
	if _, inline := run["params"]; inline || run["params_ref"] == nil {
		t.Fatalf("run item of 4 KB params: params inline %t, marker %v; want the marker alone", inline, run["params_ref"])
	}
	if n := itemBytes(run); n >= 1024 {
		t.Fatalf("run item of 4 KB params is %d bytes, want under 1 KB", n)
	}
	var apart []string
	for sk, it := range items {
		if strings.HasPrefix(sk, "PARAMS#") {
			apart = append(apart, sk)
			if got := it["params"].(*types.AttributeValueMemberB).Value; !bytes.Equal(got, large.Params) {
				t.Fatalf("params item holds %d bytes, want the run's %d", len(got), len(large.Params))
			}
			if got, want := it["expires_at"], run["expires_at"]; got == nil || got.(*types.AttributeValueMemberN).Value != want.(*types.AttributeValueMemberN).Value {
				t.Fatalf("params item expires at %v, the run at %v: a run's items expire together", got, want)
			}
		}
	}
	if len(apart) != 1 {
		t.Fatalf("params items of the large run: %v, want one", apart)
	}
	// A second creation of the run's id, with other params or the same
	// ones, is refused and leaves the run's params and their expiry as
	// they were.
	ctx := context.Background()
	expires := run["expires_at"].(*types.AttributeValueMemberN).Value
	ts.Clock.Advance(time.Hour)
	for _, p := range [][]byte{bigParams(2048), large.Params} {
		again := large
		again.Params = p
		if _, err := ts.CreateRun(ctx, again, ts.Clock.Now()); !errors.Is(err, ledger.ErrAlreadyExists) {
			t.Fatalf("second creation of run %s: %v, want already exists", large.ID, err)
		}
	}
	if got, err := ts.GetRun(ctx, large.ID); err != nil || !bytes.Equal(got.Params, large.Params) {
		t.Fatalf("after a second creation: params of %d bytes (%v), want the first run's %d", len(got.Params), err, len(large.Params))
	}
	for sk, it := range runPartition(t, ts.table, large.ID) {
		if sk == apart[0] && it["expires_at"].(*types.AttributeValueMemberN).Value != expires {
			t.Fatalf("a second creation moved the params item's expiry from %s to %v", expires, it["expires_at"])
		}
	}

	items = runPartition(t, ts.table, small.ID)
	if got := items["RUN"]["params"]; got == nil || !bytes.Equal(got.(*types.AttributeValueMemberB).Value, small.Params) {
		t.Fatalf("run item of 512 B params holds %v, want them inline", got)
	}
	for sk := range items {
		if strings.HasPrefix(sk, "PARAMS#") {
			t.Fatalf("a run of 512 B params has a params item %s", sk)
		}
	}
}

// TestRunParamsOfTheFormerFormat: a run stored before params moved apart,
// 4 KB of params inline in its run item and no params item, reads them
// through every read that answers them, and still after its end.
func TestRunParamsOfTheFormerFormat(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	nr := ledgertest.NewRun("former", "main")
	nr.Params = bigParams(4096)
	ts.MustCreate(t, nr)
	for sk := range runPartition(t, ts.table, nr.ID) {
		if strings.HasPrefix(sk, "PARAMS#") {
			key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "RUN#" + nr.ID}, "sk": &types.AttributeValueMemberS{Value: sk}}
			if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(ts.table), Key: key}); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(ts.table),
		Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "RUN#" + nr.ID}, "sk": &types.AttributeValueMemberS{Value: "RUN"}},
		UpdateExpression:          aws.String("SET params = :p REMOVE params_ref"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberB{Value: nr.Params}},
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(how string, got []byte, err error) {
		t.Helper()
		if err != nil || !bytes.Equal(got, nr.Params) {
			t.Fatalf("%s: params of %d bytes (%v), want the %d stored inline", how, len(got), err, len(nr.Params))
		}
	}
	run, err := ts.GetRun(ctx, nr.ID)
	check("GetRun", run.Params, err)
	view, err := ts.ReadRun(ctx, nr.ID)
	check("ReadRun", view.Run.Params, err)
	_, ir, err := ts.GetInstanceAndRun(ctx, ledger.InstanceKey{Run: nr.ID, Task: "main"})
	check("GetInstanceAndRun", ir.Params, err)
	runs, _, err := ts.ListRuns(ctx, ledger.RunFilter{Job: "former"})
	if len(runs) != 1 {
		t.Fatalf("ListRuns: %d runs (%v)", len(runs), err)
	}
	check("ListRuns", runs[0].Params, err)
	if _, err := ts.UpdateRunState(ctx, run, ledger.RunUpdate{ExecutionState: statemodel.RunSucceeded, PublicationState: statemodel.PublicationNotRequired}); err != nil {
		t.Fatal(err)
	}
	after, err := ts.GetRun(ctx, nr.ID)
	check("GetRun after its end", after.Params, err)
	if after.ExecutionState != statemodel.RunSucceeded {
		t.Fatalf("after its end: %s", after.ExecutionState)
	}
}
