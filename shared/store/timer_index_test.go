package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// TestTimerIndexEntriesStaySmall: the timers index projects only what
// ListDueTimers reads, so the entry of an instance with a 6 KB payload
// holds the keys, timer_kind and job, and every index write the store
// accounts for costs 1 WCU. Its timers are far (an hour), so the index
// holds them (ledger.IndexedTimer).
func TestTimerIndexEntriesStaySmall(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		reports []store.CapacityReport
	)
	ts := newStore(t, store.WithCapacityReports(func(r store.CapacityReport) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, r)
	}))
	ctx := context.Background()
	nr := ledgertest.NewRun("big", "main")
	nr.Tasks[0].Payload = []byte(`{"blob":"` + strings.Repeat("x", 6000) + `"}`)
	nr.Tasks[0].Policy.Timeouts.Queue = time.Hour
	nr.Tasks[0].Policy.Timeouts.Heartbeat = time.Hour
	v := ts.MustCreate(t, nr)
	key := v.Tasks[0].Instance.Key
	now := ts.Clock.Now()
	for _, e := range []statemodel.Event{ledgertest.Ev(statemodel.EvDepsMet, 0), ledgertest.Dispatch(1), ledgertest.Started(1, "w")} {
		if _, err := ts.Harness.Store.Transition(ctx, key, e, now, ledger.StoredPolicy(nil)); err != nil {
			t.Fatalf("%s: %v", e, err)
		}
	}

	want := []string{tableschema.PK, tableschema.SK, tableschema.TimerShard, tableschema.TimerAt, tableschema.TimerKind, tableschema.JobName}
	out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(ts.table), IndexName: aws.String(tableschema.TimerIndex)})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range out.Items {
		for name := range it {
			if !slices.Contains(want, name) {
				t.Errorf("index entry %v carries %s, which the index does not project", it[tableschema.SK], name)
			}
		}
		if n := store.ItemSize(it); n > 1024 {
			t.Errorf("index entry %v is %d bytes, more than 1 KB", it[tableschema.SK], n)
		}
		if sk, _ := it[tableschema.SK].(*types.AttributeValueMemberS); sk != nil && strings.HasSuffix(sk.Value, "#main") {
			found = true
			if job, _ := it[tableschema.JobName].(*types.AttributeValueMemberS); job == nil || job.Value != "big" {
				t.Errorf("instance entry %v: job %v, want big", it, it[tableschema.JobName])
			}
		}
	}
	if !found {
		t.Fatalf("no timers index entry of the instance among %d", len(out.Items))
	}

	mu.Lock()
	defer mu.Unlock()
	indexWrites := 0
	for _, r := range reports {
		if r.Operation != "transition" {
			continue
		}
		if r.ItemSizes[0] < 6000 {
			t.Errorf("transition wrote an instance of %d bytes, want the 6 KB payload in it", r.ItemSizes[0])
		}
		indexWrites += len(r.IndexWriteSizes)
		if r.IndexWCU() != float64(len(r.IndexWriteSizes)) {
			t.Errorf("transition's index writes %v cost %.0f WCU, want 1 each", r.IndexWriteSizes, r.IndexWCU())
		}
	}
	if indexWrites == 0 {
		t.Fatalf("no transition accounted for a timers index write: %+v", reports)
	}
}

// oldLayoutTable creates a table as versions before the INCLUDE and
// KEYS_ONLY projections did: the retired timers and listing indexes,
// projecting whole items, where the schema now has their replacements. With variant set, the replacement is there
// under its own name but with the retired index's projection.
func oldLayoutTable(t *testing.T, variant bool) string {
	t.Helper()
	name := fmt.Sprintf("rl-%d-%s", tableSeq.Add(1), unsafeTableChars.ReplaceAllString(t.Name(), "_"))
	sc := tableschema.Table()
	var defs []types.AttributeDefinition
	for _, a := range sc.Attributes() {
		defs = append(defs, types.AttributeDefinition{AttributeName: aws.String(a.Name), AttributeType: types.ScalarAttributeType(a.Type)})
	}
	keys := func(ix tableschema.Index) []types.KeySchemaElement {
		return []types.KeySchemaElement{
			{AttributeName: aws.String(ix.PartitionKey.Name), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(ix.SortKey.Name), KeyType: types.KeyTypeRange},
		}
	}
	var gsis []types.GlobalSecondaryIndex
	retired := map[string]tableschema.Index{}
	for _, ix := range sc.Retired {
		retired[ix.Name] = ix
	}
	for _, ix := range sc.Indexes {
		if ix.Replaces != "" {
			name := ix.Name
			ix = retired[ix.Replaces]
			if variant && name == tableschema.TimerIndex {
				ix.Name = name
			}
		}
		gsis = append(gsis, types.GlobalSecondaryIndex{
			IndexName: aws.String(ix.Name), KeySchema: keys(ix),
			Projection: &types.Projection{ProjectionType: types.ProjectionType(ix.Projection)},
		})
	}
	_, err := db.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName: aws.String(name), AttributeDefinitions: defs, GlobalSecondaryIndexes: gsis,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(tableschema.PK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(tableschema.SK), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatalf("create table in the old layout: %v", err)
	}
	t.Cleanup(func() {
		if err := store.DeleteTable(context.Background(), db, name); err != nil {
			t.Errorf("delete table %s: %v", name, err)
		}
	})
	return name
}

// TestEnsureTableMigratesTheRetiredTimersIndex: a persisted table of the
// old layout gets the new timers index, filled from the items already
// there, and loses the retired one; a second start changes nothing.
func TestEnsureTableMigratesTheRetiredTimersIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := oldLayoutTable(t, false)
	st := store.New(db, name, store.WithClock(func() time.Time { return ledgertest.T0 }))
	fire := ledgertest.T0.Add(time.Hour)
	if _, err := st.CreateJob(ctx, ledger.Job{Name: "nightly", Spec: []byte(`{"cron":"0 2 * * *"}`), NextFireAt: fire}); err != nil {
		t.Fatal(err)
	}
	nr := ledgertest.NewRun("nightly", "a", "b")
	for i := range nr.Tasks {
		// Far enough for the index to hold the instances' timers.
		nr.Tasks[i].Policy.DepsRecheck = time.Hour
	}
	if _, err := st.CreateRun(ctx, nr, ledgertest.T0); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	changes, err := store.EnsureTable(ctx, db, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("migrated in %v: %v", time.Since(start).Round(time.Millisecond), changes)
	if len(changes) != 6 || !strings.HasPrefix(changes[0], "added index "+tableschema.TimerIndex) ||
		!strings.HasPrefix(changes[1], "added index "+tableschema.ListIndex) ||
		!strings.HasPrefix(changes[2], "added index "+tableschema.LiveIndex) ||
		!strings.HasPrefix(changes[3], "deleted retired index "+tableschema.RetiredTimerIndex) ||
		!strings.HasPrefix(changes[4], "deleted retired index "+tableschema.RetiredListIndex) ||
		!strings.HasPrefix(changes[5], "deleted retired index "+tableschema.RetiredLiveIndex) {
		t.Fatalf("changes %q, want the new timers, listing and live indexes added and the retired ones deleted", changes)
	}
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ix := range out.Table.GlobalSecondaryIndexes {
		p := ix.Projection
		got = append(got, fmt.Sprintf("%s %s %s %v", aws.ToString(ix.IndexName), ix.IndexStatus, p.ProjectionType, p.NonKeyAttributes))
	}
	slices.Sort(got)
	wantIx := []string{
		tableschema.ListIndex + " ACTIVE KEYS_ONLY []",
		tableschema.LiveIndex + " ACTIVE INCLUDE [" + tableschema.RunID + " " + tableschema.LogicalTime + " " + tableschema.Trigger + "]",
		tableschema.TimerIndex + " ACTIVE INCLUDE [" + tableschema.TimerKind + " " + tableschema.JobName + "]",
	}
	if !slices.Equal(got, wantIx) {
		t.Fatalf("indexes after the migration:\n%q\nwant\n%q", got, wantIx)
	}

	// The items written before the migration are in the new index.
	var due []ledger.DueTimer
	for shard := range tableschema.TimerShards {
		page, _, err := st.ListDueTimers(ctx, shard, ledgertest.T0.Add(365*24*time.Hour), 0, "")
		if err != nil {
			t.Fatal(err)
		}
		due = append(due, page...)
	}
	kinds := map[ledger.ItemKind]int{}
	for _, d := range due {
		kinds[d.Item]++
		if d.Job != "nightly" {
			t.Errorf("due timer %+v: job %q, want nightly", d, d.Job)
		}
	}
	if kinds[ledger.TimerOfJob] != 1 || kinds[ledger.TimerOfRun] != 1 || kinds[ledger.TimerOfInstance] != 2 {
		t.Fatalf("due timers after the migration: %+v, want the job's, the run's and two instances'", due)
	}

	// The run and the job written before the migration are listed from
	// the new listing index.
	runs, _, err := st.ListRuns(ctx, ledger.RunFilter{})
	if err != nil || len(runs) != 1 || runs[0].Job != "nightly" {
		t.Fatalf("runs listed after the migration: %+v %v, want the one run", runs, err)
	}
	jobs, _, err := st.ListJobs(ctx, 0, "")
	if err != nil || len(jobs) != 1 || jobs[0].Name != "nightly" {
		t.Fatalf("jobs listed after the migration: %+v %v, want nightly", jobs, err)
	}
	// The run is in the new live index, with what its readers decode.
	live, err := st.ListUnfinishedRuns(ctx, "nightly")
	if err != nil || len(live) != 1 || live[0].ID != runs[0].ID || !live[0].LogicalTime.Equal(runs[0].LogicalTime) || live[0].Trigger != runs[0].Trigger {
		t.Fatalf("unfinished runs after the migration: %+v %v, want %s", live, err, runs[0].ID)
	}

	again, err := store.EnsureTable(ctx, db, name)
	if err != nil || len(again) != 0 {
		t.Fatalf("second EnsureTable: %q %v, want no change", again, err)
	}
}

// TestEnsureTableRefusesAnIndexItCannotConvert: an index of this version's
// name with another projection cannot change in place: EnsureTable says so
// and changes nothing.
func TestEnsureTableRefusesAnIndexItCannotConvert(t *testing.T) {
	t.Parallel()
	name := oldLayoutTable(t, true)
	changes, err := store.EnsureTable(context.Background(), db, name)
	if !errors.Is(err, store.ErrTableLayout) || len(changes) != 0 {
		t.Fatalf("EnsureTable: %q %v, want ErrTableLayout and no change", changes, err)
	}
	if !strings.Contains(err.Error(), tableschema.TimerIndex) || !strings.Contains(err.Error(), "recreate") {
		t.Fatalf("error %q does not name the index and the remedy", err)
	}
}

// TestEnsureTableCreatesANewTable: no table yet is a plain create, with
// nothing to report.
func TestEnsureTableCreatesANewTable(t *testing.T) {
	t.Parallel()
	name := fmt.Sprintf("rl-%d-%s", tableSeq.Add(1), t.Name())
	changes, err := store.EnsureTable(context.Background(), db, name)
	t.Cleanup(func() { _ = store.DeleteTable(context.Background(), db, name) })
	if err != nil || len(changes) != 0 {
		t.Fatalf("EnsureTable: %q %v", changes, err)
	}
	ts := store.New(db, name)
	if _, _, err := ts.ListDueTimers(context.Background(), 0, ledgertest.T0, 0, ""); err != nil {
		t.Fatalf("the new table's timers index: %v", err)
	}
}
