package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// TestBadInput: oversized items and invalid keys give typed errors and
// leave the table exactly as it was.
func TestBadInput(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	v := ts.mustCreate(t, newRun("good", "main"))
	key := v.Tasks[0].Instance.Key
	now := ts.toQueued(t, key)
	ts.step(t, key, started(1, "w"), now)
	before := countItems(t, ts.table)
	stored, err := ts.GetInstance(ctx, key)
	if err != nil {
		t.Fatal(err)
	}

	big := []byte(strings.Repeat("x", 410*1024))
	withTasks := func(n int, payload []byte) store.NewRun {
		tasks := make([]string, n)
		for i := range tasks {
			tasks[i] = fmt.Sprintf("t%02d", i)
		}
		nr := newRun("bad", tasks...)
		for i := range nr.Tasks {
			nr.Tasks[i].Payload = payload
		}
		return nr
	}
	create := func(mut func(*store.NewRun)) error {
		nr := newRun("bad", "main")
		mut(&nr)
		_, err := ts.CreateRun(ctx, nr, now)
		return err
	}
	huge := ev(statemodel.EvSucceeded, 1)
	huge.OutputRef = string(big)
	evidence := ev(statemodel.EvCancelRequested, 0)
	evidence.Reason = string(big)
	longID := ev(statemodel.EvSucceeded, 1)
	longID.ID = strings.Repeat("e", 1100)

	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"payload over 400 KB", func() error { _, err := ts.CreateRun(ctx, withTasks(1, big), now); return err }, store.ErrItemTooLarge},
		{"transaction over 4 MB", func() error {
			_, err := ts.CreateRun(ctx, withTasks(store.MaxTasksPerRun, []byte(strings.Repeat("y", 90*1024))), now)
			return err
		}, store.ErrItemTooLarge},
		{"49 tasks", func() error { _, err := ts.CreateRun(ctx, withTasks(store.MaxTasksPerRun+1, nil), now); return err }, store.ErrTooManyTasks},
		{"empty job", func() error { return create(func(nr *store.NewRun) { nr.Job = "" }) }, store.ErrInvalidKey},
		{"job with separator", func() error { return create(func(nr *store.NewRun) { nr.Job = "a#b" }) }, store.ErrInvalidKey},
		{"job over 1024 bytes", func() error { return create(func(nr *store.NewRun) { nr.Job = strings.Repeat("j", 1025) }) }, store.ErrInvalidKey},
		{"empty run id", func() error { return create(func(nr *store.NewRun) { nr.ID = "" }) }, store.ErrInvalidKey},
		{"task over 1000 bytes", func() error { return create(func(nr *store.NewRun) { nr.Tasks[0].ID = strings.Repeat("t", 1001) }) }, store.ErrInvalidKey},
		{"empty task", func() error { return create(func(nr *store.NewRun) { nr.Tasks[0].ID = "" }) }, store.ErrInvalidKey},
		{"idempotency key over 1024 bytes", func() error {
			return create(func(nr *store.NewRun) { nr.Idempotency = &store.Idempotency{Key: strings.Repeat("k", 1100)} })
		}, store.ErrInvalidKey},
		{"invalid policy", func() error { return create(func(nr *store.NewRun) { nr.Tasks[0].Policy.Retry.MaxAttempts = 0 }) }, store.ErrInvalidInput},
		{"job spec over 400 KB", func() error { _, err := ts.CreateJob(ctx, store.Job{Name: "big", Spec: big}); return err }, store.ErrItemTooLarge},
		{"job name empty", func() error { _, err := ts.CreateJob(ctx, store.Job{Name: ""}); return err }, store.ErrInvalidKey},
		{"output ref over 400 KB", func() error { _, err := ts.Transition(ctx, key, huge, now, policy()); return err }, store.ErrItemTooLarge},
		{"reason over 400 KB", func() error { _, err := ts.Transition(ctx, key, evidence, now, policy()); return err }, store.ErrItemTooLarge},
		{"event id over the key limit", func() error { _, err := ts.Transition(ctx, key, longID, now, policy()); return err }, store.ErrInvalidKey},
		{"heartbeat of an invalid key", func() error {
			_, err := ts.Heartbeat(ctx, store.InstanceKey{Run: key.Run, Task: "a#b"}, 1, now, 1)
			return err
		}, store.ErrInvalidKey},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	var tooLarge *store.ItemTooLargeError
	if _, err := ts.CreateRun(ctx, withTasks(1, big), now); !errors.As(err, &tooLarge) || tooLarge.Size <= store.MaxItemSize {
		t.Errorf("oversized run: %v does not say the size", err)
	}
	if after := countItems(t, ts.table); after != before {
		t.Fatalf("bad input changed the table: %d items, was %d", after, before)
	}
	inst, err := ts.GetInstance(ctx, key)
	if err != nil || !inst.Snapshot.EqualState(stored.Snapshot) {
		t.Fatalf("bad input changed the instance: %+v (%v)", inst.Snapshot, err)
	}
}

// TestItemSizeMatchesDynamoDB: the store's size rules agree with the
// endpoint's limit. An item sized exactly MaxItemSize by the rules is
// accepted and one byte more is refused, for a flat item and for one whose
// bytes sit in nested lists and maps.
func TestItemSizeMatchesDynamoDB(t *testing.T) {
	t.Parallel()
	ts := newStore(t)
	ctx := context.Background()
	shapes := map[string]func(pad string) map[string]types.AttributeValue{
		"flat": func(pad string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"pad": &types.AttributeValueMemberS{Value: pad}, "n": &types.AttributeValueMemberN{Value: "12345"}}
		},
		"nested": func(pad string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{
				&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
					"pad": &types.AttributeValueMemberS{Value: pad}, "ok": &types.AttributeValueMemberBOOL{Value: true},
				}},
				&types.AttributeValueMemberN{Value: "-0.00123400"},
			}}}
		},
	}
	for name, shape := range shapes {
		build := func(size int) map[string]types.AttributeValue {
			it := shape("")
			it["pk"] = &types.AttributeValueMemberS{Value: "SIZE#" + name}
			it["sk"] = &types.AttributeValueMemberS{Value: fmt.Sprint(size)}
			base := store.ItemSize(it)
			it = shape(strings.Repeat("p", size-base))
			it["pk"] = &types.AttributeValueMemberS{Value: "SIZE#" + name}
			it["sk"] = &types.AttributeValueMemberS{Value: fmt.Sprint(size)}
			if got := store.ItemSize(it); got != size {
				t.Fatalf("%s: built %d bytes, want %d", name, got, size)
			}
			return it
		}
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(ts.table), Item: build(store.MaxItemSize)})
		if err != nil {
			t.Errorf("%s: an item of exactly %d bytes was refused: %v", name, store.MaxItemSize, err)
		}
		_, err = db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(ts.table), Item: build(store.MaxItemSize + 1)})
		if err == nil {
			t.Errorf("%s: an item of %d bytes was accepted: the size rules undercount", name, store.MaxItemSize+1)
		}
	}
}
