package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/ledger/ledgertest"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

var errCrash = errors.New("injected crash")

// crasher stops the process, as far as the store can tell, at one write
// call: before the call reaches DynamoDB, or after DynamoDB applied it
// and before the store learns so.
type crasher struct {
	mu      sync.Mutex
	after   bool
	crashAt int // 1-based write call of the armed operation; 0: never
	writes  int
}

func (c *crasher) arm(at int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashAt, c.writes = at, 0
}

func (c *crasher) writesSeen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

func (c *crasher) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("crash",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				switch in.Parameters.(type) {
				case *dynamodb.PutItemInput, *dynamodb.UpdateItemInput, *dynamodb.TransactWriteItemsInput, *dynamodb.DeleteItemInput:
				default:
					return next.HandleInitialize(ctx, in)
				}
				c.mu.Lock()
				c.writes++
				crash := c.writes == c.crashAt
				after := c.after
				c.mu.Unlock()
				if crash && !after {
					return middleware.InitializeOutput{}, middleware.Metadata{}, errCrash
				}
				out, md, err := next.HandleInitialize(ctx, in)
				if crash && err == nil {
					return middleware.InitializeOutput{}, md, errCrash
				}
				return out, md, err
			}), middleware.Before)
	})
}

// TestHistoryCompleteAfterACrashAtEveryWriteBoundary drives an instance
// through enough transitions and attempts that its writer spills history
// records and evicts attempt records, and stops the writer at every write
// call of every step, before the call and after it. Each step is then
// delivered again, as a redelivery would after a crash. The history stays
// complete, in order and without a record twice, it folds to the stored
// snapshot, and every event is applied exactly once.
func TestHistoryCompleteAfterACrashAtEveryWriteBoundary(t *testing.T) {
	for _, after := range []bool{false, true} {
		name := "before the call"
		if after {
			name = "after the call"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ts := newStore(t)
			ctx := context.Background()
			c := &crasher{after: after}
			cs := ledger.New(store.New(env.DynamoDBClient(c.option), ts.table, store.WithClock(ts.Clock.Now)))
			v := ts.MustCreate(t, ledgertest.NewRun("crashes", "main"))
			key := v.Tasks[0].Instance.Key
			now := ts.Clock.Now()

			events := []statemodel.Event{ledgertest.Ev(statemodel.EvDepsMet, 0)}
			const attempts = statemodel.MaxInlineAttempts + 2
			for n := 1; n <= attempts; n++ {
				failed := ledgertest.Ev(statemodel.EvFailed, n)
				failed.Reason, failed.Retryable = fmt.Sprintf("attempt %d failed", n), new(bool)
				events = append(events, ledgertest.Dispatch(n), ledgertest.Started(n, "w"), failed)
				if n < attempts {
					retry := ledgertest.Ev(statemodel.EvManualRetry, 0)
					retry.Operator, retry.Reason = "ana", "again"
					events = append(events, retry)
				}
			}
			crashes := 0
			for i, e := range events {
				for at := 1; ; at++ {
					c.arm(at)
					res, err := cs.Transition(ctx, key, e, now, ledgertest.Policy())
					if errors.Is(err, errCrash) {
						crashes++
						continue
					}
					if err != nil || (res.Outcome != statemodel.Applied && res.Outcome != statemodel.Duplicate) {
						t.Fatalf("event %d (%s), crash at write %d: %s, %v", i, e, at, res.Outcome, err)
					}
					if c.writesSeen() < at {
						break // the step made fewer writes: every boundary was tried
					}
				}
			}
			c.arm(0)

			hist, err := ts.Store.FullHistory(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if want := len(events) + 1; len(hist) != want {
				t.Fatalf("%d history records, want %d (creation and one per event)", len(hist), want)
			}
			for i, tr := range hist {
				if tr.Seq != int64(i+1) {
					t.Fatalf("record %d has seq %d: the history is not complete and in order", i, tr.Seq)
				}
				if i > 0 && tr.EventID != events[i-1].ID {
					t.Fatalf("record %d is event %s, want %s", i, tr.EventID, events[i-1].ID)
				}
			}
			inst, err := ts.GetInstance(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := statemodel.Replay(hist); err != nil || !got.EqualState(inst.Snapshot) {
				t.Fatalf("the history folds to %+v (%v), the instance is %+v", got, err, inst.Snapshot)
			}
			if len(inst.History) > ledger.MaxInlineHistory {
				t.Fatalf("the instance item holds %d records, at most %d", len(inst.History), ledger.MaxInlineHistory)
			}
			kinds := map[string]int{}
			for _, it := range scanAll(t, ts.table) {
				kinds[kind(it)]++
			}
			if kinds["history"] == 0 || kinds["attempt"] != attempts-statemodel.MaxInlineAttempts {
				t.Fatalf("items by kind %v: the scenario must spill history and evict %d attempts", kinds, attempts-statemodel.MaxInlineAttempts)
			}
			a, err := ts.GetAttempt(ctx, key, 1)
			if err != nil || a.WorkerID != "w" || a.Outcome != statemodel.OutcomeFailed {
				t.Fatalf("evicted attempt 1: %+v, %v", a, err)
			}
			t.Logf("%d crashes injected over %d events", crashes, len(events))
		})
	}
}

// TestHistoryPages: History pages through spilled and inline records
// alike, and a token of another instance is refused.
func TestHistoryPages(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.MustCreate(t, ledgertest.NewRun("pages", "a", "b"))
	key := v.Tasks[0].Instance.Key
	now := ts.Clock.Now()
	for range 2 * ledger.MaxInlineHistory {
		ts.Step(t, key, ledgertest.Ev(statemodel.EvPause, 0), now)
		ts.Step(t, key, ledgertest.Ev(statemodel.EvResume, 0), now)
	}
	full, err := ts.Store.FullHistory(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(full) != 4*ledger.MaxInlineHistory+1 {
		t.Fatalf("%d records, want %d", len(full), 4*ledger.MaxInlineHistory+1)
	}
	var paged []statemodel.Transition
	token, pages := "", 0
	for {
		page, next, err := ts.History(ctx, key, 7, token)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 7 {
			t.Fatalf("a page of %d records, limit 7", len(page))
		}
		paged = append(paged, page...)
		pages++
		if next == "" {
			break
		}
		token = next
	}
	if len(paged) != len(full) || pages != (len(full)+6)/7 {
		t.Fatalf("%d records in %d pages, want %d in %d", len(paged), pages, len(full), (len(full)+6)/7)
	}
	for i := range paged {
		if paged[i].Seq != full[i].Seq || paged[i].EventID != full[i].EventID {
			t.Fatalf("page record %d is seq %d, want %d", i, paged[i].Seq, full[i].Seq)
		}
	}
	_, next, err := ts.History(ctx, key, 3, "")
	if err != nil || next == "" {
		t.Fatalf("first page: next %q, %v", next, err)
	}
	other := ledger.InstanceKey{Run: key.Run, Task: "b"}
	if _, _, err := ts.History(ctx, other, 3, next); !errors.Is(err, ledger.ErrInvalidPageToken) {
		t.Fatalf("another instance's token: %v, want ErrInvalidToken", err)
	}
}
