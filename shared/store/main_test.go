package store_test

import (
	"context"
	"fmt"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/emulator/emulatortest"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
)

var (
	env *emulator.Env
	db  *dynamodb.Client
)

// TestMain starts DynamoDB Local (or adopts the endpoint the SDK settings
// name) once for the package.
func TestMain(m *testing.M) {
	emulatortest.Main(m, func(e *emulator.Env) error {
		env = e
		db = e.DynamoDBClient()
		return nil
	})
}

// testStore is the DynamoDB store on a fresh table with the contract
// suite's harness: its clock, its helpers (MustCreate, Step, ToQueued), and
// its replay check when the test ends, to which the store adds that the
// table holds no instance of a run the harness did not create.
type testStore struct {
	*store.Store
	*ledgertest.Harness
	table string
}

var tableSeq atomic.Int64

var unsafeTableChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

func newStore(t testing.TB, opts ...store.Option) *testStore {
	t.Helper()
	ts := &testStore{table: newTable(t)}
	ts.Harness = ledgertest.NewHarness(t, func(_ testing.TB, now func() time.Time) ledger.Storage {
		ts.Store = store.New(db, ts.table, append([]store.Option{store.WithClock(now)}, opts...)...)
		return ts.Store
	})
	// Registered after the table's deletion, so it runs before it.
	t.Cleanup(func() { ts.checkKnownRuns(t) })
	return ts
}

// newTable creates a fresh table for the test and deletes it when the
// test ends.
func newTable(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("rl-%d-%s", tableSeq.Add(1), unsafeTableChars.ReplaceAllString(t.Name(), "_"))
	if len(name) > 200 {
		name = name[:200]
	}
	if err := store.CreateTable(context.Background(), db, name); err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() {
		if err := store.DeleteTable(context.Background(), db, name); err != nil {
			t.Errorf("delete table %s: %v", name, err)
		}
	})
	return name
}

// CreateRun creates through the harness, which registers the run.
func (ts *testStore) CreateRun(ctx context.Context, nr ledger.NewRun, now time.Time) (ledger.RunView, error) {
	return ts.Harness.CreateRun(ctx, nr, now)
}

// checkKnownRuns scans the table for instances of runs the harness did not
// create: none may exist.
func (ts *testStore) checkKnownRuns(t testing.TB) {
	t.Helper()
	known := map[string]bool{}
	for _, id := range ts.Runs() {
		known[id] = true
	}
	for _, it := range scanAll(t, ts.table) {
		if kind(it) != "instance" {
			continue
		}
		if run := it["run"].(*types.AttributeValueMemberS).Value; !known[run] {
			t.Errorf("instance of run %s that the harness did not create", run)
		}
	}
}

// scanAll reads the whole table. Tests may Scan; the store never does.
func scanAll(t testing.TB, table string) []map[string]types.AttributeValue {
	t.Helper()
	var out []map[string]types.AttributeValue
	in := &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)}
	for {
		page, err := db.Scan(context.Background(), in)
		if err != nil {
			t.Fatalf("scan %s: %v", table, err)
		}
		out = append(out, page.Items...)
		if page.LastEvaluatedKey == nil {
			return out
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

func kind(it map[string]types.AttributeValue) string {
	if v, ok := it["kind"].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// getItem reads one raw item.
func getItem(t testing.TB, table, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk},
		},
	})
	if err != nil {
		t.Fatalf("get item %s/%s: %v", pk, sk, err)
	}
	return out.Item
}
