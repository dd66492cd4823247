package store_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
)

// readSpecs reads run id's spec on every read path of a store that has
// seen none of it (an empty cache), and fails unless each is want.
func readSpecs(t *testing.T, ts *testStore, job, id string, want []byte) {
	t.Helper()
	ctx := context.Background()
	cold := func() *store.Store { return store.New(db, ts.table) }
	check := func(path string, got []byte, err error) {
		t.Helper()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s of run %s: spec %q, %v; want %q", path, id, got, err, want)
		}
	}
	r, err := cold().GetRun(ctx, id)
	check("GetRun", r.Spec, err)
	v, err := cold().ReadRun(ctx, id)
	check("ReadRun", v.Run.Spec, err)
	_, r, err = cold().GetInstanceAndRun(ctx, ledger.InstanceKey{Run: id, Task: "main"})
	check("GetInstanceAndRun", r.Spec, err)
	for _, f := range []ledger.RunFilter{{Job: job}, {}} {
		runs, _, err := cold().ListRuns(ctx, f)
		found := false
		for _, r := range runs {
			if r.ID == id {
				found = true
				check("ListRuns", r.Spec, err)
			}
		}
		if err != nil || !found {
			t.Fatalf("ListRuns %+v: run %s not listed (%d runs, %v)", f, id, len(runs), err)
		}
	}
}

// specItems lists job's run spec items.
func specItems(t *testing.T, ts *testStore, job string) []map[string]types.AttributeValue {
	t.Helper()
	var out []map[string]types.AttributeValue
	for _, it := range scanAll(t, ts.table) {
		if it["pk"].(*types.AttributeValueMemberS).Value == "JOB#"+job && strings.HasPrefix(it["sk"].(*types.AttributeValueMemberS).Value, "SPEC#") {
			out = append(out, it)
		}
	}
	return out
}

// TestRunSpecIsStoredOncePerSpec: the run item holds a reference to its
// job spec, not the spec; runs of one spec share one spec item, another
// spec adds one, and every read path of a store with an empty cache
// returns each run's own spec.
func TestRunSpecIsStoredOncePerSpec(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	first := ledgertest.NewRun("specs", "main")
	first.Spec = []byte(`{"tasks":[{"id":"main","payload":"` + strings.Repeat("x", 2000) + `"}]}`)
	second := ledgertest.NewRun("specs", "main")
	second.Spec = first.Spec
	other := ledgertest.NewRun("specs", "main")
	other.Spec = []byte(`{"tasks":[{"id":"main"}]}`)
	for _, nr := range []ledger.NewRun{first, second, other} {
		ts.MustCreate(t, nr)
	}
	for _, nr := range []ledger.NewRun{first, second, other} {
		it := getItem(t, ts.table, "RUN#"+nr.ID, "RUN")
		if _, ok := it["spec"]; ok {
			t.Errorf("run item %s carries its spec", nr.ID)
		}
		if n := itemBytes(it); n > 1024 {
			t.Errorf("run item %s is %d bytes, over 1 KB with a 2 KB spec kept apart", nr.ID, n)
		}
		readSpecs(t, ts, "specs", nr.ID, nr.Spec)
	}
	if items := specItems(t, ts, "specs"); len(items) != 2 {
		t.Errorf("%d spec items for two specs, want 2", len(items))
	}
}

// TestRunStoredWithItsSpecReadsIt: a run item written before specs moved
// out carries its spec inline, and every read path returns that spec.
func TestRunStoredWithItsSpecReadsIt(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	nr := ledgertest.NewRun("legacy-spec", "main")
	ts.MustCreate(t, nr)
	legacy := []byte(`{"tasks":[{"id":"main","stored":"inline"}]}`)
	_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(ts.table),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "RUN#" + nr.ID}, "sk": &types.AttributeValueMemberS{Value: "RUN"},
		},
		UpdateExpression:          aws.String("SET #s = :s REMOVE #r"),
		ExpressionAttributeNames:  map[string]string{"#s": "spec", "#r": "spec_ref"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberB{Value: legacy}},
	})
	if err != nil {
		t.Fatal(err)
	}
	readSpecs(t, ts, "legacy-spec", nr.ID, legacy)
}

// itemBytes approximates an item's stored size: names and values.
func itemBytes(it map[string]types.AttributeValue) int {
	n := 0
	for k, v := range it {
		n += len(k)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberB:
			n += len(v.Value)
		default:
			n += 8
		}
	}
	return n
}
