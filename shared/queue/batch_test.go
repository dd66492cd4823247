package queue_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/queue"
)

// receiveAll receives until want messages have arrived (or within runs
// out), deleting none.
func receiveAll(t *testing.T, url string, want int, within time.Duration) []queue.Message {
	t.Helper()
	var got []queue.Message
	deadline := time.Now().Add(within)
	for len(got) < want {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d messages from %s within %s", len(got), want, queue.Name(url), within)
		}
		msgs, err := client.Receive(t.Context(), url, queue.ReceiveOptions{MaxMessages: 10, Wait: time.Second, VisibilityTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	return got
}

// TestSendBatch: 25 entries go in three requests; the one SQS would refuse
// is refused alone, before any request, with Send's error; every other
// arrives once, with its attributes, under the id its result names.
func TestSendBatch(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{VisibilityTimeout: 30 * time.Second})
	var entries []queue.Entry
	for i := range 25 {
		entries = append(entries, queue.Entry{Body: fmt.Sprintf(`{"n":%d}`, i), Attrs: map[string]string{"n": fmt.Sprint(i)}})
	}
	entries[7].Body = "" // refused: an empty body
	results, err := client.SendBatch(t.Context(), q.URL, entries)
	if !errors.Is(err, queue.ErrInvalidMessage) || len(results) != len(entries) {
		t.Fatalf("SendBatch: %d results, error %v; want 25 and the invalid entry's error", len(results), err)
	}
	_, single := client.Send(t.Context(), q.URL, "", nil)
	if !errors.Is(results[7].Err, queue.ErrInvalidMessage) || !errors.Is(single, queue.ErrInvalidMessage) || results[7].ID != "" {
		t.Fatalf("entry 7: %+v, want what Send says: %v", results[7], single)
	}
	ids := map[string]int{}
	for i, r := range results {
		if i != 7 && (r.Err != nil || r.ID == "") {
			t.Fatalf("entry %d: %+v", i, r)
		}
		if i != 7 {
			ids[r.ID] = i
		}
	}
	msgs := receiveAll(t, q.URL, 24, 20*time.Second)
	if len(msgs) != 24 {
		t.Fatalf("received %d messages, want 24", len(msgs))
	}
	for _, m := range msgs {
		i, ok := ids[m.ID]
		if !ok {
			t.Fatalf("message %s is no entry's", m.ID)
		}
		delete(ids, m.ID)
		if m.Body != entries[i].Body || m.Attributes["n"] != fmt.Sprint(i) {
			t.Errorf("message of entry %d: body %q attributes %v", i, m.Body, m.Attributes)
		}
	}
}

// TestSendBatchOverTheRequestSize: three 100 KiB messages exceed one
// request's 256 KiB together; SendBatch splits them and all arrive.
func TestSendBatchOverTheRequestSize(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	var entries []queue.Entry
	for i := range 3 {
		entries = append(entries, queue.Entry{Body: fmt.Sprint(i) + strings.Repeat("x", 100*1024)})
	}
	results, err := client.SendBatch(t.Context(), q.URL, entries)
	if err != nil {
		t.Fatalf("SendBatch: %v %+v", err, results)
	}
	var firsts []string
	for _, m := range receiveAll(t, q.URL, 3, 20*time.Second) {
		firsts = append(firsts, m.Body[:1])
	}
	slices.Sort(firsts)
	if !slices.Equal(firsts, []string{"0", "1", "2"}) {
		t.Fatalf("received %v", firsts)
	}
}

// TestSendBatchDelayed: an entry's delay holds it back as SendDelayed's does.
func TestSendBatchDelayed(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	results, err := client.SendBatch(t.Context(), q.URL, []queue.Entry{{Body: "now"}, {Body: "later", Delay: time.Minute}})
	if err != nil {
		t.Fatalf("SendBatch: %v %+v", err, results)
	}
	requireCounts(t, q.URL, queue.Counts{Visible: 1, Delayed: 1})
	if _, err := client.SendBatch(t.Context(), q.URL, []queue.Entry{{Body: "x", Delay: 16 * time.Minute}}); !errors.Is(err, queue.ErrDelayTooLong) {
		t.Fatalf("a 16 minute delay: %v", err)
	}
}

// TestSendBatchToAMissingQueue: a request that fails fails each of its
// entries with the request's error.
func TestSendBatchToAMissingQueue(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	missing := strings.TrimSuffix(q.URL, queue.Name(q.URL)) + "no-such-queue-batch"
	results, err := client.SendBatch(t.Context(), missing, []queue.Entry{{Body: "a"}, {Body: "b"}})
	if !errors.Is(err, queue.ErrQueueNotFound) {
		t.Fatalf("SendBatch to a missing queue: %v", err)
	}
	for i, r := range results {
		if !errors.Is(r.Err, queue.ErrQueueNotFound) {
			t.Errorf("entry %d: %+v", i, r)
		}
	}
}

// TestDeleteBatch: twelve deliveries go in two requests and leave the
// queue empty; an empty handle is refused alone, and a handle of a message
// already deleted succeeds, as with Delete.
func TestDeleteBatch(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{VisibilityTimeout: 30 * time.Second})
	var entries []queue.Entry
	for i := range 12 {
		entries = append(entries, queue.Entry{Body: fmt.Sprint(i)})
	}
	if _, err := client.SendBatch(t.Context(), q.URL, entries); err != nil {
		t.Fatal(err)
	}
	var handles []string
	for _, m := range receiveAll(t, q.URL, 12, 20*time.Second) {
		handles = append(handles, m.ReceiptHandle)
	}
	requireCounts(t, q.URL, queue.Counts{InFlight: 12})
	results, err := client.DeleteBatch(t.Context(), q.URL, append(handles, ""))
	if !errors.Is(err, queue.ErrReceiptInvalid) || len(results) != 13 || !errors.Is(results[12].Err, queue.ErrReceiptInvalid) {
		t.Fatalf("DeleteBatch: %v %+v", err, results)
	}
	for i, r := range results[:12] {
		if r.Err != nil {
			t.Errorf("entry %d: %v", i, r.Err)
		}
	}
	requireCounts(t, q.URL, queue.Counts{})
	if _, err := client.DeleteBatch(t.Context(), q.URL, handles[:1]); err != nil {
		t.Fatalf("deleting a deleted message again: %v", err)
	}
}
